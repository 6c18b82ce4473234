package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Supervision is the part of a fleet's State that supervision keeps. It is
// embedded in State, so its fields appear at the top level of
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
	// StartRetries counts the supervisor's retries of a start that never
	// became healthy, in a row (decide.go, start_retries): set when a
	// retry is decided, cleared when fleetd becomes healthy (transition
	// to running) and by an operator's start or restart.
	StartRetries int `json:"start_retries,omitempty"`
	// StartRetriesExhausted is set when a start failed after
	// start_retries retries: the fleet is failed and the supervisor leaves
	// it alone until `fleetmgr start` or `fleetmgr restart` clears it.
	StartRetriesExhausted bool `json:"start_retries_exhausted,omitempty"`
	// LogTail holds the last lines of fleetd's log at its last unexpected
	// exit or health restart.
	LogTail []string `json:"log_tail,omitempty"`
	// MembersBefore are the member panes live when a restart was decided
	// (members.go), until its start is done and they are compared with
	// those live then.
	MembersBefore []PaneMember `json:"members_before_restart,omitempty"`
	// LastLost names the members the last restart ended (their tab
	// labels), sorted; empty when it ended none.
	LastLost []string `json:"last_restart_lost,omitempty"`
	// MembersLost counts every member a restart of this fleet ended
	// (fleetmgr_members_lost_total{fleet}).
	MembersLost int `json:"members_lost,omitempty"`
	// Lead records that the fleet was started with its lead (--lead or
	// lead = true), so a restart relaunches a lead that died with its
	// herdr session.
	Lead bool `json:"lead,omitempty"`
}

// Supervisor keeps every fleet of a Manager in its desired state:
// one goroutine per fleet watches fleetd and its herdr server (pidfds:
// an exit is seen at once), its state.json (inotify: a write by any
// fleetmgr process is seen at once) and GET /healthz, and restarts
// fleetd with exponential backoff after an unexpected exit, a dead herdr
// session (restarted first) or health_failures failed probes in a row.
// Too many restarts within crash_loop_window mark the fleet failed.
//
// It looks at a fleet when one of those events says something changed,
// when a health probe is due (health_interval), while a start, stop or
// restart holds the fleet's lock (every tick), and every backstop
// anyway; where a pidfd or inotify is unavailable it looks every tick,
// as a poll of pid + start time and of the state file.
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
	m   *Manager
	log *slog.Logger
	// tick is how often a fleet is looked at while its lock is held, and
	// always where a pidfd or inotify is missing.
	tick time.Duration
	// backstop is how often a fleet is looked at with nothing due: a
	// safety net for an event lost (the fleet directory removed and made
	// again, which drops its inotify watch).
	backstop time.Duration
	// health carries the /healthz probes: kept-alive connections, one per
	// fleetd (a new TCP connection per probe made fleetd resolve its peer
	// anew every health_interval).
	health *http.Client
	// heard, when set, says when anything last came from the herdr
	// server at a socket (an answer or an event serve's status tracker
	// had): a ping that answered (zero time: nothing). See HeardFrom.
	heard func(socket string) time.Time
}

// HeardFrom makes the supervisor count what heard says came from a herdr
// server (its last answer or event, by socket path; zero: none) as a
// ping that answered then: the next ping is due herdr_health_interval
// after the later of the two. serve passes its status tracker's. Call it
// before Run.
func (s *Supervisor) HeardFrom(heard func(socket string) time.Time) { s.heard = heard }

// NewSupervisor returns a Supervisor for m's fleets; Run starts it.
func NewSupervisor(m *Manager, log *slog.Logger) *Supervisor {
	return &Supervisor{m: m, log: log, tick: 250 * time.Millisecond, backstop: 5 * time.Second,
		health: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 5 * time.Minute}}}
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
	defer s.health.CloseIdleConnections()
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

