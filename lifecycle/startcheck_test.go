package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// checkFailConfig is a fleet whose start fails its first check (the
// project directory does not exist), with a fast restart policy.
func checkFailConfig(t *testing.T) *Manager {
	t.Helper()
	dir := t.TempDir()
	pol := registry.RestartPolicy{
		BackoffInitial:    registry.Duration{Duration: 50 * time.Millisecond},
		BackoffMax:        registry.Duration{Duration: 50 * time.Millisecond},
		ResetAfter:        registry.Duration{Duration: time.Minute},
		CrashLoopRestarts: 2,
		CrashLoopWindow:   registry.Duration{Duration: time.Minute},
		HealthInterval:    registry.Duration{Duration: time.Second},
		HealthFailures:    3,
		// More start retries than the crash loop allows restarts: these
		// failing starts are retried until the crash loop, which is what
		// the tests here are about (start_retries is TestDecide's and
		// e2e TestStartRetries').
		StartRetries: 5,
	}
	cfg := &registry.Config{Path: filepath.Join(dir, "fleets.toml"),
		Manager: registry.Manager{StateDir: dir, StartTimeout: registry.Duration{Duration: 5 * time.Second},
			StopGrace: registry.Duration{Duration: time.Second}, Restart: pol},
		Fleets: map[string]*registry.Fleet{"kb": {Name: "kb", Project: filepath.Join(dir, "missing"), Line: 7,
			StateDir: filepath.Join(dir, "fleets", "kb"), Restart: pol}}}
	return New(cfg, slog.New(slog.DiscardHandler), nil)
}

// TestRestartFailingItsChecksIsNotLeftRestarting: a restart whose start
// fails before it spawns anything (here: no project directory) left the
// fleet "restarting" for ever, with no error, in list and status.
func TestRestartFailingItsChecksIsNotLeftRestarting(t *testing.T) {
	m := checkFailConfig(t)
	if _, err := m.Restart(context.Background(), "kb", Options{}); err == nil {
		t.Fatal("restart without a project directory succeeded")
	}
	st, err := m.State("kb")
	if err != nil {
		t.Fatal(err)
	}
	if st.Shown.Phase != PhaseFailed || !strings.Contains(st.Shown.LastError, "project directory") {
		t.Fatalf("after a failed restart: phase %s, last_error %q; want failed, naming the project directory", st.Shown.Phase, st.Shown.LastError)
	}
}

// TestSupervisorNamesWhyARestartFailed: when the supervisor's restart
// fails before fleetd is spawned, the next restart's reason and the crash
// loop's error said only "fleetd not running"; they name the failure.
func TestSupervisorNamesWhyARestartFailed(t *testing.T) {
	m := checkFailConfig(t)
	if err := writeState(m.statePath("kb"), &State{Name: "kb", Desired: DesiredRunning, Phase: PhaseFailed}); err != nil {
		t.Fatal(err)
	}
	s := NewSupervisor(m, slog.New(slog.DiscardHandler))
	s.tick = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var st *State
	if err := wait.Until(ctx, time.Minute, func() (bool, string) {
		var err error
		st, err = readState(m.statePath("kb"), "kb")
		return err == nil && st.CrashLoop, fmt.Sprintf("%+v", st)
	}); err != nil {
		t.Fatalf("no crash loop: %v", err)
	}
	if !strings.Contains(st.LastRestartReason, "project directory") || !strings.Contains(st.LastError, "project directory") {
		t.Fatalf("crash loop does not say why the restarts failed:\nreason: %s\nerror:  %s", st.LastRestartReason, st.LastError)
	}
}
