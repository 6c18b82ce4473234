package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// guardEnv: fleets kb and docs running, an operator session "ops" allowed
// by [guard] operator_sessions, a stray session "other" that is no fleet's,
// and fleetmgr serve.
func guardEnv(t *testing.T) (*harness.Env, *harness.Serve) {
	t.Helper()
	e := harness.NewEnv(t, bins, "\n[guard]\noperator_sessions = [\"ops\"]\n", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	e.MustRun("start", "kb", "docs")
	e.StartHerdr("ops")
	e.StartHerdr("other")
	return e, e.StartServe()
}

// probeInPane runs mcpprobe in a fresh pane of the herdr session at sock,
// through the command line prefix (e.g. "sh -c '…'" or "setsid -f"), and
// returns its verdict.
func probeInPane(t *testing.T, e *harness.Env, sock, label, wrap string) string {
	t.Helper()
	pane, _ := newPane(t, sock, label)
	out := filepath.Join(e.Dir, label+".out")
	probe := fmt.Sprintf("%s -url %s -out %s", bins.Probe, e.URL(), out)
	line := probe
	if wrap != "" {
		line = strings.ReplaceAll(wrap, "PROBE", probe)
	}
	runInPane(t, sock, pane, line)
	return harness.WaitFile(t, out, 20*time.Second)
}

func refusedBy(t *testing.T, serve *harness.Serve, verdict string, rule string) {
	t.Helper()
	if !strings.HasPrefix(verdict, "REFUSED") || !strings.Contains(verdict, "Forbidden") {
		t.Fatalf("want refused, got: %s", verdict)
	}
	re := regexp.MustCompile(`guard refused a caller"? rule=` + regexp.QuoteMeta(rule) + ` pid=-?\d+ uid=-?\d+`)
	wait.For(t, 5*time.Second, "a refusal line with rule="+rule+" in serve's log", func() (bool, string) {
		return re.MatchString(serve.Log()), serve.Log()
	})
}

// TestGuardOverHTTP: the guard's rules (docs/SECURITY.md) over the
// streamable HTTP mount.
func TestGuardOverHTTP(t *testing.T) {
	e, serve := guardEnv(t)
	kb, docs := e.HerdrSocket("kb"), e.HerdrSocket("docs")

	t.Run("pane child", func(t *testing.T) {
		refusedBy(t, serve, probeInPane(t, e, kb, "child", ""), "pane-session")
	})
	t.Run("grandchild", func(t *testing.T) {
		refusedBy(t, serve, probeInPane(t, e, kb, "grand", "sh -c 'PROBE; true'"), "pane-session")
	})
	t.Run("background job of a pane", func(t *testing.T) {
		// fleetd's own check misses this one (fleetd issue #160); ours must not.
		refusedBy(t, serve, probeInPane(t, e, kb, "bg", "(PROBE &)"), "pane-session")
	})
	t.Run("another fleet's session", func(t *testing.T) {
		refusedBy(t, serve, probeInPane(t, e, docs, "docs", ""), "pane-session")
	})
	t.Run("a session that is no fleet's, env scrubbed", func(t *testing.T) {
		// Found only through `herdr session list`; the env rule cannot help.
		v := probeInPane(t, e, e.HerdrSocket("other"), "other", "env -u HERDR_ENV -u HERDR_PANE_ID -u HERDR_SOCKET_PATH PROBE")
		refusedBy(t, serve, v, "pane-session")
	})
	t.Run("setsid from a pane, env intact", func(t *testing.T) {
		refusedBy(t, serve, probeInPane(t, e, kb, "setsid", "setsid -f PROBE"), "herdr-env")
	})
	t.Run("HERDR_PANE_ID outside any pane", func(t *testing.T) {
		cmd := exec.Command(bins.Probe, "-url", e.URL())
		cmd.Env = append(os.Environ(), "HERDR_PANE_ID=w1:p1")
		out, _ := cmd.Output()
		refusedBy(t, serve, string(out), "herdr-env")
	})
	t.Run("another uid", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to drop to nobody")
		}
		// nobody must be able to execute the probe.
		dir, err := os.MkdirTemp("", "fmnobody")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		probe := filepath.Join(dir, "mcpprobe")
		b, err := os.ReadFile(bins.Probe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(probe, b, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o755)
		cmd := exec.Command(probe, "-url", e.URL())
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probe as nobody: %v", err)
		}
		refusedBy(t, serve, string(out), "uid")
	})
	for _, c := range []struct{ name, host, origin string }{
		{"Host evil.example", "evil.example", ""},
		{"Origin evil.example", "", "http://evil.example"},
		{"Origin null", "", "null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.URL(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
			if c.host != "" {
				req.Host = c.host
			}
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status %d, want 403", resp.StatusCode)
			}
			refusedBy(t, serve, "REFUSED Forbidden", "host")
		})
	}
	t.Run("served: plain process outside herdr", func(t *testing.T) {
		if v := harness.RunProbe(t, bins, e.URL()); !strings.HasPrefix(v, "OK") {
			t.Fatalf("refused: %s", v)
		}
	})
	t.Run("served: a pane of operator session ops", func(t *testing.T) {
		if v := probeInPane(t, e, e.HerdrSocket("ops"), "ops", ""); !strings.HasPrefix(v, "OK") {
			t.Fatalf("operator pane refused: %s\n%s", v, serve.Log())
		}
	})
	// Every refusal line names its rule.
	for _, line := range strings.Split(serve.Log(), "\n") {
		if strings.Contains(line, "guard refused") && !strings.Contains(line, "rule=") {
			t.Errorf("refusal line without rule: %s", line)
		}
	}
}

