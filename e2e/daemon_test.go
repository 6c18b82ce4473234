package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// What package daemon adds to serve: the dashboard mounted at / behind the
// guard, lifecycle progress carried as a typed step (not text to parse),
// add and remove reloading a running serve, and serve --env-file.

// TestDaemonDashboard: serve mounts the dashboard at / on [manager]
// listen, behind the same guard middleware as /mcp: the operator's process
// gets the page and the snapshot naming the fleets; a request with a
// foreign Host, and a process in a herdr pane, get 403 and a logged
// refusal. /mcp, /metrics and /healthz are still served beside it.
func TestDaemonDashboard(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	serve := e.StartServe()
	base := "http://" + e.Listen

	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") || !strings.Contains(string(page), "<html") {
		t.Fatalf("GET /: %d, CSP %q\n%.300s", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), page)
	}
	resp, err = http.Get(base + "/api/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(snap), `"kb"`) {
		t.Fatalf("GET /api/snapshot: %d\n%.500s", resp.StatusCode, snap)
	}

	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Host = "evil.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET / with Host evil.example: %d, want 403", resp.StatusCode)
	}
	waitLog(t, serve, regexp.MustCompile(`guard refused a caller"? rule=host`))

	// A process in a fleet's pane: refused by the pane rules, on the page,
	// its event stream and its snapshot alike.
	sock := e.HerdrSocket("kb")
	pane, _ := newPane(t, sock, "dash")
	var line []string
	paths := []string{"/", "/events", "/api/snapshot"}
	for i, p := range paths {
		line = append(line, fmt.Sprintf("%s -get -url %s%s -out %s", bins.Probe, base, p, filepath.Join(e.Dir, fmt.Sprintf("dash%d.out", i))))
	}
	runInPane(t, sock, pane, strings.Join(line, "; "))
	for i, p := range paths {
		if v := harness.WaitFile(t, filepath.Join(e.Dir, fmt.Sprintf("dash%d.out", i)), 20*time.Second); !strings.HasPrefix(v, "HTTP 403") {
			t.Fatalf("GET %s from a pane: %s, want HTTP 403", p, v)
		}
	}
	waitLog(t, serve, regexp.MustCompile(`guard refused a caller"? rule=pane-session`))

	for _, p := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

func waitLog(t *testing.T, serve *harness.Serve, re *regexp.Regexp) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("%s in serve's log", re), func() (bool, string) {
		return re.MatchString(serve.Log()), serve.Log()
	})
}

// TestDaemonProgressIsTyped: the progress notifications of fleetmgr_start
// and fleetmgr_restart carry their lifecycle step under _meta
// (proxy.StepMetaKey) beside the text message, through the HTTP mount and
// the unix socket alike, so a client never parses the text; the CLI's
// restart through the daemon prints the steps.
func TestDaemonProgressIsTyped(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.StartServe()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	act := func(tool string, tr mcp.Transport) {
		t.Helper()
		var mu sync.Mutex
		var got []*mcp.ProgressNotificationParams
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "test"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				got = append(got, r.Params)
				mu.Unlock()
			}})
		cs, err := c.Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		params := &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"fleet": "kb"}}
		params.SetProgressToken("tok")
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
		var ar proxy.ActionResult
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &ar); err != nil || ar.State != lifecycle.PhaseRunning || len(ar.Steps) < 2 {
			t.Fatalf("%s result %s: %v", tool, b, err)
		}
		// Progress arrives alongside the result: wait for every step.
		_ = wait.Until(context.Background(), 5*time.Second, wait.Bool(func() bool { // a shortfall is reported next
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= len(ar.Steps)
		}))
		mu.Lock()
		defer mu.Unlock()
		// Handlers may run in any order; each notification's progress is
		// its step's number (1, 2, …).
		slices.SortFunc(got, func(a, b *mcp.ProgressNotificationParams) int { return int(a.Progress - b.Progress) })
		if len(got) != len(ar.Steps) {
			t.Fatalf("%s: %d progress notifications for %d steps", tool, len(got), len(ar.Steps))
		}
		for i, p := range got {
			raw, ok := p.Meta[proxy.StepMetaKey]
			if !ok {
				t.Fatalf("%s: notification %d has no %s: %+v", tool, i, proxy.StepMetaKey, p)
			}
			var s lifecycle.Step
			b, _ := json.Marshal(raw)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatalf("%s: notification %d: %s: %v", tool, i, b, err)
			}
			want := ar.Steps[i]
			if s.Fleet != "kb" || s.Name != want.Name || s.Detail != want.Detail || p.Message != s.Name+": "+s.Detail {
				t.Errorf("%s: notification %d: step %+v, message %q; want step %+v", tool, i, s, p.Message, want)
			}
		}
	}
	act("fleetmgr_start", &mcp.StreamableClientTransport{Endpoint: e.URL(), MaxRetries: -1})
	conn, err := net.Dial("unix", filepath.Join(e.StateDir, "fleetmgr.sock"))
	if err != nil {
		t.Fatal(err)
	}
	act("fleetmgr_restart", &mcp.IOTransport{Reader: conn, Writer: conn})

	// The CLI through the daemon: one line per step, the step's name and
	// detail as the daemon sent them.
	r := e.MustRun("restart", "kb")
	if !regexp.MustCompile(`(?m)^kb: fleetd +healthy on 127\.0\.0\.1:\d+ \(pid \d+\) \(\d+\.\ds\)$`).MatchString(r.Stdout) || !strings.Contains(r.Stdout, "kb: running") {
		t.Fatalf("restart kb through the daemon:\n%s", r.Stdout)
	}
}

