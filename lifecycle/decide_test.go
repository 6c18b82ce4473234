package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// seen is what the looks of one decide_test row find: the facts decide
// may ask for.
type seen struct {
	busy      bool
	candidate *candidate
	exit      exitSeen
	stale     *staleRecord
	health    healthSeen
}

// decideWithLooks runs decide as Supervisor.check does up to the first
// action that is not a look, answering each look from s. It returns that
// action and the looks made, in order.
func decideWithLooks(t *testing.T, o *observation, s seen) (action, []look) {
	t.Helper()
	var looks []look
	for range 8 {
		a := decide(o)
		if a.kind != actLook {
			return a, looks
		}
		if o.knows(a.look) {
			t.Fatalf("decide asked again for look %d it has", a.look)
		}
		looks = append(looks, a.look)
		o.looked |= a.look
		switch a.look {
		case lookBusy:
			o.busy = s.busy
		case lookCandidate:
			o.candidate = s.candidate
		case lookExit:
			o.exit = s.exit
		case lookIdentity:
			o.stale = s.stale
		case lookHealth:
			o.health = s.health
		default:
			t.Fatalf("unknown look %d", a.look)
		}
	}
	t.Fatal("decide keeps asking")
	return action{}, nil
}

// TestDecide is the supervisor's decision table: every branch of one look
// at a fleet, with the facts it had to learn for it.
func TestDecide(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	pol := registry.RestartPolicy{HealthFailures: 3, StartRetries: 3, CrashLoopRestarts: 5, CrashLoopWindow: registry.Duration{Duration: time.Minute},
		ResetAfter: registry.Duration{Duration: time.Minute}}
	fleetd := Proc{PID: 100, StartTime: 7}
	herdrP := Proc{PID: 200, StartTime: 8}
	healthErr := errors.New("connection refused")
	pingErr := errors.New("no such file")
	// base: a healthy fleet, recorded running, watched, its herdr server
	// looked at, the health probe due.
	base := func() *observation {
		f, h := fleetd, herdrP
		return &observation{now: now, policy: pol,
			record:   &State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRunning, Port: 4100, Fleetd: &f, Herdr: &h, HerdrSocket: "/run/h.sock", StartedAt: now.Add(-time.Hour)},
			watching: fleetd, herdrLooked: true, fleetdAlive: true, herdrAlive: true, healthDue: now.Add(-time.Millisecond)}
	}
	dead := func(o *observation) { o.fleetdAlive = false; o.watching = Proc{} }
	pending := func(o *observation) {
		o.record.Phase, o.record.NextRestartAt = PhaseRestarting, now.Add(3*time.Second)
	}
	rows := []struct {
		name  string
		set   func(*observation)
		seen  seen
		want  action
		looks []look
	}{
		{name: "wanted stopped: unwatched", set: func(o *observation) { o.record.Desired = DesiredStopped },
			want: action{kind: actUnwatch}},
		{name: "crash loop: unwatched, nothing looked at", set: func(o *observation) { o.record.CrashLoop = true; o.fleetdAlive = false },
			want: action{kind: actUnwatch}},
		{name: "a start, stop or restart under way: wait", seen: seen{busy: true},
			want: action{kind: actNone}, looks: []look{lookBusy}},
		{name: "fleetd dead, an interrupted start's fleetd healthy: adopt", set: dead,
			seen: seen{candidate: &candidate{proc: Proc{PID: 300}, port: 4100}},
			want: action{kind: actAdopt}, looks: []look{lookBusy, lookCandidate}},
		{name: "adoption refused under the lock, a restart pending: resume it", set: func(o *observation) { dead(o); pending(o); o.adoptRefused = true },
			seen: seen{candidate: &candidate{proc: Proc{PID: 300}}},
			want: action{kind: actResume, due: now.Add(3 * time.Second)}, looks: []look{lookBusy, lookCandidate}},
		{name: "fleetd dead, restart pending, no candidate: resume it at its due time", set: func(o *observation) { dead(o); pending(o) },
			want: action{kind: actResume, due: now.Add(3 * time.Second)}, looks: []look{lookBusy, lookCandidate}},
		{name: "fleetd alive, restart pending: resume it (no adoption looked for)", set: pending,
			want: action{kind: actResume, due: now.Add(3 * time.Second)}, looks: []look{lookBusy}},
		{name: "no fleetd recorded: restart", set: func(o *observation) { dead(o); o.record.Fleetd = nil },
			want: action{kind: actRestart, reason: "fleetd not running"}, looks: []look{lookBusy, lookCandidate}},
		{name: "no fleetd recorded after a failed start: restart naming the failure", set: func(o *observation) {
			dead(o)
			o.record.Fleetd, o.record.Phase, o.record.LastError = nil, PhaseFailed, "fleet kb: port 4100 taken\nmore"
		},
			want: action{kind: actRestart, reason: "start failed: port 4100 taken", startRetry: true}, looks: []look{lookBusy, lookCandidate}},
		{name: "a failed start with retries left (2 of 3 made): retry it, counted", set: func(o *observation) {
			dead(o)
			o.record.Fleetd, o.record.Phase, o.record.LastError, o.record.StartRetries = nil, PhaseFailed, "fleet kb: fleetd did not answer /healthz within 15s", 2
		},
			want: action{kind: actRestart, reason: "start failed: fleetd did not answer /healthz within 15s", startRetry: true}, looks: []look{lookBusy, lookCandidate}},
		{name: "a failed start after start_retries retries: the fleet fails, no more retries", set: func(o *observation) {
			dead(o)
			o.record.Fleetd, o.record.Phase, o.record.LastError, o.record.StartRetries = nil, PhaseFailed, "fleet kb: port 4100 taken", 3
		},
			want: action{kind: actFailStart, reason: "start failed: port 4100 taken"}, looks: []look{lookBusy, lookCandidate}},
		{name: "a failed start reaching start_retries and the crash loop at once: a restart (which records the crash loop)", set: func(o *observation) {
			dead(o)
			o.policy.CrashLoopRestarts = 3
			o.record.Fleetd, o.record.Phase, o.record.LastError, o.record.StartRetries = nil, PhaseFailed, "fleet kb: port 4100 taken", 3
			o.record.RestartTimes = []time.Time{now.Add(-3 * time.Second), now.Add(-2 * time.Second), now.Add(-time.Second)}
		},
			want: action{kind: actRestart, reason: "start failed: port 4100 taken", startRetry: true}, looks: []look{lookBusy, lookCandidate}},
		{name: "start_retries = 0: the first failed start is not retried", set: func(o *observation) {
			dead(o)
			o.policy.StartRetries = 0
			o.record.Fleetd, o.record.Phase, o.record.LastError = nil, PhaseFailed, "fleet kb: port 4100 taken"
		},
			want: action{kind: actFailStart, reason: "start failed: port 4100 taken"}, looks: []look{lookBusy, lookCandidate}},
		{name: "restart = on-failure, a failed start: retried (a failure)", set: func(o *observation) {
			dead(o)
			o.policy.Mode = registry.RestartOnFailure
			o.record.Fleetd, o.record.Phase, o.record.LastError = nil, PhaseFailed, "fleet kb: port 4100 taken"
		},
			want: action{kind: actRestart, reason: "start failed: port 4100 taken", startRetry: true}, looks: []look{lookBusy, lookCandidate}},
		{name: "start retries exhausted: unwatched, nothing looked at", set: func(o *observation) {
			dead(o)
			o.record.Fleetd, o.record.Phase, o.record.LastError, o.record.StartRetries, o.record.StartRetriesExhausted = nil, PhaseFailed, "did not become healthy", 3, true
		},
			want: action{kind: actUnwatch}},
		{name: "a start error recorded, but not failed (an operator's restart began): a plain restart, not counted", set: func(o *observation) {
			dead(o)
			o.record.Fleetd, o.record.Phase, o.record.LastError = nil, PhaseRestarting, "fleet kb: port 4100 taken"
		},
			want: action{kind: actRestart, reason: "start failed: port 4100 taken"}, looks: []look{lookBusy, lookCandidate}},
		{name: "our child exited: restart with its exit status", set: dead, seen: seen{exit: exitSeen{"signal: killed", true}},
			want:  action{kind: actRestart, reason: "fleetd exited: signal: killed", exit: "signal: killed"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "restart = on-failure, our child exited 0: given up (stopped)", set: func(o *observation) { dead(o); o.policy.Mode = registry.RestartOnFailure },
			seen:  seen{exit: exitSeen{"exit status 0", true}},
			want:  action{kind: actGiveUp, reason: "fleetd exited: exit status 0", exit: "exit status 0"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "restart = on-failure, our child exited 3: restart", set: func(o *observation) { dead(o); o.policy.Mode = registry.RestartOnFailure },
			seen:  seen{exit: exitSeen{"exit status 3", true}},
			want:  action{kind: actRestart, reason: "fleetd exited: exit status 3", exit: "exit status 3"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "restart = on-failure, exit status unknown: a failure, restart", set: func(o *observation) { dead(o); o.policy.Mode = registry.RestartOnFailure },
			want: action{kind: actRestart, reason: "fleetd exited: exit status unknown (pid 100 was not started by this fleetmgr)",
				exit: "exit status unknown (pid 100 was not started by this fleetmgr)"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "restart = never, our child was killed: given up (stopped)", set: func(o *observation) { dead(o); o.policy.Mode = registry.RestartNever },
			seen:  seen{exit: exitSeen{"signal: killed", true}},
			want:  action{kind: actGiveUp, reason: "fleetd exited: signal: killed", exit: "signal: killed"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "restart = never, no fleetd recorded after a failed start: nothing", set: func(o *observation) {
			dead(o)
			o.policy.Mode = registry.RestartNever
			o.record.Fleetd, o.record.Phase = nil, PhaseFailed
		},
			want: action{kind: actNone}, looks: []look{lookBusy, lookCandidate}},
		{name: "restart = never, herdr server dead: not acted on", set: func(o *observation) { o.herdrAlive = false; o.policy.Mode = registry.RestartNever },
			want: action{kind: actNone}, looks: []look{lookBusy}},
		{name: "found dead at a new supervisor's first look: a stale record, cleaned", set: func(o *observation) { dead(o); o.first = true },
			want: action{kind: actRestart, reason: "fleetd (pid 100) ended while no fleetmgr serve was supervising it",
				warn: "supervisor: stale state entry cleaned: recorded fleetd is gone or is now another process"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "an operator's restart interrupted after its kill (serve died mid-way): said so, not 'ended while no serve'", set: func(o *observation) {
			dead(o)
			o.first, o.record.Phase = true, PhaseRestarting
		},
			want:  action{kind: actRestart, reason: "restart interrupted: the fleetmgr serve or CLI making it died mid-way, and fleetd (pid 100) is gone"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "a start interrupted before it recorded fleetd: said so, not 'fleetd not running'", set: func(o *observation) {
			dead(o)
			o.record.Phase, o.record.Fleetd = PhaseStarting, nil
		},
			want:  action{kind: actRestart, reason: "start interrupted: the fleetmgr serve or CLI making it died mid-way"},
			looks: []look{lookBusy, lookCandidate}},
		{name: "an adopted fleetd exited: restart, exit status unknown", set: dead,
			want: action{kind: actRestart, reason: "fleetd exited: exit status unknown (pid 100 was not started by this fleetmgr)",
				exit: "exit status unknown (pid 100 was not started by this fleetmgr)"},
			looks: []look{lookBusy, lookCandidate, lookExit}},
		{name: "a record not watched yet, not the fleet's: a stale record, restart", set: func(o *observation) { o.watching = Proc{} },
			seen:  seen{stale: &staleRecord{code: StaleIdentity, why: "pid 100 has no FLEET_NAME=kb"}},
			want:  action{kind: actRestart, reason: "stale state entry: pid 100 has no FLEET_NAME=kb"},
			looks: []look{lookBusy, lookIdentity}},
		{name: "a record not watched yet, the fleet's: watch it", set: func(o *observation) { o.watching = Proc{PID: 99, StartTime: 1} },
			want: action{kind: actWatch}, looks: []look{lookBusy, lookIdentity}},
		{name: "newly watched: record the herdr server an interrupted start spawned", set: func(o *observation) { o.herdrLooked = false },
			want: action{kind: actRecordHerdr}, looks: []look{lookBusy}},
		{name: "the recorded herdr server died: restart with the session", set: func(o *observation) { o.herdrAlive = false },
			want: action{kind: actRestart, reason: "herdr session died (server pid 200)", herdrDown: true}, looks: []look{lookBusy}},
		{name: "no herdr server recorded (a session fleetmgr did not start), healthy", set: func(o *observation) { o.record.Herdr, o.herdrAlive = nil, false },
			want: action{kind: actNone}, looks: []look{lookBusy, lookHealth}},
		{name: "health probe not due", set: func(o *observation) { o.healthDue = now.Add(time.Second) },
			want: action{kind: actNone}, looks: []look{lookBusy}},
		{name: "herdr ping failing health_failures times: restart with the session",
			seen:  seen{health: healthSeen{herdrErr: pingErr, herdrFailures: 3, herdrSocket: "/run/h.sock", err: healthErr, failures: 3}},
			want:  action{kind: actRestart, reason: "herdr session not answering at /run/h.sock (no such file)", herdrDown: true},
			looks: []look{lookBusy, lookHealth}},
		{name: "herdr ping failing, below the threshold, fleetd healthy",
			seen: seen{health: healthSeen{herdrErr: pingErr, herdrFailures: 2}},
			want: action{kind: actNone}, looks: []look{lookBusy, lookHealth}},
		{name: "/healthz failing, below the threshold: warn only",
			seen: seen{health: healthSeen{err: healthErr, failures: 2}},
			want: action{kind: actNone, warn: "supervisor: health check failed"}, looks: []look{lookBusy, lookHealth}},
		{name: "/healthz failing health_failures times: restart",
			seen:  seen{health: healthSeen{err: healthErr, failures: 3}},
			want:  action{kind: actRestart, reason: "health: 3 consecutive /healthz failures (last: connection refused)", warn: "supervisor: health check failed"},
			looks: []look{lookBusy, lookHealth}},
		{name: "/healthz cut short by serve stopping: nothing",
			seen: seen{health: healthSeen{err: context.Canceled, canceled: true, failures: 2}},
			want: action{kind: actNone}, looks: []look{lookBusy, lookHealth}},
		{name: "healthy after a restart: record it running", set: func(o *observation) { o.record.Phase = PhaseRestarting },
			want: action{kind: actMarkRunning}, looks: []look{lookBusy, lookHealth}},
		{name: "healthy, an old due time left: clear it", set: func(o *observation) { o.record.NextRestartAt = now.Add(-time.Minute) },
			want: action{kind: actMarkRunning}, looks: []look{lookBusy, lookHealth}},
		{name: "healthy for restart_reset_after: reset the backoff", set: func(o *observation) { o.record.BackoffStep = 2 },
			want: action{kind: actMarkRunning, resetBackoff: true}, looks: []look{lookBusy, lookHealth}},
		{name: "healthy, not yet stable after a restart: nothing", set: func(o *observation) {
			o.record.BackoffStep, o.record.StartedAt = 2, now.Add(-30*time.Second)
		},
			want: action{kind: actNone}, looks: []look{lookBusy, lookHealth}},
		{name: "healthy and recorded so: nothing",
			want: action{kind: actNone}, looks: []look{lookBusy, lookHealth}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			o := base()
			if r.set != nil {
				r.set(o)
			}
			got, looks := decideWithLooks(t, o, r.seen)
			if got.warn != "" && len(got.warnArgs) == 0 {
				t.Errorf("warning %q without its attributes", got.warn)
			}
			got.warnArgs = nil
			if !reflect.DeepEqual(got, r.want) {
				t.Errorf("decided %+v (%s)\n    want %+v (%s)", got, got.kind, r.want, r.want.kind)
			}
			if !slices.Equal(looks, r.looks) {
				t.Errorf("looked at %v, want %v", looks, r.looks)
			}
		})
	}
}

// TestDecideContinues: the acts that let decide go on (watch, record the
// herdr server, an adoption refused) change what it asked about, so the
// next question is another one.
func TestDecideContinues(t *testing.T) {
	now := time.Now()
	p := Proc{PID: 100, StartTime: 7}
	o := &observation{now: now, policy: registry.RestartPolicy{HealthFailures: 1},
		record:      &State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRunning, Fleetd: &p},
		fleetdAlive: true, looked: lookBusy | lookIdentity}
	if a := decide(o); a.kind != actWatch {
		t.Fatalf("first: %s", a.kind)
	}
	o.watching = p
	if a := decide(o); a.kind != actRecordHerdr {
		t.Fatalf("after watch: %s", a.kind)
	}
	o.herdrLooked = true
	if a := decide(o); a.kind != actLook || a.look != lookHealth {
		t.Fatalf("after the herdr record: %+v", a)
	}
}

// TestUncountRestart: a stop during the backoff takes back the restart
// the supervisor counted and never made; one whose start has begun (or
// none pending) stays counted.
func TestUncountRestart(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	pending := func(reason string) State {
		return State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRestarting, PhaseReason: reason,
			Restarts: 3, Supervision: Supervision{NextRestartAt: now.Add(4 * time.Second), LastRestartAt: now, BackoffStep: 2, StartRetries: 1,
				RestartTimes: []time.Time{now.Add(-time.Minute), now}}}
	}
	st := pending("supervisor: start retry 2 of 3 after a failed start, port taken")
	if !uncountRestart(&st) || st.Restarts != 2 || len(st.RestartTimes) != 1 || st.BackoffStep != 1 || st.StartRetries != 0 || !st.NextRestartAt.IsZero() {
		t.Errorf("a pending start retry: %+v", st)
	}
	st = pending("supervisor: fleetd exited: signal: killed")
	if !uncountRestart(&st) || st.Restarts != 2 || st.StartRetries != 1 {
		t.Errorf("a pending restart after an exit: restarts %d, start retries %d", st.Restarts, st.StartRetries)
	}
	st = pending(reasonRestartStartBegun)
	if uncountRestart(&st) || st.Restarts != 3 {
		t.Errorf("a restart whose start began was taken back: %+v", st)
	}
	st = State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRunning, Restarts: 3}
	if uncountRestart(&st) || st.Restarts != 3 {
		t.Errorf("a running fleet's restarts were changed: %+v", st)
	}
}