// fleetWatch is one fleet goroutine's memory between looks.
type fleetWatch struct {
	name        string
	pol         registry.RestartPolicy
	log         *slog.Logger
	proc        Proc            // the fleetd being watched
	exited      <-chan struct{} // closed when proc exits (pidfd); nil when not watching, or without a pidfd
	cancel      context.CancelFunc
	healthFails int
	herdrFails  int
	nextHealth  time.Time
	// herdrOK is when the herdr server last answered a ping (zero: not
	// yet, for this fleetd): the next ping is due herdr_health_interval
	// after it, or after what the tracker heard later (herdrDue).
	herdrOK     time.Time
	herdrLooked bool // herdr.spawned.json was looked at for this fleetd
	seen        bool // a state has been looked at (the first look is adoption)
	busy        bool // the last look found the fleet's lock held

	// record is the state.json read at readAt, which a look reuses while
	// fresh: nothing since says the file changed (no inotify event, no
	// exit, no reload, no act of this goroutine, the lock not held) and it
	// is younger than the backstop. A health probe due every
	// health_interval then costs no read and decode of the file.
	record *State
	readAt time.Time
	fresh  bool

	// changed gets a signal when the fleet's state.json is renamed into
	// place (inotify, fileWatch); nil without inotify: then the state is
	// polled every tick.
	changed <-chan struct{}
	// herdr is the recorded herdr server being watched; herdrExited is
	// closed when it exits (nil when none is watched, or without a pidfd).
	herdr       Proc
	herdrExited <-chan struct{}
	herdrCancel context.CancelFunc
}

func (w *fleetWatch) unwatch() {
	if w.cancel != nil {
		w.cancel()
	}
	w.proc, w.exited, w.cancel = Proc{}, nil, nil
	w.healthFails, w.herdrFails, w.nextHealth, w.herdrLooked, w.herdrOK = 0, 0, time.Time{}, false, time.Time{}
}

// unwatchHerdr stops watching the herdr server.
func (w *fleetWatch) unwatchHerdr() {
	if w.herdrCancel != nil {
		w.herdrCancel()
	}
	w.herdr, w.herdrExited, w.herdrCancel = Proc{}, nil, nil
}

// followHerdr watches the herdr server st records while the fleet is
// wanted running, so its death is seen at once by its pidfd, as fleetd's.
func (w *fleetWatch) followHerdr(ctx context.Context, st *State) {
	want := st.Desired == DesiredRunning && !st.CrashLoop && !st.StartRetriesExhausted && st.Herdr != nil
	if want && sameProc(&w.herdr, st.Herdr) {
		return
	}
	w.unwatchHerdr()
	if !want {
		return
	}
	hctx, cancel := context.WithCancel(ctx)
	w.herdr, w.herdrCancel = *st.Herdr, cancel
	w.herdrExited = watchExit(hctx, w.herdr)
}

// nextLook is how long the fleet's goroutine may wait for an event before
// it looks again: until the health probe is due, a tick while the lock
// was held or while a pidfd or inotify is missing, else the backstop.
func (s *Supervisor) nextLook(w *fleetWatch) time.Duration {
	d := s.backstop
	if w.busy || w.changed == nil || (w.proc.PID != 0 && w.exited == nil) || (w.herdr.PID != 0 && w.herdrExited == nil) {
		d = s.tick
	}
	if !w.nextHealth.IsZero() {
		d = min(d, time.Until(w.nextHealth))
	}
	return max(d, 0)
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
	// After holdSupervisorLock, which makes the fleet's directory.
	if sub, ok := s.m.files.subscribe(s.m.statePath(name)); ok {
		defer s.m.files.unsubscribe(sub)
		w.changed = sub.c
	}
	defer w.unwatch()
	defer w.unwatchHerdr()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		reloaded := s.m.ConfigChanged() // before the read: a reload in between is not missed
		// The fleet's entry in the config in force: its policy follows a
		// reload at once (the settings of its processes wait for its next
		// start).
		f, err := s.m.Config().Fleet(name)
		if err != nil {
			return // removed by a reload; Run cancels ctx too
		}
		if f.Host != "" && f.Host != registry.LocalHost {
			w.unwatch() // a fleet on another host is its own host's manager's to supervise
			w.unwatchHerdr()
			w.busy = false
		} else {
			w.pol = f.Restart
			s.check(ctx, w)
		}
		t.Reset(s.nextLook(w))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.changed: // nil without inotify
			w.fresh = false
		case <-reloaded:
			w.fresh = false
		case <-w.exited:
			w.exited, w.fresh = nil, false // the next look sees the exit; never spin on a closed channel
		case <-w.herdrExited:
			w.herdrExited, w.fresh = nil, false
		}
	}
}

