package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Start brings fleet name up: herdr session, rendered config, fleetd, then
// waits for /healthz to answer with the fleet's name. A fleet that is already
// healthy is left as it is, unless its herdr session is gone (then fleetd
// is stopped and both start again); the healthy fleetd an interrupted
// start spawned is adopted (adoptSpawned). The start itself is a list of
// steps, each with its undo (startSteps); on any failure the undos of the
// steps done run in reverse order, so nothing half-started is left
// running, and the record says failed with the error.
func (m *Manager) Start(ctx context.Context, name string, opt Options) (*State, error) {
	cfg := m.Config() // one config for the whole start: a reload meanwhile applies at the next one
	f, err := m.startable(cfg, name)
	if err != nil {
		return nil, err
	}
	if err := m.checkProject(f); err != nil {
		return nil, err
	}
	if !opt.locked {
		unlock, err := m.lock(ctx, name)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	s := &start{m: m, cfg: cfg, f: f, opt: opt, by: opt.change(verbStart),
		step: m.stepper(opt, "start", name), grace: cfg.Manager.StopGrace.Duration}
	return s.run(ctx)
}

// The operator's verbs, as a Change's default origin.
const (
	verbStart   = "start"
	verbStop    = "stop"
	verbRestart = "restart"
)

// start is one Start of one fleet, under its lock: what its steps share.
type start struct {
	m     *Manager
	cfg   *registry.Config
	f     *registry.Fleet
	opt   Options
	by    Change
	step  func(name, detail string)
	grace time.Duration

	st          *State // the record as last read or written
	prevDesired Desired
	oldSock     string // the herdr socket the record named before this start
	data        registry.TemplateData
	hc          *herdr.Client
	fleetd      *Proc     // the fleetd this start spawned, recorded by the last step
	healthyAt   time.Time // when it answered /healthz
	lead        *leadWait // the lead launched by this start, its agent not yet awaited
}

// startStep is one step of a start: run does it and returns the detail
// shown as progress ("" shows nothing) and, when it started something,
// the undo that ends it again, also when it fails half-way.
type startStep struct {
	name string
	run  func(ctx context.Context) (detail string, undo func(), err error)
}

// write changes the record through mutate (the caller holds the lock),
// with what an operator's start changes (begin) in every write, and keeps
// the record written.
func (s *start) write(fn func(*State) error) error {
	st, err := s.m.mutate(s.f.Name, s.by, func(st *State) error {
		s.begin(st)
		return fn(st)
	})
	if err != nil {
		return err
	}
	s.st = st
	return nil
}

// begin is what an operator's start (not a supervisor's restart) changes
// with whatever it writes: it clears a crash loop, the backoff and the
// count of failed starts (start_retries counts afresh), and
// records whether a lead was asked for. A start refused before it writes
// anything (the port taken, an unrecorded fleetd) thereby leaves a crash
// loop as it was.
func (s *start) begin(st *State) {
	if s.opt.restart {
		return
	}
	st.CrashLoop, st.RestartTimes, st.BackoffStep, st.NextRestartAt = false, nil, 0, time.Time{}
	st.StartRetries, st.StartRetriesExhausted = 0, false
	st.Lead = s.opt.Lead || s.f.Lead
}

func (s *start) run(ctx context.Context) (*State, error) {
	name := s.f.Name
	st, err := readState(s.m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	s.st = st
	if s.opt.restart {
		s.opt.Lead = s.opt.Lead || st.Lead // a supervisor's restart relaunches a lead the fleet had
	}
	if st, done, err := s.already(ctx); done {
		return st, err
	}
	// The fleetd a start killed mid-way spawned (and never recorded) is
	// this fleet's when its identity checks out: it is adopted, as the
	// supervisor would, rather than refused as a stranger.
	if adopted, err := s.adoptSpawned(ctx); adopted || err != nil {
		if err != nil {
			return nil, err
		}
		s.step("adopted", fmt.Sprintf("fleetd pid %d on port %d, spawned by an interrupted start", s.st.Fleetd.PID, s.st.Port))
		return s.st, nil
	}
	// A fleetd of this fleet that fleetmgr has no record of (state dir
	// lost, corrupt, or a start killed mid-way) must not get a twin.
	if pids := s.m.unrecorded(ctx, s.f, s.st); len(pids) > 0 {
		pid, hint := leader(pids), ""
		if sp := s.m.readSpawned(name, "fleetd"); sp != nil && sp.PID == pid {
			hint = " (an interrupted start spawned it; it was not adopted: it does not answer /healthz as fleet " + name + " or its herdr session does not answer)"
		}
		return nil, fmt.Errorf("fleet %s already runs as pid %d, not in fleetmgr's records: stop it with `fleetmgr stop %s`%s", name, pid, name, hint)
	}
	s.data = s.m.templateData(s.f)
	if err := s.m.checkPort(ctx, s.f); err != nil {
		return nil, err
	}
	for _, d := range []string{s.m.FleetDir(name), s.f.WorktreeRoot, filepath.Dir(s.f.ConfigFile)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("fleet %s: %w", name, err)
		}
	}
	s.oldSock, s.prevDesired = s.st.HerdrSocket, s.st.Desired
	// A supervisor's restart reads "restarting" until it is done (and a
	// serve killed meanwhile leaves it pending for the next serve).
	phase, reason := PhaseStarting, "start begun"
	if s.opt.restart {
		phase, reason = PhaseRestarting, reasonRestartStartBegun
	}
	if err := s.write(func(st *State) error {
		if err := st.transition(phase, reason, time.Now()); err != nil {
			return err
		}
		st.Desired, st.Port, st.HerdrSocket, st.LastError = DesiredRunning, s.f.Port, s.data.HerdrSocket, ""
		st.Launch = launchOf(s.cfg, s.f) // before anything runs: a fleet removed from the file meanwhile stays stoppable
		return nil
	}); err != nil {
		return nil, err
	}
	s.hc = herdr.New(s.data.HerdrSocket)

	var undo []func()
	for _, step := range s.steps() {
		detail, u, err := step.run(ctx)
		if u != nil {
			undo = append(undo, u)
		}
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			return s.failed(ctx, err)
		}
		if detail != "" {
			s.step(step.name, detail)
		}
	}
	return s.st, nil
}

