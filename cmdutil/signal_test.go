package cmdutil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestSignalContextSecondSignalKills: the first SIGINT cancels the
// context; a command stuck where it does not watch it used to swallow
// every further Ctrl-C (and SIGTERM), leaving only SIGKILL. The second
// SIGINT ends the process as it ends any program. Run in a child process
// (this test binary, re-run as the helper below).
func TestSignalContextSecondSignalKills(t *testing.T) {
	if os.Getenv("FLEETMGR_SIGNAL_HELPER") == "1" {
		ctx, stop := SignalContext(context.Background())
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("cancelled")
		select {} // stuck, not watching anything
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalContextSecondSignalKills$")
	cmd.Env = append(os.Environ(), "FLEETMGR_SIGNAL_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != want {
				t.Fatalf("child said %q, want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("child did not say %q", want)
		}
	}
	expect("ready")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	expect("cancelled")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The goroutine restoring the default action runs right after the
	// cancellation; signals until the child ends, bounded.
	var exit error
	wait.For(t, 10*time.Second, "a second SIGINT to end the child (else every Ctrl-C after the first is swallowed)", wait.Bool(func() bool {
		select {
		case exit = <-done:
			return true
		default:
			_ = cmd.Process.Signal(syscall.SIGINT)
			return false
		}
	}))
	var ee *exec.ExitError
	if !errors.As(exit, &ee) {
		t.Fatalf("child ended with %v, want killed by SIGINT", exit)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("child ended with %v, want killed by SIGINT", exit)
	}
}
