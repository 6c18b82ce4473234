package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestBackoffDoublesAndCaps(t *testing.T) {
	pol := registry.RestartPolicy{BackoffInitial: registry.Duration{Duration: time.Second}, BackoffMax: registry.Duration{Duration: 60 * time.Second}}
	var got []time.Duration
	for step := 0; step < 9; step++ {
		got = append(got, backoff(pol, step))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff steps %v, want %v s", got, want)
		}
	}
	if d := backoff(pol, 1000); d != 60*time.Second {
		t.Errorf("step 1000: %v", d)
	}
}

// sleeper starts `sleep 60` as the leader of its own session.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

func TestKillSessionNeverSignalsAReusedPid(t *testing.T) {
	c := sleeper(t)
	k, err := procfs.KeyOf(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := &Proc{PID: k.PID, StartTime: k.StartTime + 7} // our record; the pid is someone else's now
	if left := killSession(context.Background(), stale, 100*time.Millisecond); left != nil {
		t.Errorf("killSession returned %v", left)
	}
	wait.Never(t, 50*time.Millisecond, "the process holding the reused pid ending (it was signalled)", func() (bool, string) {
		st, err := procfs.ReadStat(k.PID)
		return err != nil || st.State == 'Z', fmt.Sprintf("%v %+v", err, st)
	})
	// The real record does end it.
	if left := killSession(context.Background(), &Proc{PID: k.PID, StartTime: k.StartTime}, time.Second); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

func TestWatchExitSeesAnExitThroughAPidfd(t *testing.T) {
	c := sleeper(t)
	k, _ := procfs.KeyOf(c.Process.Pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := watchExit(ctx, Proc{PID: k.PID, StartTime: k.StartTime})
	if ch == nil {
		t.Skip("no pidfd support")
	}
	select {
	case <-ch:
		t.Fatal("closed before the exit")
	case <-time.After(100 * time.Millisecond):
	}
	t0 := time.Now()
	_ = c.Process.Kill()
	select {
	case <-ch:
		t.Logf("exit seen after %s", time.Since(t0))
	case <-time.After(2 * time.Second):
		t.Fatal("exit not seen")
	}
	// A record whose start time is not the live process's is "exited" at once.
	c2 := sleeper(t)
	k2, _ := procfs.KeyOf(c2.Process.Pid)
	select {
	case <-watchExit(ctx, Proc{PID: k2.PID, StartTime: k2.StartTime + 1}):
	case <-time.After(time.Second):
		t.Fatal("reused pid watched as ours")
	}
}

func TestRunLogPipeRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleetd.log")
	var want bytes.Buffer
	line := strings.Repeat("x", 99) + "\n"
	for i := 0; want.Len() < 2600<<10; i++ {
		fmt.Fprintf(&want, "%08d %s", i, line)
	}
	if err := RunLogPipe(bytes.NewReader(want.Bytes()), path, 1, 0); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var backups int
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
		if fi.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MB limit", e.Name(), fi.Size())
		}
		if e.Name() != "fleetd.log" {
			backups++
		}
	}
	// Every line is kept, each after the timestamp the copier gives it.
	stamped := want.Len() + bytes.Count(want.Bytes(), []byte("\n"))*logStampLen
	if backups < 2 || total != int64(stamped) {
		t.Errorf("%d rotated files, %d bytes in all (wrote %d, %d with the timestamps)", backups, total, want.Len(), stamped)
	}
	tail, err := readTail(path, 2)
	if err != nil || len(tail) != 2 || !strings.HasSuffix(strings.TrimSpace(want.String()), tail[1]) {
		t.Errorf("tail %q %v", tail, err)
	}
}

func TestFollowLogAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	cfg := &registry.Config{Manager: registry.Manager{StateDir: dir}, Fleets: map[string]*registry.Fleet{"kb": {Name: "kb"}}}
	m := New(cfg, slog.New(slog.DiscardHandler), nil)
	path := m.LogPath("kb", "fleetd")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	appendTo := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(f, s)
		f.Close()
	}
	appendTo("old line, before follow\n")
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- m.FollowLog(ctx, "kb", "fleetd", &out) }()
	wait.For(t, 5*time.Second, "the follower at the log's end", wait.Bool(func() bool {
		return openAt(path, int64(len("old line, before follow\n")))
	}))
	appendTo("first\n")
	wait.LogLine(t, 5*time.Second, out.String, "first\n")
	appendTo("last before rotation\n")
	if err := os.Rename(path, path+".1"); err != nil { // rotation, as lumberjack does
		t.Fatal(err)
	}
	appendTo("second, in the new file\n")
	wait.LogLine(t, 3*time.Second, out.String, "second")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "first\nlast before rotation\nsecond, in the new file\n"; got != want {
		t.Errorf("followed %q, want %q", got, want)
	}
	if _, err := m.LogTail("kb", "nope", 1); err == nil {
		t.Error("unknown log accepted")
	}
}

func TestStateShowsAnOverdueRestartAsFailed(t *testing.T) {
	dir := t.TempDir()
	cfg := &registry.Config{Manager: registry.Manager{StateDir: dir, StartTimeout: registry.Duration{Duration: time.Second}},
		Fleets: map[string]*registry.Fleet{"kb": {Name: "kb"}}}
	m := New(cfg, slog.New(slog.DiscardHandler), nil)
	st := &State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRestarting}
	st.NextRestartAt = time.Now().Add(-time.Minute)
	if err := writeState(m.statePath("kb"), st); err != nil {
		t.Fatal(err)
	}
	got, err := m.State("kb")
	if err != nil || got.Shown.Phase != PhaseFailed || !strings.Contains(got.Shown.LastError, "no fleetmgr serve made it") {
		t.Fatalf("overdue restart: %+v %v", got, err)
	}
	st.NextRestartAt = time.Now().Add(time.Second) // pending, not overdue
	if err := writeState(m.statePath("kb"), st); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.State("kb"); got.Shown.Phase != PhaseRestarting {
		t.Fatalf("pending restart shown as %s", got.Shown.Phase)
	}
}

func TestPlanRestartCountsTheWindowAndDoublesTheDelay(t *testing.T) {
	pol := registry.RestartPolicy{BackoffInitial: registry.Duration{Duration: time.Second}, BackoffMax: registry.Duration{Duration: 60 * time.Second},
		CrashLoopRestarts: 3, CrashLoopWindow: registry.Duration{Duration: time.Minute}}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	p := planRestart(pol, nil, 0, now)
	if p.crashLoop || p.delay != time.Second || !p.due.Equal(now.Add(time.Second)) || len(p.window) != 0 {
		t.Fatalf("first failure: %+v", p)
	}
	p = planRestart(pol, []time.Time{now.Add(-2 * time.Minute), now.Add(-30 * time.Second)}, 2, now)
	if p.crashLoop || p.delay != 4*time.Second || len(p.window) != 1 {
		t.Fatalf("one restart in the window, step 2: %+v", p)
	}
	p = planRestart(pol, []time.Time{now.Add(-50 * time.Second), now.Add(-20 * time.Second), now.Add(-time.Second)}, 3, now)
	if !p.crashLoop || len(p.window) != 3 {
		t.Fatalf("a full window: %+v", p)
	}
}

