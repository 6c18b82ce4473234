package e2e

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestTop (issue 28 part 1): `fleetmgr top` in a real pty, through a
// running serve: it renders frame after frame in place with the fleet and
// its members, the member running a CPU loop sorted above its idle
// neighbour, and q ends it at once with exit 0 and the cursor shown again.
func TestTop(t *testing.T) {
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"500ms\"\n", harness.Fleet{Name: "tp"})
	e.StartServe()
	e.MustRun("start", "tp")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["tp"]))
	for id, cmd := range map[string]string{"busy": "while :; do :; done", "calm": "sleep 600"} {
		callTool(t, fd, "fleet_spawn", map[string]any{"id": id, "command": cmd}, nil)
	}
	cmd := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "top")
	cmd.Env = e.Environ
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
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
				return // EIO once top exited
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	frame := func() string { // the last whole frame
		s := text()
		frames := strings.Split(s, "\x1b[H\x1b[2J")
		if len(frames) < 3 {
			return ""
		}
		return frames[len(frames)-2]
	}
	wait.For(t, 60*time.Second, "a refreshed frame with busy above calm", func() (bool, string) {
		f := frame()
		b, c := strings.Index(f, "  busy "), strings.Index(f, "  calm ")
		return strings.Contains(f, "tp ") && strings.Contains(f, "CPU") && b >= 0 && c > b, f
	})
	if f := frame(); !strings.Contains(f, "\r\n") || !strings.Contains(f, "MEM") {
		t.Errorf("frame without raw-mode line ends or MEM column: %q", f)
	}
	if _, err := io.WriteString(ptmx, "q"); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("top after q: %v\n%q", err, text())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("top did not quit on q:\n%q", text())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	if !strings.HasSuffix(strings.TrimRight(text(), "\r\n"), "\x1b[?25h") {
		t.Errorf("top did not show the cursor again on its way out: %q", text()[max(0, len(text())-80):])
	}
}
