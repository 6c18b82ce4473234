package lifecycle

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// The supervisor's decisions (docs/ARCHITECTURE.md "Supervision"). At each
// look at a fleet, its goroutine observes it (observation), decide says what
// to do (action) and the Supervisor acts (supervise.go). decide is pure:
// what costs I/O to learn — a lock attempt, a /healthz probe, how a child
// ended, whether a process is the fleet's — it asks for (actLook) and the
// Supervisor looks and asks again, so every branch is tested from a table
// (decide_test.go) without a process, and nothing is probed that the
// decision does not need.

// look is one fact decide may ask for; observation.looked holds a bit per
// fact learned.
type look uint8

const (
	// lookBusy: does a start, stop or restart hold the fleet's lock
	// (observation.busy)?
	lookBusy look = 1 << iota
	// lookCandidate: is the fleetd that fleetd.spawned.json names alive,
	// and does its /healthz name the fleet (observation.candidate)? An
	// interrupted start leaves one to adopt.
	lookCandidate
	// lookExit: how did the recorded fleetd end (observation.exit)? Known
	// when it was this process's child.
	lookExit
	// lookIdentity: is the recorded fleetd, not watched yet, the fleet's
	// (observation.stale)? See identity.go.
	lookIdentity
	// lookHealth: GET /healthz and a herdr ping, made only when due
	// (observation.health).
	lookHealth
)

// observation is what a supervisor's goroutine has seen of one fleet at one
// look. The fields up to looked are filled at the start of the look; the
// rest as decide asks for them.
type observation struct {
	now    time.Time
	policy registry.RestartPolicy
	// record is the fleet's state.json as read at the start of the look.
	record *State
	// first: the goroutine's first look at the fleet; a fleetd found dead
	// now died before this supervisor.
	first bool
	// watching is the fleetd the goroutine watches (PID 0: none).
	watching Proc
	// herdrLooked: herdr.spawned.json was looked at for that fleetd.
	herdrLooked bool
	// fleetdAlive, herdrAlive: the recorded processes are alive (pid and
	// start time).
	fleetdAlive, herdrAlive bool
	// healthDue is when the next /healthz probe is due.
	healthDue time.Time

	looked look // which of the facts below are known
	busy   bool
	// candidate is the live, healthy fleetd an interrupted start spawned
	// and never recorded (nil: none); adoptRefused: adopting it was
	// refused under the fleet's lock (the record changed meanwhile).
	candidate    *candidate
	adoptRefused bool
	exit         exitSeen
	// stale is why the recorded fleetd is not the fleet's (nil: it is).
	stale  *staleRecord
	health healthSeen
}

// candidate is a fleetd to adopt and the port it answered on.
type candidate struct {
	proc Proc
	port int
}

// exitSeen is how the recorded fleetd ended, when this process reaped it.
type exitSeen struct {
	status string // e.g. "signal: killed", "exit status 3"
	known  bool
}

// healthSeen is one health look: its results, and the failures in a row
// counted up to and including it.
type healthSeen struct {
	err      error // /healthz did not answer, or named another fleet; nil: healthy
	canceled bool  // err came from serve stopping: not counted
	failures int   // /healthz failures in a row
	// herdrErr is the herdr ping's error (nil: it answered, or no socket
	// is recorded); herdrFailures its failures in a row.
	herdrErr      error
	herdrFailures int
	herdrSocket   string
}

func (o *observation) knows(l look) bool { return o.looked&l != 0 }

// actionKind is what the Supervisor does at the end of a look.
type actionKind uint8

const (
	// actNone: nothing this time (a start, stop or restart holds the lock;
	// the health probe is not due; all is well, or a failure is still
	// below health_failures).
	actNone actionKind = iota
	// actLook: learn action.look, then decide again.
	actLook
	// actUnwatch: the fleet is not wanted running, or is in a crash loop:
	// stop watching it.
	actUnwatch
	// actAdopt: make observation.candidate the fleet's fleetd (and the
	// herdr server the same start spawned its herdr server).
	actAdopt
	// actResume: a restart decided and counted earlier (by a serve that is
	// gone) is made at its due time (action.due), not counted again.
	actResume
	// actRestart: fleetd failed (action.reason, action.exit): record it
	// and, as planRestart decides under the fleet's lock, either mark the
	// fleet failed (crash loop) or restart it after the backoff. What is
	// left of fleetd's session is ended, and with action.herdrDown the
	// herdr server fleetmgr started; a stale record is dropped unsignalled.
	actRestart
	// actWatch: watch the recorded fleetd (a new one, or one a previous
	// supervisor or the CLI started: adoption), then decide again.
	actWatch
	// actRecordHerdr: record the herdr server an interrupted start spawned
	// when the record names none alive, then decide again.
	actRecordHerdr
	// actMarkRunning: fleetd is healthy: record the fleet running with no
	// restart due, and with action.resetBackoff the backoff reset.
	actMarkRunning
	// actFailStart: the fleet's last start never became healthy
	// (action.reason) and start_retries retries of it were made: record
	// the fleet failed with its retries exhausted, no more retries
	// (supervise.go failStart).
	actFailStart
	// actGiveUp: fleetd exited (action.reason, action.exit) and the
	// fleet's restart policy does not restart it (registry.RestartNever,
	// or RestartOnFailure after exit status 0): record the fleet stopped
	// with its exit status, end what is left of fleetd's session.
	actGiveUp
)