func TestPendingRestart(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	st := &State{Desired: DesiredRunning, Phase: PhaseRestarting}
	st.NextRestartAt = now.Add(3 * time.Second)
	st.LastRestartReason = "fleetd exited: signal: killed\nmore"
	if !pendingRestart(st) {
		t.Fatal("a recorded restart is not pending")
	}
	if got := st.PendingRestart(now); got != "restarting in 3s (reason: fleetd exited: signal: killed)" {
		t.Errorf("PendingRestart: %q", got)
	}
	if got := st.PendingRestart(now.Add(2500 * time.Millisecond)); !strings.HasPrefix(got, "restarting in <1s") {
		t.Errorf("half a second before: %q", got)
	}
	if got := st.PendingRestart(now.Add(time.Minute)); !strings.HasPrefix(got, "restarting now") {
		t.Errorf("overdue: %q", got)
	}
	for name, f := range map[string]func(*State){
		"stopped":    func(s *State) { s.Desired = DesiredStopped },
		"crash loop": func(s *State) { s.CrashLoop = true },
		"running":    func(s *State) { s.Phase = PhaseRunning },
		"not due":    func(s *State) { s.NextRestartAt = time.Time{} },
	} {
		s := *st
		f(&s)
		if pendingRestart(&s) {
			t.Errorf("%s: taken for a pending restart", name)
		}
	}
	if got := (&State{Phase: PhaseRestarting, Supervision: Supervision{LastRestartReason: "an older one"}}).PendingRestart(now); got != "restarting now" {
		t.Errorf("no due time: %q", got)
	}
	if got := (&State{Phase: PhaseFailed}).PendingRestart(now); got != "" {
		t.Errorf("failed fleet: %q", got)
	}
}

// TestStateWhileSupervised: a fleetd found dead reads "restarting" while a
// supervisor holds the fleet's supervisor.lock (it is about to record the
// restart), and "failed … no fleetmgr serve was supervising it" only
// when none does; likewise an overdue restart.
func TestStateWhileSupervised(t *testing.T) {
	m, _ := testManager(t)
	st := &State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRunning, Fleetd: &Proc{PID: 1 << 22, StartTime: 1}}
	if err := writeState(m.statePath("kb"), st); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.State("kb"); got.Shown.Phase != PhaseFailed || !strings.Contains(got.Shown.LastError, "no fleetmgr serve was supervising it") {
		t.Fatalf("unsupervised: %+v", got)
	}
	release, ok := m.holdSupervisorLock("kb")
	if !ok || !m.supervised("kb") {
		t.Fatal("supervisor.lock not held")
	}
	if _, again := m.holdSupervisorLock("kb"); again {
		t.Fatal("two supervisors hold one fleet's lock")
	}
	if got, _ := m.State("kb"); got.Shown.Phase != PhaseRestarting || got.Shown.LastError != "" {
		t.Fatalf("supervised: %+v", got)
	}
	st.Phase, st.Fleetd = PhaseRestarting, nil
	st.NextRestartAt = time.Now().Add(-time.Hour)
	if err := writeState(m.statePath("kb"), st); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.State("kb"); got.Shown.Phase != PhaseRestarting {
		t.Fatalf("an overdue restart while supervised: %+v", got)
	}
	release()
	if m.supervised("kb") {
		t.Fatal("released lock still held")
	}
	if got, _ := m.State("kb"); got.Shown.Phase != PhaseFailed || !strings.Contains(got.Shown.LastError, "no fleetmgr serve made it") {
		t.Fatalf("an overdue restart, unsupervised: %+v", got)
	}
}

// TestNextProbe: a probe is due between half and one and a half
// health_interval after the last, at instants shared by every fleet with
// that interval, and probes made on time stay health_interval apart.
func TestNextProbe(t *testing.T) {
	every := 2 * time.Second
	base := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	for _, off := range []time.Duration{0, time.Millisecond, 999 * time.Millisecond, time.Second, 1999 * time.Millisecond} {
		now := base.Add(off)
		got := nextProbe(now, every)
		if d := got.Sub(now); d <= every/2 || d > every+every/2 {
			t.Errorf("nextProbe(+%s) is %s later, want in (%s, %s]", off, d, every/2, every+every/2)
		}
		if !got.Equal(got.Truncate(every)) {
			t.Errorf("nextProbe(+%s) = %s, not a multiple of %s", off, got, every)
		}
	}
	// Two fleets looking 0.3 s apart probe at the same instant.
	if a, b := nextProbe(base.Add(100*time.Millisecond), every), nextProbe(base.Add(400*time.Millisecond), every); !a.Equal(b) {
		t.Errorf("fleets 0.3 s apart: %s and %s", a, b)
	}
	// Made on time (a few ms late), the next is one interval later.
	due := nextProbe(base, every)
	if next := nextProbe(due.Add(3*time.Millisecond), every); next.Sub(due) != every {
		t.Errorf("probe on time: next %s after, want %s", next.Sub(due), every)
	}
	if got := nextProbe(base, 0); !got.Equal(base) {
		t.Errorf("nextProbe(every 0) = %s, want now", got)
	}
}

