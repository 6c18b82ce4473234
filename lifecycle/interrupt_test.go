package lifecycle

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestInterruptedStartIsNotWantedRunning: an operator's start cancelled
// mid-way (Ctrl-C on `fleetmgr start`) rolled back what it started but
// left the fleet wanted running, so the next supervisor pass brought up
// the fleet the operator had interrupted. The record goes back to what was
// wanted before, and says the start was interrupted.
func TestInterruptedStartIsNotWantedRunning(t *testing.T) {
	dir := t.TempDir()
	// A herdr server that never answers: the start waits on its ping.
	herdrBin := filepath.Join(dir, "herdr")
	if err := os.WriteFile(herdrBin, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(dir, "project")
	if err := os.Mkdir(project, 0o700); err != nil {
		t.Fatal(err)
	}
	fleetDir := filepath.Join(dir, "fleets", "kb")
	cfg := &registry.Config{Path: filepath.Join(dir, "fleets.toml"),
		Manager: registry.Manager{StateDir: dir, HerdrBin: herdrBin,
			StartTimeout: registry.Duration{Duration: time.Minute}, StopGrace: registry.Duration{Duration: time.Second}},
		Fleets: map[string]*registry.Fleet{"kb": {Name: "kb", Project: project, HerdrSession: "kb", Port: 1,
			Command: []string{"/bin/false"}, StateDir: fleetDir, WorktreeRoot: filepath.Join(fleetDir, "worktrees"),
			ConfigFile: filepath.Join(fleetDir, "fleetd.conf")}}}
	m := New(cfg, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := m.Start(ctx, "kb", Options{}); done <- err }()
	// Cancelled once the herdr server is spawned and recorded.
	wait.For(t, 30*time.Second, "the start to spawn its herdr server", wait.Bool(func() bool { return m.readSpawned("kb", "herdr") != nil }))
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled start did not return")
	}
	if err == nil || ctx.Err() == nil {
		t.Fatalf("cancelled start: %v", err)
	}
	st, rerr := readState(m.statePath("kb"), "kb")
	if rerr != nil {
		t.Fatal(rerr)
	}
	if st.Desired == DesiredRunning {
		t.Fatalf("after an interrupted start the fleet is still wanted running (phase %s, %q): a supervisor would start it", st.Phase, st.PhaseReason)
	}
	if !strings.Contains(st.LastError, "interrupted") {
		t.Errorf("last_error %q does not say the start was interrupted", st.LastError)
	}
	if alive(st.Herdr) {
		t.Errorf("the herdr server the start spawned (pid %d) outlived its rollback", st.Herdr.PID)
	}
}
