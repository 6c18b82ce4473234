package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Supervision is the part of a fleet's State that supervision keeps (issue
// #4). It is embedded in State, so its fields appear at the top level of
// state.json. Restarts and LastExit live in State itself.
type Supervision struct {
	// LastRestartReason says why the supervisor last restarted fleetd, e.g.
	// "fleetd exited: signal: killed" or "health: 3 consecutive /healthz
	// failures (…)".
	LastRestartReason string `json:"last_restart_reason,omitempty"`
	// LastRestartAt is when that restart was decided.
	LastRestartAt time.Time `json:"last_restart_at,omitzero"`
	// NextRestartAt is when a pending restart is due (zero when none is).
	NextRestartAt time.Time `json:"next_restart_at,omitzero"`
	// RestartTimes are the supervisor's restarts inside crash_loop_window,
	// oldest first; kept in the state file so a new serve keeps counting.
	RestartTimes []time.Time `json:"restart_times,omitempty"`
	// BackoffStep is how many times the restart delay has doubled since
	// fleetd last stayed up for restart_reset_after.
	BackoffStep int `json:"backoff_step,omitempty"`
	// CrashLoop is set when the fleet failed more than crash_loop_restarts
	// times in crash_loop_window: the supervisor leaves it alone until
	// `fleetmgr start` or `fleetmgr restart` clears it.
	CrashLoop bool `json:"crash_loop,omitempty"`
	// LogTail holds the last lines of fleetd's log at its last unexpected
	// exit or health restart.
	LogTail []string `json:"log_tail,omitempty"`
	// Lead records that the fleet was started with its lead (--lead or
	// lead = true), so a restart relaunches a lead that died with its
	// herdr session.
	Lead bool `json:"lead,omitempty"`
}

// supervision is the Manager's own supervision bookkeeping.
type supervision struct {
	mu      sync.Mutex
	logPipe string               // see SetLogPipe; guarded by Manager.mu
	exits   map[int]string       // exit status of children this Manager reaped, by pid
	stale   map[[2]string]uint64 // refused records by fleet and reason (identity.go)

	bootOnce sync.Once
	boot     string // this boot's id, see Manager.bootID
}

// recordExit notes how a reaped child ended, for LastExit.
func (s *supervision) recordExit(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exits == nil {
		s.exits = map[int]string{}
	}
	s.exits[cmd.Process.Pid] = exitString(cmd)
}