// TestGuardOverUnixSocket: the same guard on the unix-socket mount, reached
// through `fleetmgr mcp` as a command-mount client would.
func TestGuardOverUnixSocket(t *testing.T) {
	e, serve := guardEnv(t)
	sock := filepath.Join(e.StateDir, "fleetmgr.sock")

	// Outside every pane: the official Go SDK client over `fleetmgr mcp`.
	cmd := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "mcp", "--no-start")
	cmd.Env = e.Environ
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_list", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(textOf(res), `"kb"`) {
		t.Fatalf("fleetmgr_list over the unix mount: %v %s", err, textOf(res))
	}

	// Inside a pane of kb: the bridge is refused and the socket closed.
	pane, _ := newPane(t, e.HerdrSocket("kb"), "stdio")
	out := filepath.Join(e.Dir, "stdio.out")
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	runInPane(t, e.HerdrSocket("kb"), pane, fmt.Sprintf("echo '%s' | %s --config %s mcp --no-start > %s.tmp 2>&1; echo exit=$? >> %s.tmp; mv %s.tmp %s", init, bins.Fleetmgr, e.ConfigPath, out, out, out, out))
	v := harness.WaitFile(t, out, 20*time.Second)
	if !strings.Contains(v, "fleetmgr refused this caller") || strings.Contains(v, `"result"`) || !strings.Contains(v, "exit=3") {
		t.Fatalf("in-pane stdio bridge not refused: %s", v)
	}
	// The refusal answers the client's initialize (id 1), so the client
	// can show the reason as that request's error.
	if !strings.Contains(v, `"id":1`) || !strings.Contains(v, `"code":-32001`) {
		t.Fatalf("the refusal does not answer the initialize request: %s", v)
	}
	refusedBy(t, serve, "REFUSED Forbidden", "pane-session")
	_ = sock
}

