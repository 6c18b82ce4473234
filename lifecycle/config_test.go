package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// reloadConfig is a config of fleets (each with a project dir that
// exists) in state dir dir.
func reloadConfig(t *testing.T, dir string, fleets ...string) *registry.Config {
	t.Helper()
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
			StopGrace: registry.Duration{Duration: time.Second}, CallTimeout: registry.Duration{Duration: time.Minute}, Restart: pol},
		Fleets: map[string]*registry.Fleet{}}
	for i, n := range fleets {
		cfg.Fleets[n] = &registry.Fleet{Name: n, Project: dir, Command: []string{"fleetd", n}, Port: 20001 + i,
			HerdrSession: "hs-" + n, MCPPath: "/mcp", Env: map[string]string{}, Line: 3 + i,
			StateDir: filepath.Join(dir, "fleets", n), Restart: pol}
	}
	return cfg
}

// recordRunning writes the state of a fleet of m that runs (its "fleetd"
// is a sleep with the fleet's FLEET_NAME, alive for the test's length, so
// the record is not stale: identity.go) as started under cfg.
func recordRunning(t *testing.T, m *Manager, cfg *registry.Config, name string) {
	t.Helper()
	_, self := startProc(t, []string{"FLEET_NAME=" + name}, "sleep", "600")
	f := cfg.Fleets[name]
	st := &State{Name: name, Desired: DesiredRunning, Phase: PhaseRunning, Port: f.Port, Fleetd: self,
		StartedAt: time.Now().UTC(), Launch: launchOf(cfg, f)}
	if err := writeState(m.statePath(name), st); err != nil {
		t.Fatal(err)
	}
}

// TestReloadSwapsTheConfigForEveryReader: after Reload an added fleet is
// known at once, a removed fleet that still runs is retired (listed, not
// in the config, rebuilt from its launch record, refused a start), a
// removed stopped fleet is gone, and a running fleet whose settings
// changed reads restart pending with the changed keys.
func TestReloadSwapsTheConfigForEveryReader(t *testing.T) {
	dir := t.TempDir()
	old := reloadConfig(t, dir, "a", "b", "gone")
	m := New(old, slog.New(slog.DiscardHandler), nil)
	recordRunning(t, m, old, "a")
	recordRunning(t, m, old, "b")
	if err := writeState(m.statePath("gone"), &State{Name: "gone", Desired: DesiredStopped, Phase: PhaseStopped, Launch: launchOf(old, old.Fleets["gone"])}); err != nil {
		t.Fatal(err)
	}
	changed := m.ConfigChanged()

	next := reloadConfig(t, dir, "a", "c")
	next.Fleets["a"].Command = []string{"fleetd", "a", "--verbose"}
	next.Fleets["a"].Env = map[string]string{"K": "v"}
	next.Fleets["a"].Restart.HealthFailures = 9 // supervision only: applies without a restart
	rep, err := m.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("ConfigChanged was not closed by Reload")
	}
	if m.Config() != next || m.Generation() != 1 || rep.Generation != 1 {
		t.Fatalf("config not swapped: generation %d/%d", m.Generation(), rep.Generation)
	}
	want := &ReloadReport{Generation: 1, Config: next.Path, Fleets: []string{"a", "c"}, Added: []string{"c"},
		Removed: []string{"b", "gone"}, Retired: []string{"b"}, Changed: []string{"a"},
		RestartPending: map[string][]string{"a": {"command", "env"}}}
	if !reflect.DeepEqual(rep, want) {
		t.Fatalf("report\n got %+v\nwant %+v", rep, want)
	}
	if got := m.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %v, want a b c (b retired, gone stopped)", got)
	}
	st, err := m.State("a")
	if err != nil || st.Shown.NotInConfig || !slices.Equal(st.Shown.RestartPending, []string{"command", "env"}) {
		t.Fatalf("State(a) = %+v, %v; want restart pending on command, env", st, err)
	}
	b, err := m.Fleet("b")
	if err != nil || b.HerdrSession != "hs-b" || b.Port != old.Fleets["b"].Port || b.Project != dir || b.CallTimeout.Duration != time.Minute {
		t.Fatalf("retired b = %+v, %v; want it rebuilt from its launch record", b, err)
	}
	st, err = m.State("b")
	if err != nil || !st.Shown.NotInConfig || st.Shown.Phase != PhaseRunning || len(st.Shown.RestartPending) != 0 {
		t.Fatalf("State(b) = %+v, %v; want running, not in config", st, err)
	}
	if _, err := m.Start(context.Background(), "b", Options{}); err == nil || !strings.Contains(err.Error(), "no longer in") || !strings.Contains(err.Error(), "fleetmgr stop b") {
		t.Fatalf("start of a retired fleet: %v", err)
	}
	if _, err := m.Restart(context.Background(), "b", Options{}); err == nil || !strings.Contains(err.Error(), "no longer in") {
		t.Fatalf("restart of a retired fleet: %v", err)
	}
	if _, err := m.Fleet("gone"); err == nil || !strings.Contains(err.Error(), "defines a, c") {
		t.Fatalf("a removed, stopped fleet: %v; want the file's unknown-fleet error", err)
	}
	if _, err := m.Fleet("c"); err != nil {
		t.Fatalf("added fleet: %v", err)
	}
	// A name that is no fleet name never reaches a path.
	if _, err := m.Fleet("../" + filepath.Base(dir)); err == nil {
		t.Fatal("a path-like name resolved")
	}

	// A retired fleet that is stopped (desired stopped, nothing alive)
	// disappears.
	if err := writeState(m.statePath("b"), &State{Name: "b", Desired: DesiredStopped, Phase: PhaseStopped}); err != nil {
		t.Fatal(err)
	}
	if got := m.Names(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Names after b stopped = %v", got)
	}
}

