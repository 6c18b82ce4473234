// Package herdrtest is test equipment: it runs the herdr stand-in binary
// (testbed/cmd/herdr) for one session under a throwaway XDG_CONFIG_HOME and
// HOME, for the stand-ins' own tests.
package herdrtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// Start runs `bin --session session server` and returns a client for its
// socket once it answers ping. HOME is throwaway too: pane shells are login
// shells and must not run the host user's dotfiles (a stale pyenv rehash
// lock stalls them 60 s). At cleanup the server is stopped (server.stop,
// then SIGKILL to its process group after 5 s) and, if the test failed, its
// output is logged.
func Start(t testing.TB, bin, session string) *herdr.Client {
	t.Helper()
	cfgHome, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cfgHome) })
	cmd := exec.Command(bin, "--session", session, "server")
	cmd.Env = append(herdr.ScrubEnv(os.Environ()), "XDG_CONFIG_HOME="+cfgHome, "HOME="+cfgHome)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: Wait must not depend on who else holds the fd.
	logf, err := os.Create(filepath.Join(cfgHome, "herdr-server.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c := herdr.New(herdr.SocketPath(filepath.Join(cfgHome, "herdr"), session))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = c.ServerStop(ctx)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("herdr stand-in log:\n%s", b)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