// TestCLIThroughDaemonSaysWhyRefused: a CLI verb the running daemon's
// guard refuses (here: the uid rule, [guard] allowed_uids without the
// operator's uid) fails saying why, not with a bare EOF, and changes
// nothing.
func TestCLIThroughDaemonSaysWhyRefused(t *testing.T) {
	e := harness.NewEnv(t, bins, "\n[guard]\nallowed_uids = [65534]\n", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	e.StartServe()
	r := e.Run("stop", "kb")
	if r.Code == 0 || !strings.Contains(r.Stderr, "allowed_uids") || strings.Count(r.Stderr, "allowed_uids") > 2 {
		t.Fatalf("stop through a daemon that refuses this uid: exit %d\n%s", r.Code, r.Stderr)
	}
	t.Logf("refused stop says: %s", r.Stderr)
	if out := e.MustRun("list", "--json").Stdout; !strings.Contains(out, `"state": "running"`) {
		t.Fatalf("kb changed after a refused stop:\n%s", out)
	}
}

// TestServeRefusesRemoteListenWithoutToken: listen beyond loopback needs
// --allow-remote and a private token file.
func TestServeRefusesRemoteListenWithoutToken(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	b, _ := os.ReadFile(e.ConfigPath)
	b = bytes.Replace(b, []byte(e.Listen), []byte("0.0.0.0:"+strings.Split(e.Listen, ":")[1]), 1)
	if err := os.WriteFile(e.ConfigPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.Run("serve")
	if r.Code == 0 || !strings.Contains(r.Stderr, "--allow-remote") {
		t.Fatalf("serve on 0.0.0.0 without --allow-remote: exit %d\n%s", r.Code, r.Stderr)
	}
	tok := filepath.Join(e.Dir, "token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.Run("serve", "--allow-remote", "--token-file", tok)
	if r.Code == 0 || !strings.Contains(r.Stderr, "chmod 600") {
		t.Fatalf("world-readable token file accepted: exit %d\n%s", r.Code, r.Stderr)
	}
}

// TestGuardWithoutTheSocket: panes of herdr servers the guard cannot reach
// by socket (another XDG_CONFIG_HOME, or a daemon started with another
// environment than the fleets) are still refused with the environment
// scrubbed, by the herdr-child rule or the recorded socket.
func TestGuardWithoutTheSocket(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb") // XDG_CONFIG_HOME = e.XDG
	// serve runs with another XDG_CONFIG_HOME: kb's socket is only in its state.
	other := filepath.Join(e.Dir, "xdg-serve")
	environ := e.Environ
	e.Environ = append(append([]string{}, environ...), "XDG_CONFIG_HOME="+other)
	serve := e.StartServe()
	e.Environ = environ

	scrub := "env -u HERDR_ENV -u HERDR_PANE_ID -u HERDR_SOCKET_PATH PROBE"
	t.Run("fleet session found through its recorded socket", func(t *testing.T) {
		refusedBy(t, serve, probeInPane(t, e, e.HerdrSocket("kb"), "rec", scrub), "pane-session")
	})
	t.Run("unknown herdr server, by executable", func(t *testing.T) {
		sock := e.StartHerdrAt(filepath.Join(e.Dir, "xdg-rogue"), "rogue")
		refusedBy(t, serve, probeInPane(t, e, sock, "rogue", scrub), "herdr-child")
	})
	t.Run("unknown herdr server, double fork without setsid", func(t *testing.T) {
		sock := e.StartHerdrAt(filepath.Join(e.Dir, "xdg-rogue2"), "rogue2")
		// (cmd &) reparents the probe to init: no herdr ancestor is left,
		// but its session is still the pane shell's.
		refusedBy(t, serve, probeInPane(t, e, sock, "rogue2", "(env -u HERDR_ENV -u HERDR_PANE_ID -u HERDR_SOCKET_PATH PROBE &)"), "herdr-child")
	})
}

// TestCLIRefusesInsidePane: stop (like start/restart) and status run from
// a pane are refused by the CLI itself, daemon or not, and change nothing; also when [guard]
// allowed_uids does not list the CLI's own uid (the uid rule is not the
// CLI's to apply to itself, and must not hide the pane rules).
func TestCLIRefusesInsidePane(t *testing.T) {
	for _, extra := range []string{"", "\n[guard]\nallowed_uids = [65534]\n"} {
		t.Run(fmt.Sprintf("guard=%q", extra), func(t *testing.T) { cliRefusesInsidePane(t, extra) })
	}
}

func cliRefusesInsidePane(t *testing.T, extra string) {
	e := harness.NewEnv(t, bins, extra, harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	e.MustRun("start", "kb", "docs")
	pane, _ := newPane(t, e.HerdrSocket("kb"), "cli")
	out := filepath.Join(e.Dir, "cli.out")
	runInPane(t, e.HerdrSocket("kb"), pane, fmt.Sprintf("env -u HERDR_ENV -u HERDR_PANE_ID %s --config %s stop docs > %s.tmp 2>&1; echo exit=$? >> %s.tmp; mv %s.tmp %s", bins.Fleetmgr, e.ConfigPath, out, out, out, out))
	v := harness.WaitFile(t, out, 30*time.Second)
	if !strings.Contains(v, "exit=3") || !strings.Contains(v, "refusing to stop fleets from inside a herdr pane") {
		t.Fatalf("in-pane stop not refused:\n%s", v)
	}
	r := e.MustRun("list", "--json")
	if strings.Count(r.Stdout, `"state": "running"`) != 2 {
		t.Fatalf("fleets changed after a refused stop:\n%s", r.Stdout)
	}
	// status too: sampled from the pane, the other fleet's fleetd would
	// answer it as primary.
	sout := filepath.Join(e.Dir, "status.out")
	runInPane(t, e.HerdrSocket("kb"), pane, fmt.Sprintf("env -u HERDR_ENV -u HERDR_PANE_ID %s --config %s status --local > %s.tmp 2>&1; echo exit=$? >> %s.tmp; mv %s.tmp %s", bins.Fleetmgr, e.ConfigPath, sout, sout, sout, sout))
	if v := harness.WaitFile(t, sout, 30*time.Second); !strings.Contains(v, "exit=3") || !strings.Contains(v, "refusing to read the status of fleets from inside a herdr pane") {
		t.Fatalf("in-pane status not refused:\n%s", v)
	}
}