// TestReloadRefusesAnotherStateDir: the daemon's records and locks are in
// its state dir; a file that moves it is refused whole.
func TestReloadRefusesAnotherStateDir(t *testing.T) {
	old := reloadConfig(t, t.TempDir(), "a")
	m := New(old, slog.New(slog.DiscardHandler), nil)
	next := reloadConfig(t, t.TempDir(), "a", "b")
	if _, err := m.Reload(next); err == nil || !strings.Contains(err.Error(), "state_dir changed") {
		t.Fatalf("Reload with another state dir: %v", err)
	}
	if m.Config() != old || m.Generation() != 0 {
		t.Fatal("a refused reload changed the config")
	}
}

// TestReloadReportsWhatOnlyServeApplies: listen, socket, guard and status
// changes, and turning the journal on or off, are named as needing a new serve.
func TestReloadReportsWhatOnlyServeApplies(t *testing.T) {
	dir := t.TempDir()
	m := New(reloadConfig(t, dir, "a"), slog.New(slog.DiscardHandler), nil)
	next := reloadConfig(t, dir, "a")
	next.Manager.Listen = "127.0.0.1:9999"
	next.Guard.OperatorSessions = []string{"ops"}
	next.Manager.Journal = !next.Manager.Journal // opened or not once, at serve's start
	rep, err := m.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.ServeRestart, []string{"manager.listen", "manager.journal", "guard.operator_sessions"}) || len(rep.Changed) != 0 {
		t.Fatalf("report %+v", rep)
	}
	if l := strings.Join(rep.Lines(), "\n"); !strings.Contains(l, "not applied until fleetmgr serve restarts: manager.listen, manager.journal, guard.operator_sessions") {
		t.Fatalf("lines:\n%s", l)
	}
}

// TestReloadReportsFederation: adding [federation], changing its trust or
// its heartbeat needs a new serve (the runtime is built once); the same
// table on another line does not.
func TestReloadReportsFederation(t *testing.T) {
	dir := t.TempDir()
	m := New(reloadConfig(t, dir, "a"), slog.New(slog.DiscardHandler), nil)
	fed := func(line int, hb time.Duration, trust ...string) *registry.Config {
		c := reloadConfig(t, dir, "a")
		c.Federation = &registry.Federation{Host: "alpha", Vhost: "fleetmgr", Trust: trust, Line: line}
		c.Federation.Heartbeat.Duration = hb
		return c
	}
	for i, tc := range []struct {
		next *registry.Config
		want bool
	}{
		{fed(10, time.Second), true},   // added
		{fed(20, time.Second), false},  // moved only
		{fed(20, 2*time.Second), true}, // heartbeat
		{fed(20, 2*time.Second, "beta ed25519:"+strings.Repeat("A", 43)+"="), true}, // trust
		{reloadConfig(t, dir, "a"), true},                                           // removed
	} {
		rep, err := m.Reload(tc.next)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(rep.ServeRestart, "federation"); got != tc.want {
			t.Errorf("step %d: serve_restart %v, want federation listed: %v", i, rep.ServeRestart, tc.want)
		}
	}
}