var actionNames = [...]string{"none", "look", "unwatch", "adopt", "resume", "restart", "watch", "record-herdr", "mark-running", "fail-start", "give-up"}

func (k actionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", k)
}

// action is decide's answer.
type action struct {
	kind actionKind
	look look // actLook
	// reason and exit: why fleetd failed and its exit status ("" when
	// unknown), actRestart; herdrDown: the herdr session failed too.
	reason, exit string
	herdrDown    bool
	// startRetry: the restart is a retry of a start that never became
	// healthy, counted against start_retries (actRestart).
	startRetry   bool
	due          time.Time // actResume
	resetBackoff bool      // actMarkRunning
	// warn, with warnArgs, is logged at WARN before acting.
	warn     string
	warnArgs []any
}

// decide says what the supervisor does about the fleet it observed. It is
// pure: it reads o only. The order of its questions is the order of
// precedence: the desired state, a start/stop/restart under way, an
// interrupted start's fleetd to adopt, a pending restart, a dead fleetd, a
// record not watched yet, the herdr session, then health.
func decide(o *observation) action {
	r := o.record
	if r.Desired != DesiredRunning || r.CrashLoop || r.StartRetriesExhausted {
		return action{kind: actUnwatch}
	}
	if !o.knows(lookBusy) {
		return action{kind: actLook, look: lookBusy}
	}
	if o.busy {
		return action{kind: actNone} // look again later
	}
	if !o.fleetdAlive {
		if !o.knows(lookCandidate) {
			return action{kind: actLook, look: lookCandidate}
		}
		if o.candidate != nil && !o.adoptRefused {
			return action{kind: actAdopt}
		}
	}
	if pendingRestart(r) {
		// Decided and counted, not made: normally by a serve that is gone
		// (killed during the backoff or the restart's start).
		return action{kind: actResume, due: r.NextRestartAt}
	}
	never := o.policy.Mode == registry.RestartNever
	if !o.fleetdAlive {
		if r.Fleetd == nil {
			if never {
				return action{kind: actNone} // nothing to restart, and the policy says never
			}
			if r.LastError == "" {
				if v := interruptedVerb(r); v != "" {
					return action{kind: actRestart, reason: reasonInterrupted(v, 0)}
				}
				return action{kind: actRestart, reason: reasonNotRunning}
			}
			reason := reasonStartFailed(r.Name, r.LastError)
			if r.Phase != PhaseFailed {
				return action{kind: actRestart, reason: reason}
			}
			// A start that never became healthy (an operator's, or a
			// restart's): retried start_retries times in a row, then the
			// fleet is failed (supervisord's startretries). A fleetd that
			// was healthy and later failed is the restart policy's and the
			// crash loop's (below); this counts only the starts after it.
			// The crash loop counts these retries too: whichever limit
			// the failure reaches first ends the retries, and one that
			// reaches both is the crash loop's (restart records it).
			if r.StartRetries >= o.policy.StartRetries && !planRestart(o.policy, r.RestartTimes, r.BackoffStep, o.now).crashLoop {
				return action{kind: actFailStart, reason: reason}
			}
			return action{kind: actRestart, reason: reason, startRetry: true}
		}
		if !o.knows(lookExit) {
			return action{kind: actLook, look: lookExit}
		}
		var a action
		switch {
		case o.exit.known:
			a = action{kind: actRestart, reason: reasonExited(o.exit.status), exit: o.exit.status}
		case o.first && interruptedVerb(r) != "": // the verb under way had ended it (a restart's kill) or found it gone
			a = action{kind: actRestart, reason: reasonInterrupted(interruptedVerb(r), r.Fleetd.PID)}
		case o.first: // found dead by a new supervisor: a record from before it
			a = action{kind: actRestart, reason: reasonDiedUnsupervised(r.Fleetd.PID),
				warn: "supervisor: stale state entry cleaned: recorded fleetd is gone or is now another process", warnArgs: []any{"pid", r.Fleetd.PID, "start_time", r.Fleetd.StartTime}}
		default:
			exit := exitUnknown(r.Fleetd.PID)
			a = action{kind: actRestart, reason: reasonExited(exit), exit: exit}
		}
		if never || (o.policy.Mode == registry.RestartOnFailure && o.exit.known && o.exit.status == "exit status 0") {
			a.kind = actGiveUp
		}
		return a
	}
	if !sameProc(&o.watching, r.Fleetd) {
		// A record not watched yet (adoption, or a new fleetd): it must be
		// this fleet's fleetd, not a process that merely holds its pid and
		// start time (a forged file, or a collision after a reboot).
		if !o.knows(lookIdentity) {
			return action{kind: actLook, look: lookIdentity}
		}
		if o.stale != nil {
			return action{kind: actRestart, reason: reasonStale(o.stale.why)}
		}
		return action{kind: actWatch}
	}
	if !o.herdrLooked {
		return action{kind: actRecordHerdr}
	}
	if never {
		// Not restarted whatever happens to a live fleetd: its health and
		// herdr session are shown (status), not acted on.
		return action{kind: actNone}
	}
	if r.Herdr != nil && !o.herdrAlive {
		return action{kind: actRestart, reason: reasonHerdrDied(r.Herdr.PID), herdrDown: true}
	}
	if o.now.Before(o.healthDue) {
		return action{kind: actNone}
	}
	if !o.knows(lookHealth) {
		return action{kind: actLook, look: lookHealth}
	}
	h, n := o.health, o.policy.HealthFailures
	if h.herdrErr != nil && h.herdrFailures >= n {
		// A hung server, or a session fleetmgr did not start, shows by ping.
		return action{kind: actRestart, reason: reasonHerdrHung(h.herdrSocket, h.herdrErr), herdrDown: true}
	}
	if h.err != nil {
		if h.canceled {
			return action{kind: actNone}
		}
		a := action{kind: actNone, warn: "supervisor: health check failed", warnArgs: []any{"failures", h.failures, "of", n, "err", h.err}}
		if h.failures >= n {
			a.kind, a.reason = actRestart, reasonUnhealthy(h.failures, h.err)
		}
		return a
	}
	stable := r.BackoffStep > 0 && !r.StartedAt.IsZero() && o.now.Sub(r.StartedAt) >= o.policy.ResetAfter.Duration
	if r.Phase != PhaseRunning || stable || !r.NextRestartAt.IsZero() {
		return action{kind: actMarkRunning, resetBackoff: stable}
	}
	return action{kind: actNone}
}