// exitOf returns how child pid ended, waiting up to d for its reaper.
func (m *Manager) exitOf(pid int, d time.Duration) (string, bool) {
	deadline := time.Now().Add(d)
	for {
		m.sv.mu.Lock()
		e, ok := m.sv.exits[pid]
		if ok {
			delete(m.sv.exits, pid)
		}
		m.sv.mu.Unlock()
		if ok {
			return e, true
		}
		m.mu.Lock()
		_, child := m.children[pid]
		m.mu.Unlock()
		if !child || time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// beginStart is called by Start once it has read the fleet's state: an
// operator's start (not a supervisor's restart) clears a crash loop and the
// backoff, and records whether a lead was asked for.
func (m *Manager) beginStart(st *State, f *registry.Fleet, opt *Options) {
	if opt.restart {
		opt.Lead = opt.Lead || st.Lead
		return
	}
	st.CrashLoop, st.RestartTimes, st.BackoffStep, st.NextRestartAt = false, nil, 0, time.Time{}
	st.Lead = opt.Lead || f.Lead
}

// overdue shows a restart that was due long ago and never came (no serve
// ran to make it, e.g. serve was killed during the backoff) as failed, for
// State's readers; the record itself is left for the next serve, which
// makes it without counting it again. While a supervisor watches the fleet
// the restart is not overdue: it is being made.
func (m *Manager) overdue(st *State) {
	if st.Phase != PhaseRestarting || st.NextRestartAt.IsZero() || alive(st.Fleetd) || m.supervised(st.Name) {
		return
	}
	if time.Since(st.NextRestartAt) > m.Config().Manager.StartTimeout.Duration+5*time.Second {
		st.Phase = PhaseFailed
		st.LastError = fmt.Sprintf("a restart was due at %s but no fleetmgr serve made it; run `fleetmgr serve` (it restarts the fleet) or `fleetmgr start %s`",
			st.NextRestartAt.UTC().Format(time.RFC3339), st.Name)
	}
}

// supervisorLockPath is <fleet dir>/supervisor.lock, which a Supervisor's
// goroutine for the fleet holds (flock) for as long as it watches it.
func (m *Manager) supervisorLockPath(name string) string {
	return filepath.Join(m.FleetDir(name), "supervisor.lock")
}

// supervised reports whether a Supervisor (of this or any other fleetmgr
// process) watches fleet name right now: its supervisor.lock is held.
func (m *Manager) supervised(name string) bool {
	f, err := os.OpenFile(m.supervisorLockPath(name), os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// holdSupervisorLock takes fleet name's supervisor.lock for the caller's
// goroutine; release drops it. ok is false when another Supervisor holds
// it (then nothing is held).
func (m *Manager) holdSupervisorLock(name string) (release func(), ok bool) {
	if err := os.MkdirAll(m.FleetDir(name), 0o700); err != nil {
		return func() {}, false
	}
	f, err := os.OpenFile(m.supervisorLockPath(name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return func() {}, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return func() {}, false
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, true
}

// PendingRestart says when and why the supervisor restarts the fleet, for
// a caller who finds it down: "restarting in 3s (reason: fleetd exited:
// signal: killed)", "restarting now (…)" once due or while the restart's
// start runs, plain "restarting now" for a restart with no due time (an
// operator's `fleetmgr restart`, or an exit the supervisor has not
// recorded yet: the last reason would be an older one), "" when st is not
// restarting. now is the time to count from.
func (st *State) PendingRestart(now time.Time) string {
	if st.Phase != PhaseRestarting {
		return ""
	}
	when := "restarting now"
	if st.NextRestartAt.IsZero() {
		return when
	}
	if d := st.NextRestartAt.Sub(now); d > 0 {
		when = "restarting in " + max(time.Second, d.Round(time.Second)).String()
		if d < time.Second {
			when = "restarting in <1s"
		}
	}
	if r := firstLine(st.LastRestartReason); r != "" {
		when += " (reason: " + r + ")"
	}
	return when
}

// pendingRestart reports whether st records a restart the supervisor has
// decided (counted, with its due time) but not yet made: a serve killed
// during the backoff, or during the restart's start, leaves it so, and the
// next serve makes it without counting it again. It is pure: it reads st
// only.
func pendingRestart(st *State) bool {
	return st.Desired == DesiredRunning && !st.CrashLoop && st.Phase == PhaseRestarting && !st.NextRestartAt.IsZero()
}

// restartPlan is the supervisor's decision about one failure of fleetd.
type restartPlan struct {
	window    []time.Time   // the restart times still inside crash_loop_window
	crashLoop bool          // the window is full: mark the fleet failed
	delay     time.Duration // else: wait this long (the backoff) ...
	due       time.Time     // ... until then, and start it again
}

// planRestart decides what one failure of fleetd at now leads to, from the
// policy and the restarts recorded so far. It is pure.
func planRestart(pol registry.RestartPolicy, times []time.Time, step int, now time.Time) restartPlan {
	cutoff := now.Add(-pol.CrashLoopWindow.Duration)
	var p restartPlan
	for _, t := range times {
		if t.After(cutoff) {
			p.window = append(p.window, t)
		}
	}
	if len(p.window) >= pol.CrashLoopRestarts {
		p.crashLoop = true
		return p
	}
	p.delay = backoff(pol, step)
	p.due = now.Add(p.delay)
	return p
}

// busy reports whether another start, stop or restart of the fleet holds
// its lock right now.
func (m *Manager) busy(name string) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one attempt, no waiting
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return true
	}
	unlock()
	return false
}

// Restart stops fleet name's fleetd (SIGTERM to its session, stop_grace,
// SIGKILL) and starts it again, keeping its herdr session (and so the lead
// tab and every pane fleetd does not reap) when that still answers. It
// clears a crash loop. The desired state becomes running.
func (m *Manager) Restart(ctx context.Context, name string, opt Options) (*State, error) {
	if _, err := m.startable(m.Config(), name); err != nil {
		return nil, err
	}
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	t0 := time.Now()
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	st.Desired, st.Phase = DesiredRunning, PhaseRestarting
	if err := writeState(m.statePath(name), st); err != nil {
		return nil, err
	}
	if st.Fleetd != nil {
		o := m.killRecorded(ctx, st.Fleetd, fleetdRole(name), m.Config().Manager.StopGrace.Duration)
		if len(o.Left) > 0 {
			st.Phase, st.LastError = PhaseFailed, fmt.Sprintf("processes survived SIGKILL: %v", o.Left)
			_ = writeState(m.statePath(name), st)
			return st, fmt.Errorf("fleet %s: %s", name, st.LastError)
		}
		detail := o.detail(st.Fleetd)
		st.Fleetd = nil
		m.log.Info("restart step", "fleet", name, "step", "fleetd", "detail", detail)
		if opt.Progress != nil {
			opt.Progress(Step{Fleet: name, Name: "fleetd", Detail: detail, Elapsed: time.Since(t0)})
		}
		if err := writeState(m.statePath(name), st); err != nil {
			return st, err
		}
	}
	opt.Lead = opt.Lead || st.Lead
	opt.locked = true
	st2, err := m.Start(ctx, name, opt)
	if err != nil {
		m.noteStartFailure(name, err)
	}
	return st2, err
}

// noteStartFailure records in the state of fleet name (whose lock the
// caller holds) a restart's start that failed before it wrote anything
// itself: a check before any step (no project directory, the port taken,
// an unrecorded fleetd). Without it the fleet read "restarting" for ever
// with no error, and the supervisor's next restart reason and crash loop
// said only "fleetd not running". A start that failed later has already
// recorded its error (phase failed), and is left as it is.
func (m *Manager) noteStartFailure(name string, err error) {
	path := m.statePath(name)
	st, rerr := readState(path, name)
	if rerr != nil || alive(st.Fleetd) || (st.Phase == PhaseFailed && st.LastError == err.Error()) {
		return
	}
	st.Phase, st.NextRestartAt = PhaseFailed, time.Time{}
	if !st.CrashLoop {
		st.LastError = err.Error() // a crash loop's error says how to get out of it: kept
	}
	if werr := writeState(path, st); werr != nil {
		m.log.Error("write state", "fleet", name, "err", werr)
	}
}

// Supervisor keeps every fleet of a Manager in its desired state (issue #4):
// one goroutine per fleet watches fleetd (a pidfd, with a poll of its pid
// and start time as backstop), its herdr session and GET /healthz, and
// restarts fleetd with exponential backoff after an unexpected exit, a dead
// herdr session (restarted first) or health_failures failed probes in a
// row. Too many restarts within crash_loop_window mark the fleet failed.
//
// It acts on the state files, not on memory: the desired state any
// fleetmgr process recorded decides whether an exit was expected, so
// `fleetmgr stop` from another process is never taken for a crash, and a
// new Supervisor adopts fleets a previous one (or the CLI) started without
// restarting them, and makes a restart a previous one decided (counted and
// due) without counting it again. Stale records (pid gone, reused, or
// naming a process that is not the fleet's) are cleaned and logged, never
// signalled.
type Supervisor struct {
	m    *Manager
	log  *slog.Logger
	tick time.Duration // how often each fleet's state is looked at
}

// NewSupervisor returns a Supervisor for m's fleets; Run starts it.
func NewSupervisor(m *Manager, log *slog.Logger) *Supervisor {
	return &Supervisor{m: m, log: log, tick: 250 * time.Millisecond}
}

// Run supervises every configured fleet until ctx ends and returns when
// all its goroutines have. A restart in progress is finished (bounded by
// start_timeout) so no fleet is left half-started; a pending backoff is
// abandoned, and the next serve picks the fleet up. The set of fleets
// follows the Manager's config (Reload): a fleet added to it gets its
// goroutine at once, a fleet removed from it loses its goroutine (a
// pending backoff is abandoned, so it is never restarted again; it can
// still be stopped).
func (s *Supervisor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	type watched struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	running := map[string]*watched{}
	ending := map[string]chan struct{}{} // goroutines of removed fleets, maybe still finishing a start
	for {
		changed := s.m.ConfigChanged() // before the read: a reload in between is not missed
		want := map[string]bool{}
		for _, n := range s.m.Config().Names() {
			want[n] = true
		}
		for n, w := range running {
			if !want[n] {
				w.cancel()
				ending[n] = w.done
				delete(running, n)
			}
		}
		for n := range want {
			if running[n] != nil {
				continue
			}
			// A goroutine of this name cancelled by an earlier reload
			// may still be finishing a start: the new one waits for it,
			// so one fleet never has two.
			prev := ending[n]
			delete(ending, n)
			fctx, cancel := context.WithCancel(ctx)
			w := &watched{cancel: cancel, done: make(chan struct{})}
			running[n] = w
			wg.Go(func() {
				defer close(w.done)
				if prev != nil {
					select {
					case <-prev:
					case <-fctx.Done():
						return
					}
				}
				s.fleet(fctx, n)
			})
		}
		select {
		case <-ctx.Done():
			for _, w := range running {
				w.cancel()
			}
			return
		case <-changed:
		}
	}
}

// fleetWatch is one fleet goroutine's memory between ticks.
type fleetWatch struct {
	name        string
	pol         registry.RestartPolicy
	log         *slog.Logger
	proc        Proc            // the fleetd being watched
	exited      <-chan struct{} // closed when proc exits (pidfd); nil when not watching
	cancel      context.CancelFunc
	healthFails int
	herdrFails  int
	nextHealth  time.Time
	herdrLooked bool // herdr.spawned.json was looked at for this fleetd
	seen        bool // a state has been looked at (the first look is adoption)
}

func (w *fleetWatch) unwatch() {
	if w.cancel != nil {
		w.cancel()
	}
	w.proc, w.exited, w.cancel = Proc{}, nil, nil
	w.healthFails, w.herdrFails, w.nextHealth, w.herdrLooked = 0, 0, time.Time{}, false
}

func (s *Supervisor) fleet(ctx context.Context, name string) {
	w := &fleetWatch{name: name, log: s.log.With("fleet", name)}
	// Held while this goroutine watches the fleet, so that State's readers
	// (in any process) know a restart is being made.
	release, ok := s.m.holdSupervisorLock(name)
	if !ok {
		w.log.Warn("supervisor: another fleetmgr serve holds this fleet's supervisor.lock; supervising anyway")
	}
	defer release()
	defer w.unwatch()
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for {
		// The fleet's entry in the config in force: its policy follows a
		// reload at once (the settings of its processes wait for its next
		// start).
		f, err := s.m.Config().Fleet(name)
		if err != nil {
			return // removed by a reload; Run cancels ctx too
		}
		if f.Host != "" && f.Host != registry.LocalHost {
			w.unwatch() // a fleet on another host is its own host's manager's to supervise
		} else {
			w.pol = f.Restart
			s.check(ctx, w)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.exited:
			w.exited = nil // the next check sees the exit; never spin on a closed channel
		}
	}
}

// check looks at one fleet once and acts on what it finds.
func (s *Supervisor) check(ctx context.Context, w *fleetWatch) {
	if ctx.Err() != nil {
		return
	}
	path := s.m.statePath(w.name)
	st, err := readState(path, w.name)
	if err != nil {
		w.log.Error("supervisor: read state", "err", err)
		return
	}
	first := !w.seen
	w.seen = true
	if st.Desired != DesiredRunning || st.CrashLoop {
		w.unwatch()
		return
	}
	if s.m.busy(w.name) {
		return // a start, stop or restart is under way; look again later
	}
	up := alive(st.Fleetd)
	if !up && s.adoptSpawned(ctx, w) {
		return
	}
	if pendingRestart(st) {
		// Decided and counted, not made: normally by a serve that is gone
		// (killed during the backoff or the restart's start). Made now, at
		// its due time, not counted again.
		w.unwatch()
		w.log.Warn("supervisor: resuming a pending restart (decided and counted earlier, not yet made)", "due", st.NextRestartAt.Format(time.RFC3339Nano), "reason", st.LastRestartReason, "restart", st.Restarts)
		s.await(ctx, w, st.NextRestartAt)
		return
	}
	if !up {
		var reason, exit string
		switch {
		case st.Fleetd == nil:
			reason = "fleetd not running"
			if st.LastError != "" {
				reason = "start failed: " + firstLine(st.LastError)
			}
		default:
			var ok bool
			exit, ok = s.m.exitOf(st.Fleetd.PID, 500*time.Millisecond) // known when fleetd was our child
			switch {
			case ok:
				reason = "fleetd exited: " + exit
			case first: // found dead by a new supervisor: a record from before it
				reason = fmt.Sprintf("stale state entry: fleetd pid %d (start time %d) is gone or is now another process; record cleaned", st.Fleetd.PID, st.Fleetd.StartTime)
				w.log.Warn("supervisor: "+reason, "pid", st.Fleetd.PID)
			default:
				exit = fmt.Sprintf("exit status unknown (pid %d was not started by this fleetmgr)", st.Fleetd.PID)
				reason = "fleetd exited: " + exit
			}
		}
		s.restart(ctx, w, st.Fleetd, reason, exit, false)
		return
	}
	if !sameProc(&w.proc, st.Fleetd) {
		// A record not watched yet (adoption, or a new fleetd): it must be
		// this fleet's fleetd, not a process that merely holds its pid and
		// start time (a forged file, or a collision after a reboot).
		if bad := s.m.judge(st.Fleetd, fleetdRole(w.name)); bad != nil {
			s.restart(ctx, w, st.Fleetd, "stale state entry: "+bad.why, "", false)
			return
		}
		w.unwatch()
		w.proc = *st.Fleetd
		wctx, cancel := context.WithCancel(ctx)
		w.cancel = cancel
		w.exited = watchExit(wctx, w.proc)
		s.m.mu.Lock()
		_, mine := s.m.children[w.proc.PID]
		s.m.mu.Unlock()
		if !mine {
			w.log.Info("supervisor: adopted fleet", "pid", w.proc.PID, "port", st.Port, "herdr_pid", pidOf(st.Herdr))
		}
	}
	if !w.herdrLooked {
		w.herdrLooked = true
		s.recordSpawnedHerdr(ctx, w, st)
	}
	if st.Herdr != nil && !alive(st.Herdr) {
		s.restart(ctx, w, st.Fleetd, fmt.Sprintf("herdr session died (server pid %d)", st.Herdr.PID), "", true)
		return
	}
	now := time.Now()
	if now.Before(w.nextHealth) {
		return
	}
	w.nextHealth = now.Add(w.pol.HealthInterval.Duration)
	timeout := min(w.pol.HealthInterval.Duration, 2*time.Second)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	h, _, perr := Probe(pctx, s.m.http, st.Port)
	cancel()
	if perr == nil && h.Name != w.name {
		perr = fmt.Errorf("port %d answers as fleet %q", st.Port, h.Name)
	}
	if st.HerdrSocket != "" { // a hung server, or a session we did not start, shows by ping
		hctx, cancel := context.WithTimeout(ctx, timeout)
		_, herr := herdr.New(st.HerdrSocket).Ping(hctx)
		cancel()
		if herr != nil {
			w.herdrFails++
			if w.herdrFails >= w.pol.HealthFailures {
				s.restart(ctx, w, st.Fleetd, fmt.Sprintf("herdr session not answering at %s (%v)", st.HerdrSocket, herr), "", true)
				return
			}
		} else {
			w.herdrFails = 0
		}
	}
	if perr != nil {
		if ctx.Err() != nil {
			return
		}
		w.healthFails++
		w.log.Warn("supervisor: health check failed", "failures", w.healthFails, "of", w.pol.HealthFailures, "err", perr)
		if w.healthFails >= w.pol.HealthFailures {
			s.restart(ctx, w, st.Fleetd, fmt.Sprintf("health: %d consecutive /healthz failures (last: %v)", w.healthFails, perr), "", false)
		}
		return
	}
	w.healthFails = 0
	stable := st.BackoffStep > 0 && !st.StartedAt.IsZero() && time.Since(st.StartedAt) >= w.pol.ResetAfter.Duration
	if st.Phase != PhaseRunning || stable || !st.NextRestartAt.IsZero() {
		s.update(ctx, w, st.Fleetd, func(st *State) {
			st.Phase, st.NextRestartAt = PhaseRunning, time.Time{}
			if stable {
				st.BackoffStep = 0
				w.log.Info("supervisor: fleetd stable; restart backoff reset", "up", time.Since(st.StartedAt).Truncate(time.Second))
			}
		})
	}
}

// spawnedHerdr returns the herdr server that herdr.spawned.json names when
// it is alive and is the server of the fleet's session (judged as any
// record), else nil: a start interrupted after it spawned the server but
// before it recorded it in state.json leaves it so.
func (m *Manager) spawnedHerdr(name string, st *State) *Proc {
	p := m.readSpawned(name, "herdr")
	if p == nil || !m.recorded(p, m.herdrRole(name, st)) {
		return nil
	}
	settle(p)
	return p
}

// recordSpawnedHerdr records in the fleet's state the herdr server an
// interrupted start spawned (see spawnedHerdr) when the state names none
// alive, so its death is seen by pid at once rather than after
// health_failures pings.
func (s *Supervisor) recordSpawnedHerdr(ctx context.Context, w *fleetWatch, st *State) {
	if st.HerdrSocket == "" || alive(st.Herdr) || s.m.spawnedHerdr(w.name, st) == nil {
		return
	}
	s.update(ctx, w, st.Fleetd, func(st *State) {
		if hp := s.m.spawnedHerdr(w.name, st); hp != nil && !alive(st.Herdr) {
			st.Herdr, st.HerdrOwned = hp, true
			w.log.Warn("supervisor: recorded the herdr server an interrupted start spawned", "herdr_pid", hp.PID)
		}
	})
}

// adoptSpawned handles a start that was killed after it spawned fleetd but
// before it recorded it (SIGKILL of the CLI or serve mid-start): when the
// process spawn last recorded for the fleet is alive, is this fleet's
// fleetd and /healthz names the fleet, it becomes the fleet's fleetd (and
// likewise its herdr server) instead of a second fleetd being started
// against a taken port. A restart that start was making is thereby made.
func (s *Supervisor) adoptSpawned(ctx context.Context, w *fleetWatch) bool {
	p := s.m.readSpawned(w.name, "fleetd")
	if p == nil || !alive(p) {
		return false
	}
	f, err := s.m.Config().Fleet(w.name)
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, _, perr := Probe(pctx, s.m.http, f.Port)
	cancel()
	if perr != nil || h.Name != w.name {
		return false
	}
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return false
	}
	defer unlock()
	path := s.m.statePath(w.name)
	st, err := readState(path, w.name)
	if err != nil || st.Desired != DesiredRunning || alive(st.Fleetd) || !s.m.recorded(p, fleetdRole(w.name)) {
		return false
	}
	settle(p)
	st.Fleetd, st.Port, st.Phase, st.LastError, st.NextRestartAt = p, f.Port, PhaseRunning, "", time.Time{}
	if st.StartedAt.IsZero() {
		st.StartedAt = time.Now().UTC()
	}
	if hp := s.m.spawnedHerdr(w.name, st); hp != nil && !alive(st.Herdr) {
		st.Herdr, st.HerdrOwned = hp, true
	}
	if err := writeState(path, st); err != nil {
		w.log.Error("supervisor: write state", "err", err)
		return false
	}
	w.log.Warn("supervisor: adopted an unrecorded fleetd (a start was interrupted before it recorded it)", "pid", p.PID, "herdr_pid", pidOf(st.Herdr))
	return true
}

// update applies fn to the fleet's state under its lock, if fleetd is
// still p and the fleet is still wanted running.
func (s *Supervisor) update(ctx context.Context, w *fleetWatch, p *Proc, fn func(*State)) {
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return
	}
	defer unlock()
	st, err := readState(s.m.statePath(w.name), w.name)
	if err != nil || st.Desired != DesiredRunning || st.Fleetd == nil || !sameProc(st.Fleetd, p) {
		return
	}
	fn(st)
	if err := writeState(s.m.statePath(w.name), st); err != nil {
		w.log.Error("supervisor: write state", "err", err)
	}
}

// restart handles one failure of fleetd p (nil: none recorded): under the
// fleet's lock it re-checks that the fleet is still wanted and p is still
// the one that failed, and records at once the failure (reason, exit
// status, log tail) and what planRestart decided — a crash loop, or a
// restart counted with its due time — so that every reader, and a serve
// that replaces this one, sees it. Then it ends what is left of p's session
// (and, when herdrDown, the herdr server fleetmgr started, so the session
// can be started again), each only after killRecorded found it to be the
// process recorded, and waits for the due time (await).
func (s *Supervisor) restart(ctx context.Context, w *fleetWatch, p *Proc, reason, exit string, herdrDown bool) {
	w.unwatch()
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return
	}
	path := s.m.statePath(w.name)
	st, err := readState(path, w.name)
	if err != nil || st.Desired != DesiredRunning || st.CrashLoop || !sameProc(st.Fleetd, p) {
		unlock() // stopped meanwhile, or someone else already started it again
		return
	}
	now := time.Now()
	plan := planRestart(w.pol, st.RestartTimes, st.BackoffStep, now)
	if exit != "" {
		st.LastExit = exit
	}
	st.LogTail = s.m.tailLines(w.name, "fleetd", 20)
	st.RestartTimes = plan.window
	if plan.crashLoop {
		st.Phase, st.CrashLoop, st.NextRestartAt = PhaseFailed, true, time.Time{}
		st.LastError = fmt.Sprintf("crash loop: %d restarts within %s, then %s; not restarting until `fleetmgr start %s` or `fleetmgr restart %s`",
			len(st.RestartTimes), w.pol.CrashLoopWindow.Duration, reason, w.name, w.name)
	} else {
		st.BackoffStep++
		st.Restarts++
		st.RestartTimes = append(st.RestartTimes, now)
		st.LastRestartReason, st.LastRestartAt, st.NextRestartAt = reason, now, plan.due
		st.Phase = PhaseRestarting
	}
	if err := writeState(path, st); err != nil {
		w.log.Error("supervisor: write state", "err", err)
	}
	s.cleanUp(ctx, w, st, herdrDown)
	if err := writeState(path, st); err != nil {
		w.log.Error("supervisor: write state", "err", err)
	}
	unlock()
	if plan.crashLoop {
		w.log.Error("supervisor: fleet failed; no more restarts", "reason", reason, "restarts_in_window", len(st.RestartTimes), "window", w.pol.CrashLoopWindow.Duration)
		return
	}
	w.log.Warn("supervisor: restarting fleetd", "reason", reason, "delay", plan.delay, "restart", st.Restarts)
	s.await(ctx, w, plan.due)
}

// cleanUp ends what a failed fleetd left (a hung fleetd itself, or what a
// crashed one left in its session: forked children hold nothing we need)
// and, when herdrDown, the herdr server fleetmgr started; the records of
// what is gone are dropped from st. A record that does not name the
// fleet's process (killRecorded refuses it) is dropped unsignalled. The
// caller holds the fleet's lock and writes st.
func (s *Supervisor) cleanUp(ctx context.Context, w *fleetWatch, st *State, herdrDown bool) {
	grace := s.m.Config().Manager.StopGrace.Duration
	if st.Fleetd != nil {
		if o := s.m.killRecorded(ctx, st.Fleetd, fleetdRole(w.name), grace); len(o.Left) > 0 {
			w.log.Error("supervisor: processes survived SIGKILL", "pids", o.Left)
		}
		st.Fleetd = nil
	}
	if herdrDown && st.Herdr != nil && st.HerdrOwned {
		o := s.m.killRecorded(ctx, st.Herdr, s.m.herdrRole(w.name, st), grace)
		if len(o.Left) > 0 {
			w.log.Error("supervisor: herdr processes survived SIGKILL", "pids", o.Left)
		}
		if o.Stale != nil {
			st.Herdr, st.HerdrOwned = nil, false
		}
	}
	if st.Herdr != nil && !alive(st.Herdr) {
		st.Herdr = nil
	}
}

// await waits until due (giving up early when the fleet is stopped, or the
// restart is no longer pending: an operator's start or restart made it),
// then makes the pending restart under the fleet's lock: a fleetd record
// it still finds (a serve killed between recording the restart and
// cleaning up) is ended first, then the fleet is started again.
func (s *Supervisor) await(ctx context.Context, w *fleetWatch, due time.Time) {
	path := s.m.statePath(w.name)
	for time.Now().Before(due) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(s.tick, time.Until(due))):
		}
		if cur, err := readState(path, w.name); err != nil || !pendingRestart(cur) {
			return
		}
	}
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return
	}
	defer unlock()
	st, err := readState(path, w.name)
	if err != nil || !pendingRestart(st) {
		return
	}
	if st.Fleetd != nil || st.Herdr != nil {
		// The restart's reason says whether the herdr server was the one
		// that failed (see check): then it goes too, if cleanUp was missed.
		s.cleanUp(ctx, w, st, strings.HasPrefix(st.LastRestartReason, "herdr session"))
		if err := writeState(path, st); err != nil {
			w.log.Error("supervisor: write state", "err", err)
			return
		}
	}
	if p := s.m.readSpawned(w.name, "fleetd"); p != nil && alive(p) {
		// A fleetd the restart's start spawned before its serve was killed,
		// not healthy (else adoptSpawned had taken it): Start would refuse
		// to start a twin, so it goes (after the same checks as a record).
		o := s.m.killRecorded(ctx, p, fleetdRole(w.name), s.m.Config().Manager.StopGrace.Duration)
		w.log.Warn("supervisor: ended the unrecorded fleetd of an interrupted restart", "pid", p.PID, "detail", o.detail(p))
	}
	// Finish a start even if serve is told to stop meanwhile: a fleet is
	// never left half-started (Start bounds itself by start_timeout).
	st2, err := s.m.Start(context.WithoutCancel(ctx), w.name, Options{Lead: st.Lead, restart: true, locked: true})
	if err != nil {
		s.m.noteStartFailure(w.name, err) // so the next restart's reason (and a crash loop) names it
		w.log.Warn("supervisor: restart failed", "err", firstLine(err.Error()))
		return
	}
	w.log.Info("supervisor: fleet restarted", "pid", pidOf(st2.Fleetd), "port", st2.Port, "restarts", st2.Restarts)
}