// steps are a start's steps in order, after its first write.
func (s *start) steps() []startStep {
	return []startStep{
		// The broker vhost, user and permissions (vhost.go): first, so a
		// broker that does not answer fails the start before anything runs.
		{"vhost", func(ctx context.Context) (string, func(), error) {
			d, err := s.m.ensureVhost(ctx, s.f)
			return d, nil, err
		}},
		{"herdr session", s.herdrSession},
		{"config", func(context.Context) (string, func(), error) {
			if err := s.m.renderConfig(s.f, s.data); err != nil {
				return "", nil, err
			}
			return s.f.ConfigFile, nil, nil
		}},
		// The member panes live before fleetd starts: a new fleetd ends
		// them (members.go), which the last step records.
		{"members", func(ctx context.Context) (string, func(), error) {
			return "", nil, s.write(func(st *State) error {
				s.m.noteMembersBefore(ctx, st, s.f)
				return nil
			})
		}},
		{"fleetd", s.startFleetd},
		// The lead, only when opted in: launched before the fleet is
		// recorded running, its agent awaited after (lead_ready_timeout
		// may outlast start_timeout, which judges a start overdue).
		{"lead", func(ctx context.Context) (string, func(), error) {
			if !s.opt.Lead && !s.f.Lead {
				return "", nil, nil
			}
			d, w, err := s.m.startLead(ctx, s.f, s.data)
			if w == nil {
				return d, nil, err
			}
			s.lead = w
			return d, w.close, err
		}},
		{"record", s.recordRunning},
		{"lead ready", func(ctx context.Context) (string, func(), error) {
			if s.lead == nil {
				return "", nil, nil
			}
			return s.lead.wait(ctx), nil, nil
		}},
	}
}

// killer is the undo of a step that started p: its session ends, even
// when the start's caller gave up.
func (s *start) killer(ctx context.Context, p *Proc) func() {
	return func() { killSession(context.WithoutCancel(ctx), p, s.grace) }
}