// pendingRestart reports whether st records a restart the supervisor has
// decided (counted, with its due time) but not yet made: a serve killed
// during the backoff, or during the restart's start, leaves it so, and the
// next serve makes it without counting it again. It is pure: it reads st
// only.
func pendingRestart(st *State) bool {
	return st.Desired == DesiredRunning && !st.CrashLoop && !st.StartRetriesExhausted && st.Phase == PhaseRestarting && !st.NextRestartAt.IsZero()
}

// reasonRestartStartBegun is the phase reason a restart's start records
// as it begins (start.go): from then on the restart counted is being
// made.
const reasonRestartStartBegun = "restart's start begun"

// uncountRestart takes back from st the restart the supervisor counted
// (Restarts, the crash loop's window, the backoff step, a start retry)
// when it was never made: st still waits for it (pendingRestart) and its
// start has not begun. A stop during the backoff calls it, so the
// restart count says how often fleetd was restarted. It reports whether
// it took one back. It is pure.
func uncountRestart(st *State) bool {
	if !pendingRestart(st) || st.PhaseReason == reasonRestartStartBegun {
		return false
	}
	st.Restarts = max(0, st.Restarts-1)
	if n := len(st.RestartTimes); n > 0 && st.RestartTimes[n-1].Equal(st.LastRestartAt) {
		st.RestartTimes = st.RestartTimes[:n-1]
	}
	st.BackoffStep = max(0, st.BackoffStep-1)
	if st.StartRetries > 0 && strings.HasPrefix(st.PhaseReason, "supervisor: start retry ") {
		st.StartRetries--
	}
	st.NextRestartAt = time.Time{}
	return true
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

// backoff is the delay before restart number step+1 of a run of failures:
// restart_backoff_initial doubled step times, capped at restart_backoff_max.
func backoff(pol registry.RestartPolicy, step int) time.Duration {
	d := pol.BackoffInitial.Duration
	for i := 0; i < step && d < pol.BackoffMax.Duration; i++ {
		d *= 2
	}
	return min(d, pol.BackoffMax.Duration)
}