func (s *Supervisor) check(ctx context.Context, w *fleetWatch) {
	if ctx.Err() != nil {
		return
	}
	st, err := s.state(w)
	w.busy = false
	if err != nil {
		w.log.Error("supervisor: read state", "err", err)
		return
	}
	w.followHerdr(ctx, st)
	o := &observation{now: time.Now(), policy: w.pol, record: st, first: !w.seen,
		fleetdAlive: watchedAlive(&w.proc, w.exited, st.Fleetd) || alive(st.Fleetd),
		herdrAlive:  watchedAlive(&w.herdr, w.herdrExited, st.Herdr) || alive(st.Herdr)}
	o.sync(w)
	w.seen = true
	// Each look learns one fact and each continuing act changes what it
	// asked about, so this ends; the bound only guards against a bug.
	for range 16 {
		a := decide(o)
		if a.kind == actLook {
			s.look(ctx, w, o, a.look)
			continue
		}
		if a.warn != "" {
			w.log.Warn(a.warn, a.warnArgs...)
		}
		if a.kind != actNone {
			w.fresh = false // the act may have written the file, or waited
		}
		if !s.act(ctx, w, o, a) {
			return
		}
	}
	w.log.Error("supervisor: no decision after 16 steps (a bug); looking again later")
}

// state returns the fleet's state: the record read last while it is
// fresh (see fleetWatch.record), else read from state.json now. Without
// inotify, and while the fleet's lock was held at the last look, it is
// always read.
func (s *Supervisor) state(w *fleetWatch) (*State, error) {
	if w.fresh && w.changed != nil && !w.busy && w.record != nil && time.Since(w.readAt) < s.backstop {
		return w.record, nil
	}
	w.fresh = false
	st, err := readState(s.m.statePath(w.name), w.name)
	if err != nil {
		return nil, err
	}
	w.record, w.readAt, w.fresh = st, time.Now(), true
	return st, nil
}

