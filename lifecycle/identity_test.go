package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// startProc runs argv as the leader of its own session with extra
// environment entries and returns its record as spawn would write it
// (pid, start time, boot id). The process is killed at cleanup.
func startProc(t *testing.T, env []string, argv ...string) (*exec.Cmd, *Proc) {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Process.Kill(); _ = c.Wait() })
	k, err := procfs.KeyOf(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := procfs.BootID()
	if err != nil {
		t.Fatal(err)
	}
	return c, &Proc{PID: k.PID, StartTime: k.StartTime, BootID: boot}
}

func testManager(t *testing.T) (*Manager, *syncbuf.Buffer) {
	t.Helper()
	dir := t.TempDir()
	cfg := &registry.Config{Manager: registry.Manager{StateDir: dir, StartTimeout: registry.Duration{Duration: time.Second}},
		Fleets: map[string]*registry.Fleet{"kb": {Name: "kb", HerdrSession: "kb"}}}
	var logs syncbuf.Buffer
	return New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil), &logs
}

func procAlive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// TestJudgeRefusesWhatIsNotTheRecordedProcess: a record is taken for the
// fleet's process only when boot id, start time, exe and identity (argv
// or environment) all agree; each mismatch has its own reason.
func TestJudgeRefusesWhatIsNotTheRecordedProcess(t *testing.T) {
	m, _ := testManager(t)
	_, fleetd := startProc(t, []string{"FLEET_NAME=kb"}, "sleep", "60")
	_, stranger := startProc(t, nil, "sleep", "60")
	// A herdr server is known by its argv; `sh -c 'sleep 60; :'` keeps its
	// own (the trailing command stops sh from exec'ing sleep).
	_, server := startProc(t, nil, "sh", "-c", "sleep 60; :", "herdr", "--session", "kb", "server")
	exe, err := procfs.Exe(fleetd.PID)
	if err != nil {
		t.Fatal(err)
	}
	herdr := m.herdrRole("kb", &State{HerdrSocket: "/x/herdr/sessions/kb/herdr.sock"})
	if herdr.session != "kb" {
		t.Fatalf("session from the socket path: %q", herdr.session)
	}
	with := func(p *Proc, f func(*Proc)) *Proc { q := *p; f(&q); return &q }
	for _, c := range []struct {
		name string
		p    *Proc
		r    role
		want string // "" = ours
	}{
		{"fleetd", fleetd, fleetdRole("kb"), ""},
		{"fleetd, old record without boot id and exe", with(fleetd, func(p *Proc) { p.BootID = "" }), fleetdRole("kb"), ""},
		{"fleetd with its exe", with(fleetd, func(p *Proc) { p.Exe = exe }), fleetdRole("kb"), ""},
		{"fleetd whose binary was replaced", with(fleetd, func(p *Proc) { p.Exe = exe + " (deleted)" }), fleetdRole("kb"), ""},
		{"another fleet's name", fleetd, fleetdRole("docs"), StaleIdentity},
		{"a stranger with its true start time", stranger, fleetdRole("kb"), StaleIdentity},
		{"a stranger, old record", with(stranger, func(p *Proc) { p.BootID = "" }), fleetdRole("kb"), StaleIdentity},
		{"another boot", with(fleetd, func(p *Proc) { p.BootID = "00000000-0000-4000-8000-000000000000" }), fleetdRole("kb"), StaleBootID},
		{"pid reused", with(fleetd, func(p *Proc) { p.StartTime++ }), fleetdRole("kb"), StalePIDReused},
		{"another executable", with(fleetd, func(p *Proc) { p.Exe = "/usr/bin/fleetd" }), fleetdRole("kb"), StaleExe},
		{"herdr server", server, herdr, ""},
		{"herdr server of another session", server, m.herdrRole("kb", &State{HerdrSocket: "/x/herdr/sessions/kb2/herdr.sock"}), StaleIdentity},
		{"fleetd taken for a herdr server", fleetd, herdr, StaleIdentity},
		{"gone", &Proc{PID: 1 << 22, StartTime: 1}, fleetdRole("kb"), ""},
	} {
		got := m.judge(c.p, c.r)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: refused (%s: %s)", c.name, got.code, got.why)
		case c.want != "" && (got == nil || got.code != c.want):
			t.Errorf("%s: got %+v, want %s", c.name, got, c.want)
		}
	}
}