// TestSettingsOfCoversProcessSettingsOnly: every exported field of
// registry.Fleet that shapes a process has a key (a field added later is
// covered without a change in settingsOf); supervision, call_timeout and
// bookkeeping fields do not.
func TestSettingsOfCoversProcessSettingsOnly(t *testing.T) {
	cfg := reloadConfig(t, t.TempDir(), "a")
	got := settingsOf(cfg, cfg.Fleets["a"])
	for _, k := range []string{"project", "command", "port", "herdr_session", "worktree_root", "env", "mcp_path",
		"config_template", "config_file", "lead", "lead_tab", "lead_command", "vhost", "broker_user", "broker_uri_env",
		"manager.herdr_bin", "manager.log_max_mb", "manager.log_max_backups", "broker.amqp_url"} {
		if _, ok := got[k]; !ok {
			t.Errorf("settingsOf has no %q", k)
		}
	}
	for _, k := range []string{"name", "line", "port_allocated", "restart", "call_timeout", "state_dir", "log_dir", "host", "tools"} {
		if _, ok := got[k]; ok {
			t.Errorf("settingsOf has %q, which applies without a restart", k)
		}
	}
	for in, want := range map[string]string{"WorktreeRoot": "worktree_root", "MCPPath": "mcp_path", "BrokerURIEnv": "broker_uri_env", "Env": "env", "PassEnv": "pass_env"} {
		if s := snakeCase(in); s != want {
			t.Errorf("snakeCase(%s) = %s, want %s", in, s, want)
		}
	}
	// Equal values, equal digests; map order does not matter.
	a := cfg.Fleets["a"]
	a.Env = map[string]string{"X": "1", "Y": "2", "Z": "3"}
	b := *a
	b.Env = map[string]string{"Z": "3", "Y": "2", "X": "1"}
	if d := diffSettings(settingsOf(cfg, a), settingsOf(cfg, &b)); len(d) != 0 {
		t.Fatalf("equal settings differ on %v", d)
	}
	b.Env = map[string]string{"X": "1"}
	if d := diffSettings(settingsOf(cfg, a), settingsOf(cfg, &b)); !slices.Equal(d, []string{"env"}) {
		t.Fatalf("diff = %v, want env", d)
	}
}

// TestSupervisorFollowsReload: a fleet added by a reload gets its
// supervisor goroutine at once (here: its failing start is retried until
// the crash loop), and a fleet removed by a reload is never restarted
// again.
func TestSupervisorFollowsReload(t *testing.T) {
	dir := t.TempDir()
	old := reloadConfig(t, dir, "a")
	old.Fleets["a"].Project = filepath.Join(dir, "missing") // every start fails its first check
	m := New(old, slog.New(slog.DiscardHandler), nil)
	for _, n := range []string{"a", "b"} {
		if err := writeState(m.statePath(n), &State{Name: n, Desired: DesiredRunning, Phase: PhaseFailed}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSupervisor(m, slog.New(slog.DiscardHandler))
	s.tick = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	await := func(name string, cond func(*State) bool) {
		t.Helper()
		if err := wait.Until(ctx, time.Minute, func() (bool, string) {
			st, err := readState(m.statePath(name), name)
			return err == nil && cond(st), fmt.Sprintf("%+v", st)
		}); err != nil {
			t.Fatalf("fleet %s: condition not met: %v", name, err)
		}
	}
	await("a", func(st *State) bool { return st.Restarts >= 1 })
	if st, _ := readState(m.statePath("b"), "b"); st.Restarts != 0 {
		t.Fatalf("b is not configured yet but was restarted: %+v", st)
	}

	// Reload: b added (its project missing too), a removed.
	next := reloadConfig(t, dir, "b")
	next.Fleets["b"].Project = filepath.Join(dir, "missing")
	if _, err := m.Reload(next); err != nil {
		t.Fatal(err)
	}
	await("b", func(st *State) bool { return st.CrashLoop })
	// a's goroutine is gone: its restarts no longer grow (for 15
	// supervisor ticks, 6 backoffs).
	before, _ := readState(m.statePath("a"), "a")
	wait.Never(t, 300*time.Millisecond, "fleet a, removed by the reload, still supervised", func() (bool, string) {
		after, _ := readState(m.statePath("a"), "a")
		return after.Restarts != before.Restarts || after.CrashLoop != before.CrashLoop, fmt.Sprintf("restarts %d → %d", before.Restarts, after.Restarts)
	})
}

// TestStartRefusesToShareWithARetiredFleet: the file's isolation rules
// cannot see a fleet it no longer names; a start that would share that
// fleet's herdr session (or port, vhost, worktree root) while it may still
// run is refused, naming it.
func TestStartRefusesToShareWithARetiredFleet(t *testing.T) {
	dir := t.TempDir()
	old := reloadConfig(t, dir, "a", "b")
	m := New(old, slog.New(slog.DiscardHandler), nil)
	recordRunning(t, m, old, "b")
	next := reloadConfig(t, dir, "a", "c")
	next.Fleets["c"].HerdrSession = "hs-b"
	if _, err := m.Reload(next); err != nil {
		t.Fatal(err)
	}
	_, err := m.Start(context.Background(), "c", Options{})
	if err == nil || !strings.Contains(err.Error(), "herdr session hs-b with fleet b") || !strings.Contains(err.Error(), "fleetmgr stop b") {
		t.Fatalf("start of c sharing b's herdr session: %v", err)
	}
	next.Fleets["c"].HerdrSession = "hs-c"
	next.Fleets["c"].Port = old.Fleets["b"].Port
	if _, err := m.startable(next, "c"); err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("c on b's port: %v", err)
	}
	next.Fleets["c"].Port = 20999
	if _, err := m.startable(next, "c"); err != nil {
		t.Fatalf("c sharing nothing: %v", err)
	}
}
