package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/privdir"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// Detached is a daemon Detach started: its pid, its serve.json, its unix
// socket ([manager] mcp_socket) and the log it writes.
type Detached struct {
	PID    int
	Info   serveapi.Info
	Socket string
	Log    string
}

// LogPath is a detached daemon's log, <state_dir>/fleetmgr.log.
func LogPath(cfg *registry.Config) string {
	return filepath.Join(cfg.Manager.StateDir, "fleetmgr.log")
}

// Detach starts `fleetmgr serve` for cfg as a daemon: this process →
// stage 1 (`serve --daemon-stage 1`, in a new session: setsid) → stage 2
// (the daemon, started by stage 1 in a session of its own, reparented to
// init when stage 1 exits at once), with null stdin, its output appended
// to LogPath, the HERDR_* variables removed from its environment, and
// args (serve's other flags, e.g. Remote.Args) on its command line. It
// returns once the daemon serves, or with the daemon's own error (another
// serve holds the state dir, a port is taken), which the daemon reports on
// the readiness pipe both stages hand down as fd 3 (Readiness); or after
// 15 s, or when ctx ends.
func Detach(ctx context.Context, cfg *registry.Config, args ...string) (*Detached, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	defer pr.Close()
	c := exec.Command(self, append([]string{"serve", "--config", cfg.Path, "--daemon-stage", "1", "--daemon-ready-fd", "3"}, args...)...)
	c.Env = herdr.ScrubEnv(os.Environ())
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c.ExtraFiles = []*os.File{pw} // fd 3 in stage 1, handed on to the daemon
	err = c.Run()
	pw.Close() // from now on only the daemon holds the write end
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	pid, err := awaitReady(ctx, pr, 15*time.Second)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w; see %s", err, LogPath(cfg))
	}
	return &Detached{PID: pid, Info: serveapi.ReadInfo(cfg), Socket: cfg.Manager.MCPSocket, Log: LogPath(cfg)}, nil
}

// DetachStage1 is `serve --daemon-stage 1`, run in the new session Detach
// made: it starts the daemon (`serve --daemon-stage 2` with args) and
// returns at once, so the daemon is nobody's child but init's. The
// readiness pipe goes on to the daemon as its fd 3.
func DetachStage1(cfg *registry.Config, ready *Readiness, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := privdir.Ensure(cfg.Manager.StateDir); err != nil {
		return err
	}
	logf, err := os.OpenFile(LogPath(cfg), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := []string{"serve", "--config", cfg.Path, "--daemon-stage", "2"}
	if ready.f != nil {
		argv = append(argv, "--daemon-ready-fd", "3")
	}
	c := exec.Command(self, append(argv, args...)...)
	if ready.f != nil {
		c.ExtraFiles = []*os.File{ready.f}
	}
	c.Env = herdr.ScrubEnv(os.Environ())
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return err
	}
	if ready.f != nil {
		ready.f.Close() // the daemon has its own copy
		ready.f = nil
	}
	return c.Process.Release()
}