// TestKillRecordedNeverSignalsAStranger: a record naming a live process
// with its true start time but not the fleet's identity, or recorded under
// another boot, is refused (logged, counted, nothing signalled); the
// fleet's own process is ended.
func TestKillRecordedNeverSignalsAStranger(t *testing.T) {
	m, logs := testManager(t)
	ctx := context.Background()
	_, stranger := startProc(t, nil, "sleep", "60")
	o := m.killRecorded(ctx, stranger, fleetdRole("kb"), 200*time.Millisecond)
	if o.Stale == nil || o.Stale.code != StaleIdentity || len(o.Signalled) != 0 || o.Running {
		t.Fatalf("stranger: %+v", o)
	}
	if d := o.detail(stranger); !strings.HasPrefix(d, "record was stale; nothing signalled") {
		t.Errorf("detail %q", d)
	}
	_, other := startProc(t, []string{"FLEET_NAME=kb"}, "sleep", "60")
	other.BootID = "00000000-0000-4000-8000-000000000000"
	if o := m.killRecorded(ctx, other, fleetdRole("kb"), 200*time.Millisecond); o.Stale == nil || o.Stale.code != StaleBootID {
		t.Fatalf("another boot's record: %+v", o)
	}
	wait.Never(t, 100*time.Millisecond, "a refused record's process ending (it was signalled)", wait.Bool(func() bool {
		return !procAlive(stranger.PID) || !procAlive(other.PID)
	}))
	if !strings.Contains(logs.String(), "record was stale; nothing signalled") || !strings.Contains(logs.String(), "reason=identity") {
		t.Errorf("refusal not logged with its reason:\n%s", logs.String())
	}
	got := m.StaleRecords()
	if len(got) != 2 || got[0] != (StaleRecordCount{"kb", StaleBootID, 1}) || got[1] != (StaleRecordCount{"kb", StaleIdentity, 1}) {
		t.Errorf("counted %+v", got)
	}

	// The same record with this boot's id is the fleet's process: ended.
	other.BootID = m.bootID()
	o = m.killRecorded(ctx, other, fleetdRole("kb"), time.Second)
	if o.Stale != nil || !o.Running || len(o.Left) != 0 || o.detail(other) != fmt.Sprintf("stopped (pid %d)", other.PID) {
		t.Fatalf("the fleet's own process: %+v", o)
	}
	if procAlive(other.PID) {
		t.Fatal("the fleet's own process survived")
	}
}

// TestKillRecordedLeftoversOfAnExitedLeader: when the recorded process has
// exited, what is left in its session is signalled only if it shows the
// fleet's identity.
func TestKillRecordedLeftoversOfAnExitedLeader(t *testing.T) {
	m, _ := testManager(t)
	dir := t.TempDir()
	// The leader starts two sleeps in its session, one without FLEET_NAME,
	// writes their pids and exits.
	script := `sleep 60 & echo $! > ` + dir + `/ours; env -u FLEET_NAME sleep 60 & echo $! > ` + dir + `/theirs; exit 0`
	c, rec := startProc(t, []string{"FLEET_NAME=kb"}, "sh", "-c", script)
	_ = c.Wait()
	read := func(n string) int {
		b, err := os.ReadFile(dir + "/" + n)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		return pid
	}
	ours, theirs := read("ours"), read("theirs")
	wait.For(t, 5*time.Second, "env to exec sleep without FLEET_NAME", wait.Bool(func() bool {
		has, err := procfs.HasEnv(theirs, "FLEET_NAME", "kb")
		return err == nil && !has
	}))
	o := m.killRecorded(context.Background(), rec, fleetdRole("kb"), time.Second)
	if o.Stale != nil || o.Running || len(o.Signalled) != 1 || o.Signalled[0] != ours || len(o.Left) != 0 {
		t.Fatalf("outcome %+v (ours %d, theirs %d)", o, ours, theirs)
	}
	if !strings.Contains(o.detail(rec), "had exited; ended 1 process(es)") {
		t.Errorf("detail %q", o.detail(rec))
	}
	wait.For(t, 5*time.Second, fmt.Sprintf("ours (%d) ended", ours), wait.Bool(func() bool { return !procAlive(ours) }))
	wait.Never(t, 100*time.Millisecond, fmt.Sprintf("theirs (%d) ending (it was signalled)", theirs), wait.Bool(func() bool { return !procAlive(theirs) }))
}