// TestBusy: a fleet is busy exactly while a start, stop or restart holds
// its lock (here this process's lock, through another open of the file, as
// another fleetmgr's would be); a fleet never locked is not.
func TestBusy(t *testing.T) {
	m, _ := testManager(t)
	if m.busy("kb") {
		t.Fatal("busy before any lock file exists")
	}
	unlock, err := m.lock(t.Context(), "kb")
	if err != nil {
		t.Fatal(err)
	}
	if !m.busy("kb") {
		t.Error("not busy while the lock is held")
	}
	unlock()
	if m.busy("kb") {
		t.Error("busy after the lock was released")
	}
	// busy's own probe leaves the lock free for the next start.
	unlock, err = m.lock(t.Context(), "kb")
	if err != nil {
		t.Fatalf("lock after busy: %v", err)
	}
	unlock()
}

// TestHerdrDue: a herdr server that answered is pinged again only once
// herdr_health_interval has passed since its last answer, or since what
// serve's tracker last heard from it when that is later; after a ping
// that failed it is pinged at every probe until health_failures.
func TestHerdrDue(t *testing.T) {
	pol := registry.RestartPolicy{HealthInterval: registry.Duration{Duration: 2 * time.Second}}
	if got := pol.HerdrPingEvery(); got != 10*time.Second {
		t.Fatalf("HerdrPingEvery unset = %s, want 5 × health_interval", got)
	}
	pol.HerdrHealthInterval.Duration = 12 * time.Second
	base := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	var heard time.Time
	s := &Supervisor{}
	s.HeardFrom(func(sock string) time.Time {
		if sock != "/run/h.sock" {
			t.Errorf("heard asked for %q", sock)
		}
		return heard
	})
	w := &fleetWatch{pol: pol}
	for _, c := range []struct {
		name  string
		ok    time.Time // last ping answered
		heard time.Time
		fails int
		at    time.Duration // probe made this long after base
		want  bool
	}{
		{"never pinged", time.Time{}, time.Time{}, 0, 0, true},
		{"answered 2 s ago", base, time.Time{}, 0, 2 * time.Second, false},
		{"answered 10 s ago", base, time.Time{}, 0, 10 * time.Second, false},
		{"answered 11 s ago: due within half a probe interval", base, time.Time{}, 0, 11 * time.Second, true},
		{"answered 12 s ago", base, time.Time{}, 0, 12 * time.Second, true},
		{"answered 12 s ago, heard 4 s ago", base, base.Add(8 * time.Second), 0, 12 * time.Second, false},
		{"answered 20 s ago, heard 12 s ago", base, base.Add(8 * time.Second), 0, 20 * time.Second, true},
		{"heard before the answer", base, base.Add(-time.Minute), 0, 12 * time.Second, true},
		{"the last ping failed", base, base.Add(2 * time.Second), 1, 3 * time.Second, true},
	} {
		w.herdrOK, w.herdrFails, heard = c.ok, c.fails, c.heard
		if got := s.herdrDue(w, "/run/h.sock", base.Add(c.at)); got != c.want {
			t.Errorf("%s: due %v, want %v", c.name, got, c.want)
		}
	}
	// Never more often than the health probes.
	pol.HerdrHealthInterval.Duration = time.Second
	if got := pol.HerdrPingEvery(); got != 2*time.Second {
		t.Errorf("herdr_health_interval below health_interval: every %s", got)
	}
}