// watchedAlive reports whether p is the process watched (same pid and
// start time) through a pidfd whose exit channel is not closed: alive
// without a read of /proc. false says nothing (not watched, or exited):
// the caller asks alive.
func watchedAlive(watched *Proc, exited <-chan struct{}, p *Proc) bool {
	if exited == nil || p == nil || !sameProc(watched, p) {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// sync copies into o what the goroutine's memory says of the fleetd it
// watches.
func (o *observation) sync(w *fleetWatch) {
	o.watching, o.herdrLooked, o.healthDue = w.proc, w.herdrLooked, w.nextHealth
}

// look learns fact l about the fleet into o.
func (s *Supervisor) look(ctx context.Context, w *fleetWatch, o *observation, l look) {
	o.looked |= l
	st := o.record
	switch l {
	case lookBusy:
		o.busy = s.m.busy(w.name)
		w.busy = o.busy // look again at the next tick, not only at the next event
	case lookCandidate:
		o.candidate = s.candidate(ctx, w)
	case lookExit:
		o.exit.status, o.exit.known = s.m.exitOf(st.Fleetd.PID, 500*time.Millisecond) // known when fleetd was our child
	case lookIdentity:
		o.stale = s.m.judge(st.Fleetd, fleetdRole(w.name))
	case lookHealth:
		o.health = s.probe(ctx, w, st)
	}
}

// probe checks fleetd's /healthz and pings the herdr session, counting
// failures in a row in w; the next probe is due health_interval later
// (nextProbe).
func (s *Supervisor) probe(ctx context.Context, w *fleetWatch, st *State) healthSeen {
	w.nextHealth = nextProbe(time.Now(), w.pol.HealthInterval.Duration)
	timeout := min(w.pol.HealthInterval.Duration, 2*time.Second)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	h, _, perr := Probe(pctx, s.health, st.Port)
	cancel()
	if perr == nil && h.Name != w.name {
		perr = fmt.Errorf("port %d answers as fleet %q", st.Port, h.Name)
	}
	var r healthSeen
	// A hung server, or a session we did not start, shows by ping; made
	// only when due (herdrDue), so an idle fleet asks herdr for nothing
	// between pings.
	if st.HerdrSocket != "" && s.herdrDue(w, st.HerdrSocket, time.Now()) {
		hctx, cancel := context.WithTimeout(ctx, timeout)
		_, r.herdrErr = herdr.New(st.HerdrSocket).Ping(hctx)
		cancel()
		r.herdrSocket = st.HerdrSocket
		if r.herdrErr != nil {
			w.herdrFails++
		} else {
			w.herdrFails, w.herdrOK = 0, time.Now()
		}
	}
	r.err, r.herdrFailures = perr, w.herdrFails
	switch {
	case perr == nil:
		w.healthFails = 0
	case ctx.Err() != nil:
		r.canceled = true
	default:
		w.healthFails++
	}
	r.failures = w.healthFails
	return r
}

// herdrDue reports whether the herdr server at socket is to be pinged
// at a health probe made at now: always after a ping that failed (so
// health_failures failures in a row take health_failures probes, as
// before), else when herdr_health_interval has passed since it last
// answered a ping or was last heard from (Supervisor.HeardFrom). A hung
// server is therefore found within herdr_health_interval + ping timeout
// + (health_failures-1) health_interval of hanging
// (docs/ARCHITECTURE.md "Supervision").
func (s *Supervisor) herdrDue(w *fleetWatch, socket string, now time.Time) bool {
	if w.herdrFails > 0 || w.herdrOK.IsZero() {
		return true
	}
	last := w.herdrOK
	if s.heard != nil {
		if h := s.heard(socket); h.After(last) {
			last = h
		}
	}
	// Probes fall on multiples of health_interval (nextProbe): a ping due
	// up to half an interval after this probe is made now, not one whole
	// interval late.
	return now.Add(w.pol.HealthInterval.Duration/2).Sub(last) >= w.pol.HerdrPingEvery()
}

// nextProbe is when the health probe after one made at now is due: the
// first multiple of every (counted from the zero time.Time) between
// every/2 and 3·every/2 after now, so about every later, and at the same
// instants for every fleet with the same health_interval. The fleets'
// probes then wake serve together once per health_interval instead of
// each at its own moment (10 fleets: 5 wakeups a second, each also
// waking the Go runtime's monitor thread).
func nextProbe(now time.Time, every time.Duration) time.Time {
	if every <= 0 {
		return now
	}
	return now.Add(every + every/2).Truncate(every)
}

// act does what decide said; it reports whether to decide again (the act
// changed what the look knows).
func (s *Supervisor) act(ctx context.Context, w *fleetWatch, o *observation, a action) bool {
	st := o.record
	switch a.kind {
	case actUnwatch:
		w.unwatch()
	case actAdopt:
		if s.adopt(ctx, w, o.candidate) {
			return false
		}
		o.adoptRefused = true
		return true
	case actResume:
		w.unwatch()
		w.log.Warn("supervisor: resuming a pending restart (decided and counted earlier, not yet made)", "due", a.due.Format(time.RFC3339Nano), "reason", st.LastRestartReason, "restart", st.Restarts)
		s.await(ctx, w, a.due)
	case actRestart:
		s.restart(ctx, w, st.Fleetd, a.reason, a.exit, a.herdrDown, a.startRetry)
	case actFailStart:
		s.failStart(ctx, w, a.reason)
	case actGiveUp:
		s.giveUp(ctx, w, st.Fleetd, a.reason, a.exit)
	case actWatch:
		w.unwatch()
		w.proc = *st.Fleetd
		wctx, cancel := context.WithCancel(ctx)
		w.cancel = cancel
		w.exited = watchExit(wctx, w.proc)
		if !s.m.isChild(w.proc.PID) {
			w.log.Info("supervisor: adopted fleet", "pid", w.proc.PID, "port", st.Port, "herdr_pid", pidOf(st.Herdr))
		}
		o.sync(w)
		return true
	case actRecordHerdr:
		w.herdrLooked = true
		s.recordSpawnedHerdr(ctx, w, st)
		o.sync(w)
		return true
	case actMarkRunning:
		s.update(ctx, w, st.Fleetd, func(st *State) error {
			if st.Phase != PhaseRunning {
				if err := st.transition(PhaseRunning, "supervisor: fleetd healthy", time.Now()); err != nil {
					return err
				}
			}
			st.NextRestartAt = time.Time{}
			if a.resetBackoff {
				st.BackoffStep = 0
				w.log.Info("supervisor: fleetd stable; restart backoff reset", "up", time.Since(st.StartedAt).Truncate(time.Second))
			}
			return nil
		})
	}
	return false
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
	s.update(ctx, w, st.Fleetd, func(st *State) error {
		if hp := s.m.spawnedHerdr(w.name, st); hp != nil && !alive(st.Herdr) {
			st.Herdr, st.HerdrOwned = hp, true
			w.log.Warn("supervisor: recorded the herdr server an interrupted start spawned", "herdr_pid", hp.PID)
		}
		return nil
	})
}

// A start killed after it spawned fleetd but before it recorded it (SIGKILL
// of the CLI or serve mid-start) leaves a live fleetd that no record names:
// when the process spawn last recorded for the fleet is alive, is this
// fleet's fleetd and /healthz names the fleet, it becomes the fleet's fleetd
// (and likewise its herdr server) instead of a second fleetd being started
// against a taken port. A restart that start was making is thereby made.

// candidate returns the fleetd fleetd.spawned.json names when it is alive
// and its /healthz names the fleet, else nil.
func (s *Supervisor) candidate(ctx context.Context, w *fleetWatch) *candidate {
	p := s.m.readSpawned(w.name, "fleetd")
	if p == nil || !alive(p) {
		return nil
	}
	f, err := s.m.Config().Fleet(w.name)
	if err != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	h, _, perr := Probe(pctx, s.m.http, f.Port)
	cancel()
	if perr != nil || h.Name != w.name {
		return nil
	}
	return &candidate{proc: *p, port: f.Port}
}

// adopt records c as the fleet's fleetd, under the fleet's lock, when the
// fleet is still wanted running with no live fleetd recorded and c is
// judged the fleet's (identity.go). It reports whether it did.
func (s *Supervisor) adopt(ctx context.Context, w *fleetWatch, c *candidate) bool {
	p := &c.proc
	st, err := s.m.Mutate(ctx, w.name, supervisorChange, func(st *State) error {
		if st.Desired != DesiredRunning || alive(st.Fleetd) || !s.m.recorded(p, fleetdRole(w.name)) {
			return ErrUnchanged
		}
		settle(p)
		if err := st.transition(PhaseRunning, fmt.Sprintf("supervisor: adopted fleetd pid %d, spawned by an interrupted start", p.PID), time.Now()); err != nil {
			return err
		}
		st.Fleetd, st.Port, st.LastError, st.NextRestartAt = p, c.port, "", time.Time{}
		if st.StartedAt.IsZero() {
			st.StartedAt = time.Now().UTC()
		}
		if hp := s.m.spawnedHerdr(w.name, st); hp != nil && !alive(st.Herdr) {
			st.Herdr, st.HerdrOwned = hp, true
		}
		return nil
	})
	if err != nil {
		var te *TransitionError
		if errors.As(err, &te) {
			w.log.Error("supervisor: adopt", "err", err)
		} else if !isLockErr(ctx, err) {
			w.log.Error("supervisor: write state", "err", err)
		}
		return false
	}
	if !sameProc(st.Fleetd, p) {
		return false // ErrUnchanged: not wanted running any more, or not the fleet's
	}
	w.log.Warn("supervisor: adopted an unrecorded fleetd (a start was interrupted before it recorded it)", "pid", p.PID, "herdr_pid", pidOf(st.Herdr))
	return true
}

// update applies fn to the fleet's state under its lock, if fleetd is
// still p and the fleet is still wanted running, and writes it unless fn
// returns an error (which is logged).
func (s *Supervisor) update(ctx context.Context, w *fleetWatch, p *Proc, fn func(*State) error) {
	if _, err := s.m.Mutate(ctx, w.name, supervisorChange, func(st *State) error {
		if st.Desired != DesiredRunning || st.Fleetd == nil || !sameProc(st.Fleetd, p) {
			return ErrUnchanged
		}
		return fn(st)
	}); err != nil && !isLockErr(ctx, err) {
		w.log.Error("supervisor: state not updated", "err", err)
	}
}

// supervisorChange is the Change of every record write the supervisor
// makes.
var supervisorChange = Change{Origin: "supervisor"}

// isLockErr reports whether err is the fleet lock's, given up because ctx
// ended (serve stopping): not worth a log line.
func isLockErr(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// restart handles one failure of fleetd p (nil: none recorded): under the
// fleet's lock it re-checks that the fleet is still wanted and p is still
// the one that failed, and records at once the failure (reason, exit
// status, log tail) and what planRestart decided — a crash loop, or a
// restart counted with its due time — so that every reader, and a serve
// that replaces this one, sees it. Then it ends what is left of p's session
// (and, when herdrDown, the herdr server fleetmgr started, so the session
// can be started again), each only after killRecorded found it to be the
// process recorded, and waits for the due time (await). startRetry: the
// failure is a start that never became healthy, and the restart is
// counted in StartRetries (start_retries) as well.
func (s *Supervisor) restart(ctx context.Context, w *fleetWatch, p *Proc, reason, exit string, herdrDown, startRetry bool) {
	w.unwatch()
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return
	}
	var plan restartPlan
	recorded := false
	st, err := s.m.mutate(w.name, supervisorChange, func(st *State) error {
		if st.Desired != DesiredRunning || st.CrashLoop || st.StartRetriesExhausted || !sameProc(st.Fleetd, p) {
			return ErrUnchanged // stopped meanwhile, or someone else already started it again
		}
		now := time.Now()
		plan = planRestart(w.pol, st.RestartTimes, st.BackoffStep, now)
		if exit != "" {
			st.LastExit = exit
		}
		st.LogTail = s.m.tailLines(w.name, "fleetd", 20)
		st.RestartTimes = plan.window
		if f, err := s.m.Config().Fleet(w.name); err == nil && !herdrDown {
			s.m.noteMembersBefore(ctx, st, f) // the members the restart's start will end (a hung herdr is not asked)
		}
		to, why := PhaseRestarting, "supervisor: "+firstLine(reason)
		if startRetry {
			why = "supervisor: " + reasonStartRetry(st.StartRetries+1, w.pol.StartRetries, reason)
		}
		if plan.crashLoop {
			to, why = PhaseFailed, "supervisor: crash loop; last failure: "+firstLine(reason)
		}
		if err := st.transition(to, why, now); err != nil {
			return err
		}
		if plan.crashLoop {
			st.CrashLoop, st.NextRestartAt = true, time.Time{}
			st.LastError = crashLoopError(w.name, len(st.RestartTimes), w.pol.CrashLoopWindow.Duration, reason)
		} else {
			st.BackoffStep++
			st.Restarts++
			st.RestartTimes = append(st.RestartTimes, now)
			st.LastRestartReason, st.LastRestartAt, st.NextRestartAt = reason, now, plan.due
			if startRetry {
				st.StartRetries++
			}
		}
		recorded = true
		return nil
	})
	if !recorded {
		unlock()
		var te *TransitionError
		if errors.As(err, &te) {
			w.log.Error("supervisor: failure not recorded", "err", err)
		}
		return // unread, or stopped meanwhile, or someone else already started it again
	}
	if err != nil {
		w.log.Error("supervisor: write state", "err", err) // st is the record as changed: cleaned up all the same
	}
	if cur, err := s.m.mutate(w.name, supervisorChange, func(st *State) error {
		s.cleanUp(ctx, w, st, herdrDown)
		return nil
	}); err != nil {
		w.log.Error("supervisor: write state", "err", err)
	} else {
		st = cur
	}
	unlock()
	if plan.crashLoop {
		w.log.Error("supervisor: fleet failed; no more restarts", "reason", reason, "restarts_in_window", len(st.RestartTimes), "window", w.pol.CrashLoopWindow.Duration)
		return
	}
	w.log.Warn("supervisor: restarting fleetd", "reason", reason, "delay", plan.delay, "restart", st.Restarts)
	s.await(ctx, w, plan.due)
}

// failStart records that the fleet's last start never became healthy
// (reason) after start_retries retries: under the fleet's lock, if it is
// still wanted running, failed with no live fleetd and not yet given up,
// it stays failed with StartRetriesExhausted and a last_error that says
// so and how to try again, and no restart is pending. Nothing runs to
// end (the failed start rolled back what it started).
func (s *Supervisor) failStart(ctx context.Context, w *fleetWatch, reason string) {
	w.unwatch()
	done := false
	st, err := s.m.Mutate(ctx, w.name, supervisorChange, func(st *State) error {
		if st.Desired != DesiredRunning || st.CrashLoop || st.StartRetriesExhausted || st.Phase != PhaseFailed || alive(st.Fleetd) {
			return ErrUnchanged // started, stopped or given up meanwhile
		}
		if err := st.transition(PhaseFailed, "supervisor: "+reasonStartRetriesExhausted(st.StartRetries, reason), time.Now()); err != nil {
			return err
		}
		st.StartRetriesExhausted, st.NextRestartAt = true, time.Time{}
		st.LastError = startRetriesError(w.name, st.StartRetries, st.LastError)
		done = true
		return nil
	})
	if err != nil {
		if !isLockErr(ctx, err) {
			w.log.Error("supervisor: failed start not recorded", "err", err)
		}
		return
	}
	if done {
		w.log.Error("supervisor: fleet failed; its start did not become healthy and start_retries are exhausted, no more retries", "retries", st.StartRetries, "reason", reason)
	}
}

// giveUp records that fleetd p exited and the fleet's restart policy
// (w.pol.Mode) does not restart it, as a stop the supervisor makes: under
// the fleet's lock, if the fleet is still wanted running with p recorded,
// it is recorded stopping (desired stopped, so nothing brings it back,
// with the exit status and log tail), what is left of p's session is
// ended (cleanUp), and it is recorded stopped. The herdr session is left
// as it is (a start uses it again).
func (s *Supervisor) giveUp(ctx context.Context, w *fleetWatch, p *Proc, reason, exit string) {
	w.unwatch()
	unlock, err := s.m.lock(ctx, w.name)
	if err != nil {
		return
	}
	defer unlock()
	why := fmt.Sprintf("supervisor: %s; restart = %s, so not restarted", firstLine(reason), w.pol.Mode)
	begun := false
	if _, err := s.m.mutate(w.name, supervisorChange, func(st *State) error {
		if st.Desired != DesiredRunning || !sameProc(st.Fleetd, p) {
			return ErrUnchanged
		}
		if err := st.transition(PhaseStopping, why, time.Now()); err != nil {
			return err
		}
		if exit != "" {
			st.LastExit = exit
		}
		st.Desired, st.NextRestartAt = DesiredStopped, time.Time{}
		st.LogTail = s.m.tailLines(w.name, "fleetd", 20)
		begun = true
		return nil
	}); err != nil || !begun {
		if err != nil {
			w.log.Error("supervisor: exit not recorded", "err", err)
		}
		return
	}
	if _, err := s.m.mutate(w.name, supervisorChange, func(st *State) error {
		s.cleanUp(ctx, w, st, false)
		return st.transition(PhaseStopped, why, time.Now())
	}); err != nil {
		w.log.Error("supervisor: write state", "err", err)
		return
	}
	w.log.Warn("supervisor: fleetd exited; not restarted (restart policy)", "restart", w.pol.Mode, "reason", reason)
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
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		d := time.Until(due)
		if d <= 0 {
			break
		}
		if w.changed == nil {
			d = min(d, s.tick) // no inotify: poll the state
		} else {
			d = min(d, s.backstop)
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.changed: // an operator's stop, start or restart meanwhile
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
	st, err := s.m.mutate(w.name, supervisorChange, func(st *State) error {
		if !pendingRestart(st) || (st.Fleetd == nil && st.Herdr == nil) {
			return ErrUnchanged
		}
		// The restart's reason says whether the herdr server was the one
		// that failed (see decide): then it goes too, if cleanUp was missed.
		s.cleanUp(ctx, w, st, strings.HasPrefix(st.LastRestartReason, "herdr session"))
		return nil
	})
	if err != nil {
		w.log.Error("supervisor: write state", "err", err)
		return
	}
	if !pendingRestart(st) {
		return
	}
	if p := s.m.readSpawned(w.name, "fleetd"); p != nil && alive(p) {
		// A fleetd the restart's start spawned before its serve was killed,
		// not healthy (else adoptSpawned had taken it): Start would refuse
		// to start a twin, so it goes (after the same checks as a record).
		// The log says what was done: a record refused (not this fleet's
		// process) was not signalled, and is never called ended.
		o := s.m.killRecorded(ctx, p, fleetdRole(w.name), s.m.Config().Manager.StopGrace.Duration)
		if o.Stale != nil {
			w.log.Warn("supervisor: fleetd.spawned.json names a process that is not this fleet's fleetd; not signalled", "pid", p.PID, "detail", o.detail(p))
		} else if o.Running || len(o.Signalled) > 0 {
			w.log.Warn("supervisor: ended the unrecorded fleetd of an interrupted restart", "pid", p.PID, "detail", o.detail(p))
		}
	}
	// Finish a start even if serve is told to stop meanwhile: a fleet is
	// never left half-started (Start bounds itself by start_timeout).
	st2, err := s.m.Start(context.WithoutCancel(ctx), w.name, Options{Lead: st.Lead, restart: true, locked: true})
	if err != nil {
		s.m.noteStartFailure(w.name, supervisorChange, err) // so the next restart's reason (and a crash loop) names it
		w.log.Warn("supervisor: restart failed", "err", firstLine(err.Error()))
		return
	}
	w.log.Info("supervisor: fleet restarted", "pid", pidOf(st2.Fleetd), "port", st2.Port, "restarts", st2.Restarts)
}

// watchExit returns a channel closed when p exits, watched through a pidfd
// (which works for processes that are not our children) that the Go
// runtime's poller waits on (epoll reports a pidfd readable once its
// process exited), so a watch costs no thread and no wakeup until then.
// The channel is never closed when ctx ends first. Where pidfds (Linux
// 5.3) are unavailable, or the poller cannot take one, it returns nil and
// the supervisor's poll of pid + start time does the work.
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
	// Non-blocking, so os.NewFile hands it to the poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // no deadline: not in the poller
		f.Close()
		return nil
	}
	go func() {
		defer f.Close()
		stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
		// Read calls the function, waits for the poller to report the fd
		// readable whenever it returns false, and calls it again; it ends
		// with an error when ctx set the deadline.
		_ = rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			return err == nil && n > 0
		})
		if ctx.Err() == nil {
			// Exited; or the wait failed, and the look this close causes
			// finds fleetd alive and polls it from then on (the channel,
			// once received from, is no longer watched).
			close(ch)
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