// herdrSession makes sure the fleet's herdr session answers: the one an
// earlier start used goes first when the fleet's herdr_session changed
// since (config.go), one already answering is kept, else a server is
// started. What it finds or starts is recorded at once, so a start killed
// from here on leaves the server in state.json.
func (s *start) herdrSession(ctx context.Context) (string, func(), error) {
	name := s.f.Name
	cur := s.st.clone()
	s.m.retireOldHerdr(ctx, cur, s.oldSock, s.grace, s.step)
	record := func() error {
		return s.write(func(st *State) error {
			st.Herdr, st.HerdrOwned = cur.Herdr, cur.HerdrOwned
			return nil
		})
	}
	if _, perr := s.hc.Ping(ctx); perr == nil {
		if !alive(cur.Herdr) {
			// The server an interrupted start spawned (and never recorded)
			// is ours: recorded, its death is seen by pid at once.
			cur.Herdr = s.m.spawnedHerdr(name, cur)
			cur.HerdrOwned = cur.Herdr != nil
		}
		if err := record(); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("session %s already running at %s", s.f.HerdrSession, s.data.HerdrSocket), nil, nil
	}
	p, err := s.m.startHerdr(ctx, s.f, s.data)
	var undo func()
	if p != nil {
		// Also on error: a server that never answered is still ours to
		// roll back.
		undo = s.killer(ctx, p)
		cur.Herdr, cur.HerdrOwned = p, true
	}
	if err != nil {
		_ = record() // the failure's record names what was started (and is rolled back)
		return "", undo, err
	}
	settle(p)
	if err := record(); err != nil {
		return "", undo, err
	}
	return fmt.Sprintf("session %s ready (pid %d, socket %s)", s.f.HerdrSession, p.PID, s.data.HerdrSocket), undo, nil
}

// startFleetd spawns fleetd and waits for its /healthz; the herdr session
// must still answer then. The fleetd is recorded by the last step (or the
// failure's record).
func (s *start) startFleetd(ctx context.Context) (string, func(), error) {
	p, err := s.m.startFleetd(ctx, s.f, s.data)
	var undo func()
	if p != nil {
		s.fleetd, undo = p, s.killer(ctx, p)
	}
	if err != nil {
		return "", undo, err
	}
	// herdr may have died while fleetd came up: a cheap ping before the
	// fleet is reported running.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, perr := s.hc.Ping(pctx)
	cancel()
	if perr != nil {
		return "", undo, fmt.Errorf("fleet %s: herdr session %s stopped answering on %s while fleetd started (%v); last herdr log lines:\n%s", s.f.Name, s.f.HerdrSession, s.data.HerdrSocket, perr, s.m.tail(s.f.Name, "herdr", 10))
	}
	settle(p)
	s.healthyAt = time.Now()
	return fmt.Sprintf("healthy on 127.0.0.1:%d (pid %d)", s.f.Port, p.PID), undo, nil
}

// recordRunning records the fleet running with the fleetd started, and
// the members that were live before it started and are gone now (the new
// fleetd reaped them): the members this start ended.
func (s *start) recordRunning(ctx context.Context) (string, func(), error) {
	p, now := s.fleetd, s.healthyAt
	lost := lostSince(ctx, s.st.MembersBefore, s.data.HerdrSocket, leadTabOf(s.f))
	err := s.write(func(st *State) error {
		if err := st.transition(PhaseRunning, fmt.Sprintf("start: fleetd pid %d healthy on port %d", p.PID, s.f.Port), now); err != nil {
			return err
		}
		st.Fleetd = p
		st.StartedAt, st.NextRestartAt = now.UTC(), time.Time{}
		st.MembersBefore, st.LastLost = nil, lost
		st.MembersLost += len(lost)
		return nil
	})
	if err == nil && len(lost) > 0 {
		// fleetd reaped them, not fleetmgr: the log says lost, not ended.
		s.m.log.Warn("members lost: the new fleetd reaped the panes the previous one left", "fleet", s.f.Name, "count", len(lost), "members", strings.Join(lost, ","))
	}
	return "", nil, err
}

// failed records a start that failed with err after its first write (its
// steps' undos have run): phase failed with the error. A start its caller
// gave up (Ctrl-C on `fleetmgr start`, a serve shutting down) is undone
// with what was asked, so a supervisor does not bring up a fleet whose
// start the operator interrupted; a fleet meant to run before (a
// restart's start) stays meant to run.
func (s *start) failed(ctx context.Context, err error) (*State, error) {
	reason, lastErr := reasonStartFailed(s.f.Name, err.Error()), err.Error()
	interrupted := ctx.Err() != nil && errors.Is(err, context.Canceled)
	if interrupted {
		reason, lastErr = "start interrupted by its caller", "start interrupted by its caller before fleetd was healthy"
	}
	if werr := s.write(func(st *State) error {
		if interrupted {
			st.Desired = s.prevDesired
		}
		if terr := st.transition(PhaseFailed, reason, time.Now()); terr != nil {
			s.m.log.Error("start", "fleet", s.f.Name, "err", terr)
		}
		st.LastError, st.NextRestartAt = lastErr, time.Time{}
		if s.fleetd != nil {
			st.Fleetd = s.fleetd
		}
		if !alive(st.Fleetd) {
			st.Fleetd = nil
		}
		return nil
	}); werr != nil {
		s.m.log.Error("write state", "fleet", s.f.Name, "err", werr)
	}
	return s.st, err
}

