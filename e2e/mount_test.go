package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestMountRealClients: `fleetmgr mount claude` (HTTP, then --stdio in its
// place) and `fleetmgr mount opencode` (into a project's opencode.jsonc
// with comments) make the real clients report the manager connected,
// under a throwaway HOME; from inside a herdr pane, mount refuses.
func TestMountRealClients(t *testing.T) {
	dir := interopDir(t)
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	e.StartServe()
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"kb"}, false, 15*time.Second)

	home := filepath.Join(e.Dir, "home")
	proj := filepath.Join(e.Dir, "operator")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	env := cliEnv(e, home)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") { // claude and opencode on PATH, as for an operator
			env[i] = "PATH=" + filepath.Join(dir, "node_modules", ".bin") + string(os.PathListSeparator) + kv[len("PATH="):]
		}
	}
	fleetmgr := func(args ...string) (string, error) {
		return runCLI(t, proj, env, 2*time.Minute, bins.Fleetmgr, append([]string{"--config", e.ConfigPath}, args...)...)
	}
	claude := filepath.Join(dir, "node_modules", ".bin", "claude")
	opencode := filepath.Join(dir, "node_modules", ".bin", "opencode")

	t.Run("claude code", func(t *testing.T) {
		if out, err := fleetmgr("mount", "claude"); err != nil || !strings.Contains(out, "mounted fleets in claude (user scope): "+e.URL()) {
			t.Fatalf("mount claude: %v\n%s", err, out)
		}
		out, err := runCLI(t, proj, env, 2*time.Minute, claude, "mcp", "list")
		if err != nil || !regexp.MustCompile(`(?m)^fleets: `+regexp.QuoteMeta(e.URL())+` \(HTTP\) - .*Connected`).MatchString(out) {
			t.Fatalf("claude mcp list after mount claude: %v\n%s", err, out)
		}
		// --stdio takes the entry's place.
		if out, err := fleetmgr("mount", "claude", "--stdio"); err != nil || !strings.Contains(out, "replacing the entry of that name") {
			t.Fatalf("mount claude --stdio: %v\n%s", err, out)
		}
		out, err = runCLI(t, proj, env, 2*time.Minute, claude, "mcp", "list")
		if err != nil || !regexp.MustCompile(`(?m)^fleets: `+regexp.QuoteMeta(bins.Fleetmgr)+` .*mcp - .*Connected`).MatchString(out) {
			t.Fatalf("claude mcp list after mount claude --stdio: %v\n%s", err, out)
		}
	})

	t.Run("opencode", func(t *testing.T) {
		p := filepath.Join(proj, "opencode.jsonc")
		orig := "// the operator's own settings\n{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"share\": \"disabled\", // keep\n}\n"
		if err := os.WriteFile(p, []byte(orig), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := fleetmgr("mount", "opencode", "--scope", "project"); err != nil || !strings.Contains(out, "wrote "+p) {
			t.Fatalf("mount opencode: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), "// the operator's own settings") || !strings.Contains(string(b), `"share": "disabled", // keep`) {
			t.Fatalf("mount opencode lost the operator's settings:\n%s", b)
		}
		out, err := runCLI(t, proj, env, 2*time.Minute, opencode, "mcp", "list")
		plain := ansi.ReplaceAllString(out, "")
		if err != nil || !regexp.MustCompile(`(?im)fleets\s+connected\b`).MatchString(plain) {
			t.Fatalf("opencode mcp list: %v\n%s", err, out)
		}
	})

	t.Run("refused inside a herdr pane", func(t *testing.T) {
		st := readState(t, e, "kb")
		pane, _ := newPane(t, st.HerdrSocket, "operator-mounts")
		out := filepath.Join(e.Dir, "mount-inpane.out")
		line := "cd " + shellQuote(proj) + " && env HOME=" + shellQuote(home) + " " + shellQuote(bins.Fleetmgr) + " --config " + shellQuote(e.ConfigPath) +
			" mount claude > " + out + ".tmp 2>&1; echo \"exit $?\" >> " + out + ".tmp; mv " + out + ".tmp " + out
		runInPane(t, st.HerdrSocket, pane, line)
		txt := harness.WaitFile(t, out, time.Minute)
		t.Logf("fleetmgr mount claude inside pane %s:\n%s", pane, txt)
		if !strings.Contains(txt, "refusing to mount fleetmgr from inside a herdr pane") || !strings.Contains(txt, "must never mount the manager") || !strings.Contains(txt, "exit 3") {
			t.Fatalf("mount claude inside a pane:\n%s", txt)
		}
	})
}