// TestStateShowsStaleAndLeftoverHerdr: a record stored running whose
// fleetd pid names a stranger is shown stale with why (never running with
// the stranger's pid); the same record naming the fleet's own fleetd is
// shown running; a failed fleet whose herdr server still runs says so and
// what ends it.
func TestStateShowsStaleAndLeftoverHerdr(t *testing.T) {
	m, _ := testManager(t)
	_, fleetd := startProc(t, []string{"FLEET_NAME=kb"}, "sleep", "60")
	_, stranger := startProc(t, nil, "sleep", "60")
	_, server := startProc(t, nil, "sh", "-c", "sleep 60; :", "herdr", "--session", "kb", "server")
	write := func(st *State) *State {
		t.Helper()
		st.Name, st.Desired = "kb", DesiredRunning
		if err := writeState(m.statePath("kb"), st); err != nil {
			t.Fatal(err)
		}
		got, err := m.State("kb")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := write(&State{Phase: PhaseRunning, Fleetd: stranger})
	if got.Shown.Phase != PhaseStale || got.Shown.Condition != CondStale ||
		!strings.Contains(got.Shown.LastError, fmt.Sprintf("pid %d", stranger.PID)) || !strings.Contains(got.Shown.LastError, "FLEET_NAME=kb") {
		t.Fatalf("record naming a stranger: shown %+v", got.Shown)
	}
	if got := write(&State{Phase: PhaseRunning, Fleetd: fleetd}); got.Shown.Phase != PhaseRunning || got.Shown.LastError != "" {
		t.Fatalf("record naming the fleet's fleetd: shown %+v", got.Shown)
	}
	reused := *fleetd
	reused.PID = stranger.PID
	if reused.StartTime == stranger.StartTime { // started in the same clock tick: make the reuse visible
		reused.StartTime--
	}
	if got := write(&State{Phase: PhaseRunning, Fleetd: &reused}); got.Shown.Phase != PhaseStale || !strings.Contains(got.Shown.LastError, "now names another process") {
		t.Fatalf("record whose pid was reused: shown %+v", got.Shown)
	}
	got = write(&State{Phase: PhaseFailed, LastError: "fleetd did not become healthy", Herdr: server})
	left := fmt.Sprintf("herdr session kb still runs (pid %d)", server.PID)
	if got.Shown.Phase != PhaseFailed || got.Shown.HerdrLeft != left || !strings.Contains(got.Shown.LastError, left+": `fleetmgr stop kb` ends it") ||
		!strings.HasPrefix(got.Shown.LastError, "fleetd did not become healthy; ") {
		t.Fatalf("failed fleet with its herdr server: shown %+v", got.Shown)
	}
	if got := write(&State{Phase: PhaseFailed, Herdr: stranger}); got.Shown.HerdrLeft != "" {
		t.Fatalf("failed fleet whose recorded herdr pid is a stranger: shown %+v", got.Shown)
	}
}