// already handles a fleet whose recorded fleetd is alive and answers
// /healthz with the fleet's name: when its herdr session is gone (nothing
// supervised it) fleetd goes and the start goes on (as restart does: the
// start below brings up both); else the fleet is recorded running, its
// lead launched when asked for now, and done reports true.
func (s *start) already(ctx context.Context) (st *State, done bool, err error) {
	name := s.f.Name
	healthy := func() bool {
		if !alive(s.st.Fleetd) {
			return false
		}
		h, _, perr := Probe(ctx, s.m.http, s.st.Port)
		return perr == nil && h.Name == name
	}
	if healthy() {
		if herr := herdrGone(ctx, s.st.HerdrSocket); herr != nil {
			o := s.m.killRecorded(ctx, s.st.Fleetd, fleetdRole(name), s.grace)
			if len(o.Left) > 0 {
				return nil, true, fmt.Errorf("fleet %s: its herdr session does not answer, and fleetd's processes %v survived SIGKILL", name, o.Left)
			}
			s.step("fleetd", fmt.Sprintf("%s: its herdr session %s does not answer on %s (%v); starting both again", o.detail(s.st.Fleetd), s.f.HerdrSession, s.st.HerdrSocket, herr))
			if err := s.write(func(st *State) error { st.Fleetd = nil; return nil }); err != nil {
				return nil, true, err
			}
		}
	}
	if !healthy() {
		return nil, false, nil
	}
	pid := s.st.Fleetd.PID
	if err := s.write(func(st *State) error {
		st.Desired = DesiredRunning
		return st.transition(PhaseRunning, fmt.Sprintf("start: fleetd pid %d already running and healthy", pid), time.Now())
	}); err != nil {
		return nil, true, err
	}
	s.step("already running", fmt.Sprintf("fleetd pid %d on port %d", pid, s.st.Port))
	if s.opt.Lead && !s.opt.restart {
		// Asked for now (--lead): launched unless its tab exists. A
		// failure leaves the running fleet as it is.
		detail, err := s.m.launchLead(ctx, s.f, registry.TemplateData{HerdrSocket: s.st.HerdrSocket})
		if err != nil {
			return s.st, true, err
		}
		s.step("lead", detail)
	}
	return s.st, true, nil
}

// adoptSpawned makes the fleetd an interrupted start spawned (named by
// fleetd.spawned.json, written before the start awaited it) the fleet's
// fleetd, when the record names no live one and its phase may become
// running, the process is judged this fleet's fleetd as before a signal
// (identity.go), /healthz on the port that start gave it names the fleet
// (awaited up to start_timeout while the process lives: it may still be
// coming up) and the fleet's herdr session answers. It then records the
// fleet running and reports true. Short of all that it changes nothing
// and reports false (the caller refuses an unrecorded fleetd, which
// `fleetmgr stop` ends); its error is ctx's or the state file's.
func (s *start) adoptSpawned(ctx context.Context) (bool, error) {
	st, f, m := s.st, s.f, s.m
	if alive(st.Fleetd) || st.HerdrSocket == "" || !allowedTransition(st.Phase, PhaseRunning) {
		return false, nil
	}
	p := m.readSpawned(f.Name, "fleetd")
	if p == nil || !m.recorded(p, fleetdRole(f.Name)) {
		return false, nil
	}
	port := st.Port
	if port == 0 {
		port = f.Port
	}
	deadline := time.Now().Add(m.Config().Manager.StartTimeout.Duration)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		h, _, perr := Probe(pctx, m.http, port)
		cancel()
		if perr == nil && h.Name != f.Name {
			return false, nil
		}
		if perr == nil {
			break
		}
		if !alive(p) || time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, perr := herdr.New(st.HerdrSocket).Ping(pctx)
	cancel()
	if perr != nil {
		return false, nil
	}
	settle(p)
	now := time.Now()
	if err := s.write(func(st *State) error {
		if err := st.transition(PhaseRunning, fmt.Sprintf("start: adopted fleetd pid %d, spawned by an interrupted start", p.PID), now); err != nil {
			return err
		}
		st.Desired, st.Fleetd, st.Port, st.LastError, st.NextRestartAt = DesiredRunning, p, port, "", time.Time{}
		st.StartedAt = now.UTC()
		if !alive(st.Herdr) {
			st.Herdr = m.spawnedHerdr(f.Name, st)
			st.HerdrOwned = st.Herdr != nil
		}
		return nil
	}); err != nil {
		return false, err
	}
	return true, nil
}