// TestDaemonAddRemoveReload: `fleetmgr add` and `remove` while serve runs
// make it re-read the file (through its client, as `fleetmgr reload`
// does): the daemon knows the added fleet at once, and forgets it once
// removed.
func TestDaemonAddRemoveReload(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.StartServe()
	proj := filepath.Join(e.Dir, "proj-extra")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	r := e.MustRun("add", "extra", "--project", proj, "--", bins.Fleetd, "--config", "{{.ConfigPath}}")
	if !regexp.MustCompile(`fleetmgr serve \(pid \d+\) re-read the file: reloaded .*added: extra`).MatchString(r.Stdout) {
		t.Fatalf("add while serve runs:\n%s", r.Stdout)
	}
	cs := connect(t, e.URL())
	listed := func() []string {
		res := call(t, cs, "fleetmgr_list", map[string]any{})
		var l proxy.ListResult
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &l)
		var names []string
		for _, f := range l.Fleets {
			names = append(names, f.Name)
		}
		return names
	}
	if names := listed(); !slices.Equal(names, []string{"extra", "kb"}) {
		t.Fatalf("fleetmgr_list after add: %v", names)
	}
	r = e.MustRun("remove", "extra")
	if !strings.Contains(r.Stdout, "re-read the file") || !strings.Contains(r.Stdout, "removed: extra") {
		t.Fatalf("remove while serve runs:\n%s", r.Stdout)
	}
	if names := listed(); !slices.Equal(names, []string{"kb"}) {
		t.Fatalf("fleetmgr_list after remove: %v", names)
	}
}

// TestServeEnvFile: `serve --env-file PATH` (what the launchd agent runs)
// sets the file's variables in serve's environment before the config is
// read, so the fleets serve starts get them through pass_env; a file group
// or others can read is refused (exit 2) before anything starts.
func TestServeEnvFile(t *testing.T) {
	e := harness.NewEnv(t, bins, "pass_env = [\"FMTEST_FROM_ENV_FILE\"]", harness.Fleet{Name: "kb"})
	envFile := filepath.Join(e.Dir, "broker.env")
	if err := os.WriteFile(envFile, []byte("# secrets\nFMTEST_FROM_ENV_FILE='from the env file'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.Run("serve", "--env-file", envFile); r.Code != 2 || !strings.Contains(r.Stderr, "chmod 600 "+envFile) {
		t.Fatalf("serve with a readable env file: exit %d\n%s", r.Code, r.Stderr)
	}
	if err := os.Chmod(envFile, 0o600); err != nil {
		t.Fatal(err)
	}
	e.StartServe("--env-file", envFile)
	e.MustRun("start", "kb") // through the daemon: serve starts it with its environment
	st := readState(t, e, "kb")
	env, err := procfs.Environ(st.Fleetd.PID)
	if err != nil || !slices.Contains(env, "FMTEST_FROM_ENV_FILE=from the env file") {
		t.Fatalf("fleetd started by serve lacks the env file's variable (%v)", err)
	}
}
