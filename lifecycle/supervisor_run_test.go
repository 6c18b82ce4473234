package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestSupervisorInProcess runs the Supervisor inside the test binary (so
// the race detector sees it) against the herdr and fleetd stand-ins: a
// killed fleetd (our child) is restarted with its exit status recorded, a
// stop is never taken for a crash, and Run returns when its context ends.
func TestSupervisorInProcess(t *testing.T) {
	m, port, logs := inProcessFleet(t, "200ms")
	ctx := context.Background()
	st, err := m.Start(ctx, "kb", Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid0 := st.Fleetd.PID

	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { NewSupervisor(m, m.log).Run(sctx); close(done) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Supervisor.Run did not return after its context ended")
		}
	}()

	healthy := func() bool {
		c := &http.Client{Timeout: 300 * time.Millisecond}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if err := syscall.Kill(pid0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var cur *State
	wait.For(t, 5*time.Second, "a new fleetd running and healthy", func() (bool, string) {
		cur, _ = readState(m.statePath("kb"), "kb")
		return cur.Fleetd != nil && cur.Fleetd.PID != pid0 && cur.Phase == PhaseRunning && healthy(), fmt.Sprintf("%+v", cur)
	})
	if cur.Fleetd == nil || cur.Fleetd.PID == pid0 || cur.Restarts != 1 || cur.LastExit != "signal: killed" {
		t.Fatalf("after kill -9: %+v\n%s", cur, logs.String())
	}

	// A stop is expected: no restart follows.
	if _, err := m.Stop(ctx, "kb", Options{}); err != nil {
		t.Fatal(err)
	}
	wait.Never(t, 800*time.Millisecond, "a restart after the stop", func() (bool, string) {
		cur, _ = readState(m.statePath("kb"), "kb")
		return cur.Phase != PhaseStopped || cur.Fleetd != nil || cur.Restarts != 1 || healthy(), fmt.Sprintf("%+v\n%s", cur, logs.String())
	})
}

// inProcessFleet makes a state dir and fleets.toml with one fleet, kb, on
// the stand-ins (restart backoff 100 ms, health_interval as given) and
// returns a Manager for it (logging to logs), the fleet's port.
func inProcessFleet(t *testing.T, healthInterval string) (*Manager, int, *syncbuf.Buffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the stand-ins")
	}
	dir, err := os.MkdirTemp("", "fmsv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bins, err := harness.Build(filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	for _, d := range []string{"proj", "home", "xdg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "fleets.toml")
	body := fmt.Sprintf(`[manager]
state_dir = %q
herdr_bin = %q
port_range = [1024, 65535]
stop_grace = "1s"
restart_backoff_initial = "100ms"
health_interval = %q
log_max_mb = 1
[fleets.kb]
project = %q
command = [%q, "--config", "{{.ConfigPath}}"]
port = %d
`, filepath.Join(dir, "state"), bins.Herdr, healthInterval, filepath.Join(dir, "proj"), bins.Fleetd, port)
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+filepath.Join(dir, "home"), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"))
	logs := &syncbuf.Buffer{}
	m := New(cfg, slog.New(slog.NewTextHandler(logs, nil)), env)
	m.SetLogPipe(bins.Fleetmgr)
	t.Cleanup(func() { _, _ = m.Stop(context.Background(), "kb", Options{}) })
	return m, port, logs
}

// TestSupervisorActsOnEvents: with health probes and the backstop an hour
// apart, nothing but events can make the supervisor look: kill -9 of
// fleetd is still restarted at once (its pidfd), and so is the fleetd the
// restart started, which the supervisor only watches because inotify told
// it the restart's start wrote state.json.
func TestSupervisorActsOnEvents(t *testing.T) {
	m, _, logs := inProcessFleet(t, "1h")
	ctx := context.Background()
	st, err := m.Start(ctx, "kb", Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSupervisor(m, m.log)
	s.backstop = time.Hour
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(sctx); close(done) }()
	defer func() {
		cancel()
		<-done
	}()
	// restarted waits for the restart number n of a fleetd other than pid,
	// running again.
	restarted := func(pid, n int) *State {
		t.Helper()
		var cur *State
		wait.For(t, 20*time.Second, fmt.Sprintf("restart %d", n), func() (bool, string) {
			var err error
			cur, err = readState(m.statePath("kb"), "kb")
			return err == nil && cur.Restarts == n && cur.Phase == PhaseRunning && cur.Fleetd != nil && cur.Fleetd.PID != pid,
				fmt.Sprintf("%+v\n%s", cur, logs.String())
		})
		return cur
	}
	wait.For(t, 20*time.Second, "kb supervised", wait.Bool(func() bool { return m.supervised("kb") }))
	pid := st.Fleetd.PID
	for n := 1; n <= 2; n++ {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cur := restarted(pid, n)
		if cur.LastExit != "signal: killed" {
			t.Errorf("restart %d: last exit %q, want signal: killed", n, cur.LastExit)
		}
		pid = cur.Fleetd.PID
	}
}
