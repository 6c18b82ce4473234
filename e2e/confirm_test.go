package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// ptyRun runs fleetmgr args on a terminal (stdin, stdout and stderr a
// pty), answers answer once the output shows prompt, and returns
// everything the terminal showed and the exit code.
func ptyRun(t *testing.T, e *harness.Env, prompt, answer string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bins.Fleetmgr, append([]string{"--config", e.ConfigPath}, args...)...)
	cmd.Env = e.Environ
	ptmx, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var mu sync.Mutex
	var out strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once the command exited
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	if !svWait(30*time.Second, func() bool { return strings.Contains(text(), prompt) }) {
		_ = cmd.Process.Kill()
		t.Fatalf("fleetmgr %v on a terminal never asked %q:\n%s", args, prompt, text())
	}
	if _, err := io.WriteString(ptmx, answer+"\n"); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return text(), code
}

// TestStopAndRestartAskBeforeEndingMembers (issue 24 item 3): a manual
// restart or stop of a fleet with live members says how many end and
// which; on a terminal it asks (no: nothing done; yes: done); without a
// terminal and without --yes it refuses with exit 2; --yes goes on. The
// manager tools refuse the same way unless called with confirm: true.
func TestStopAndRestartAskBeforeEndingMembers(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "alpha", "command": "sleep 600"}, nil)
	pid0 := readState(t, e, "kb").Fleetd.PID

	// No terminal, no --yes: refused, exit 2, nothing done.
	for _, verb := range []string{"restart", "stop"} {
		r := e.Run(verb, "kb")
		if r.Code != 2 || !strings.Contains(r.Stderr, verb+" would end 1 live member (") || !strings.Contains(r.Stderr, "alpha") || !strings.Contains(r.Stderr, "--yes") {
			t.Errorf("%s without a terminal or --yes: exit %d\nstdout: %s\nstderr: %s", verb, r.Code, r.Stdout, r.Stderr)
		}
		if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID != pid0 || st.Phase != "running" {
			t.Fatalf("a refused %s acted: %+v", verb, st)
		}
	}
	// JSON says so too.
	if r := e.Run("stop", "kb", "--json"); r.Code != 2 || !strings.Contains(r.Stdout, `"needs_confirm": true`) {
		t.Errorf("stop --json refused: exit %d\n%s", r.Code, r.Stdout)
	}

	// The manager tool: refused without confirm, naming the member.
	cs := connect(t, e.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_restart", Arguments: map[string]any{"fleet": "kb"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "1 live member") || !strings.Contains(textOf(res), "alpha") {
		t.Fatalf("fleetmgr_restart without confirm: %v %s", err, textOf(res))
	}
	if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID != pid0 {
		t.Fatalf("a refused fleetmgr_restart acted: %+v", st)
	}

	// On a terminal: asked; "n" does nothing.
	out, code := ptyRun(t, e, "anyway? [y/N]", "n", "restart", "kb")
	if !strings.Contains(out, "restart would end 1 live member") || code != 2 {
		t.Errorf("restart on a terminal, answered n: exit %d\n%s", code, out)
	}
	if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID != pid0 {
		t.Fatalf("a restart declined on the terminal acted: %+v", st)
	}
	// "y" restarts; the member ends and is counted.
	out, code = ptyRun(t, e, "anyway? [y/N]", "y", "restart", "kb")
	st := readState(t, e, "kb")
	if code != 0 || st.Fleetd == nil || st.Fleetd.PID == pid0 || st.MembersLost != 1 {
		t.Fatalf("restart on a terminal, answered y: exit %d, state %+v\n%s\nserve:\n%s", code, st, out, serve.Log())
	}

	// The member is gone: nothing to ask; a new one is, and --yes goes on.
	callTool(t, connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"])), "fleet_spawn", map[string]any{"id": "beta", "command": "sleep 600"}, nil)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_stop", Arguments: map[string]any{"fleet": "kb", "confirm": true}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_stop with confirm: %v %s", err, textOf(res))
	}
	if st := readState(t, e, "kb"); st.Phase != "stopped" {
		t.Fatalf("after fleetmgr_stop confirm: %+v", st)
	}
	e.MustRun("start", "kb")
	callTool(t, connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"])), "fleet_spawn", map[string]any{"id": "gamma", "command": "sleep 600"}, nil)
	if r := e.Run("stop", "kb", "--yes"); r.Code != 0 || readState(t, e, "kb").Phase != "stopped" {
		t.Fatalf("stop --yes: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
