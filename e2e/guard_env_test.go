package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// escapeWrap is a member's escape from its pane: a new session (setsid, the pane's session
// left, reparented to init) and the two variables the old env rule read removed. What is left
// (HERDR_SESSION, HERDR_SOCKET_PATH, HERDR_TAB_ID, HERDR_WORKSPACE_ID, HERDR_BIN_PATH) still
// says which herdr session it came from.
const escapeWrap = "setsid -f sh -c 'env -u HERDR_PANE_ID -u HERDR_ENV PROBE'"

// herdrEnvLine waits for a refusal line of rule herdr-env naming every variable in names
// (the log's herdr_env attribute) and returns it.
func herdrEnvLine(t *testing.T, serve *harness.Serve, names ...string) string {
	t.Helper()
	re := regexp.MustCompile(`guard refused a caller"? rule=herdr-env .*herdr_env=(\S+)`)
	var line string
	wait.For(t, 5*time.Second, fmt.Sprintf("a herdr-env refusal naming %v in serve's log", names), func() (bool, string) {
		for _, m := range re.FindAllStringSubmatch(serve.Log(), -1) {
			ok := true
			for _, n := range names {
				ok = ok && strings.Contains(","+m[1]+",", ","+n+",")
			}
			if ok {
				line = m[0]
				return true, ""
			}
		}
		return false, serve.Log()
	})
	return line
}

// cleanEnviron is e's environment with no herdr marker, plus extra.
func cleanEnviron(e *harness.Env, extra ...string) []string {
	var env []string
	for _, kv := range e.Environ {
		if !strings.HasPrefix(kv, "HERDR_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// TestGuardHerdrEnvOverHTTP: the setsid + partial scrub escape from a fleet's pane is refused
// by rule herdr-env over the HTTP mount, the log naming the variables that matched; a process
// whose only marker is an operator session's HERDR_SOCKET_PATH is served, a fleet session's
// refused.
func TestGuardHerdrEnvOverHTTP(t *testing.T) {
	e, serve := guardEnv(t)
	v := probeInPane(t, e, e.HerdrSocket("kb"), "escape", escapeWrap)
	refusedBy(t, serve, v, "herdr-env")
	line := herdrEnvLine(t, serve, "HERDR_SESSION", "HERDR_SOCKET_PATH", "HERDR_TAB_ID", "HERDR_WORKSPACE_ID", "HERDR_BIN_PATH")
	if strings.Contains(line, "HERDR_PANE_ID") || !strings.Contains(line, "herdr_session=kb") {
		t.Fatalf("refusal line: %s", line)
	}

	probe := func(env []string) string {
		cmd := exec.Command(bins.Probe, "-url", e.URL())
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mcpprobe: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	if v := probe(cleanEnviron(e, "HERDR_SOCKET_PATH="+e.HerdrSocket("ops"))); !strings.HasPrefix(v, "OK") {
		t.Fatalf("only HERDR_SOCKET_PATH of operator session ops: %s\n%s", v, serve.Log())
	}
	refusedBy(t, serve, probe(cleanEnviron(e, "HERDR_SOCKET_PATH="+e.HerdrSocket("docs"))), "herdr-env")
	herdrEnvLine(t, serve, "HERDR_SOCKET_PATH")
}

// TestGuardHerdrEnvOverUnixSocket: the same escape through `fleetmgr mcp` (the unix-socket
// mount) is refused, the bridge exiting 3 with the guard's answer; the operator-session
// control is served.
func TestGuardHerdrEnvOverUnixSocket(t *testing.T) {
	e, serve := guardEnv(t)
	out := filepath.Join(e.Dir, "escape.out")
	script := filepath.Join(e.Dir, "escape.sh")
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	body := fmt.Sprintf("echo '%s' | %s --config %s mcp --no-start > %s.tmp 2>&1\necho exit=$? >> %s.tmp\nmv %s.tmp %s\n",
		init, bins.Fleetmgr, e.ConfigPath, out, out, out, out)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	pane, _ := newPane(t, e.HerdrSocket("kb"), "escape")
	runInPane(t, e.HerdrSocket("kb"), pane, strings.ReplaceAll(escapeWrap, "PROBE", "sh "+script))
	v := harness.WaitFile(t, out, 20*time.Second)
	if !strings.Contains(v, "fleetmgr refused this caller (rule herdr-env)") || strings.Contains(v, `"result"`) || !strings.Contains(v, "exit=3") {
		t.Fatalf("escaped stdio bridge not refused:\n%s", v)
	}
	herdrEnvLine(t, serve, "HERDR_SESSION", "HERDR_SOCKET_PATH")

	cmd := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "mcp", "--no-start")
	cmd.Env = cleanEnviron(e, "HERDR_SOCKET_PATH="+e.HerdrSocket("ops"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-ops"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("bridge with only an operator session's HERDR_SOCKET_PATH: %v\n%s", err, serve.Log())
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_list", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(textOf(res), `"kb"`) {
		t.Fatalf("fleetmgr_list: %v %s", err, textOf(res))
	}
}