// backoff is the delay before restart number step+1 of a run of failures:
// restart_backoff_initial doubled step times, capped at restart_backoff_max.
func backoff(pol registry.RestartPolicy, step int) time.Duration {
	d := pol.BackoffInitial.Duration
	for i := 0; i < step && d < pol.BackoffMax.Duration; i++ {
		d *= 2
	}
	return min(d, pol.BackoffMax.Duration)
}

// watchExit returns a channel closed when p exits, watched through a pidfd
// (which works for processes that are not our children). The channel is
// never closed when ctx ends first. Where pidfds are unavailable it returns
// nil and the supervisor's poll of pid + start time does the work.
func watchExit(ctx context.Context, p Proc) <-chan struct{} {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			ch := make(chan struct{})
			close(ch)
			return ch
		}
		return nil
	}
	ch := make(chan struct{})
	if !alive(&p) { // the pid was reused before we opened it: not ours
		unix.Close(fd)
		close(ch)
		return ch
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for ctx.Err() == nil {
			n, err := unix.Poll(fds, 250)
			if err != nil && !errors.Is(err, unix.EINTR) {
				return // fall back to the poll
			}
			if n > 0 {
				close(ch)
				return
			}
		}
	}()
	return ch
}

// sameProc reports whether a and b name the same process (pid and start
// time; nil names none).
func sameProc(a, b *Proc) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.PID == b.PID && a.StartTime == b.StartTime
}

func pidOf(p *Proc) int {
	if p == nil {
		return 0
	}
	return p.PID
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
