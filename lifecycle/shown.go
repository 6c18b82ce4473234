package lifecycle

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// What readers are shown of a fleet (docs/ARCHITECTURE.md "States and
// transitions"). The stored phase says what the last fleetmgr to act on the
// fleet recorded; a reader also needs what is true now: a "running" fleet
// whose fleetd has died, a start whose fleetmgr was killed half-way, a
// restart no serve is left to make. Manager.State observes those facts and
// derives Shown from the record and them (show, which is pure); the record
// itself is left for the fleetmgr that acts on it next.

// Shown is a fleet's state as shown to readers (`fleetmgr list`,
// fleetmgr_list, status, metrics, the proxy's errors). It is never stored.
type Shown struct {
	// Phase is the phase to display: the stored one, unless Condition
	// says why not.
	Phase Phase
	// Condition names what made Phase differ from the stored phase, ""
	// when it does not.
	Condition Condition
	// LastError is the error to display: the stored one, or one
	// explaining Condition (or, for a fleet no longer in the config that
	// is down, that nothing restarts it).
	LastError string
	// NotInConfig: the config in force no longer defines the fleet (it
	// may still run; it can only be stopped).
	NotInConfig bool
	// RestartPending lists, for a fleet shown running, the fleets.toml
	// keys whose values differ from those it was started with; its next
	// start applies them.
	RestartPending []string
	// HerdrGone: a fleet shown running whose recorded herdr server has
	// exited with no serve supervising the fleet (one would restart it):
	// fleetd runs, but its members' session is lost. LastError says so
	// and what to run.
	HerdrGone bool
	// HerdrLeft: for a fleet shown failed, the herdr server of the fleet
	// that still runs ("herdr session kb still runs (pid 4242)"), "" when
	// none; LastError says it and what ends it.
	HerdrLeft string
	// Next is, for a fleet whose last start did not become healthy, what
	// happens next in one sentence (issue 24 item 5): serve retries it N
	// more times, the next in so long, and `fleetmgr stop NAME` gives up;
	// or it failed after its retries, and `fleetmgr start NAME` tries
	// again; or nothing retries it (no serve, restart = never). "" for
	// any other fleet. Built in reasons.go.
	Next string
	// StartRetrying: the fleet's last start did not become healthy and
	// start_retries applies to it (serve retries it, or gave up);
	// StartRetriesLeft is then how many retries serve still makes, the
	// pending one included (0: given up, or none allowed).
	StartRetrying    bool
	StartRetriesLeft int
	// NextRestartAt is when the restart a fleet shown restarting waits
	// for is due: the recorded one (State.NextRestartAt), or for
	// CondStartRetryPending the due time the supervisor's backoff gives
	// the retry it is about to record. Zero when none is pending.
	NextRestartAt time.Time
	// Undecided: the fleet's last start failed, it is shown failed, and
	// the supervisor watching it has yet to record that the start
	// retries are spent (or the crash loop). The journal waits for that
	// record, so the failure is journalled once, with the supervisor's
	// reason (daemon/attention.go).
	Undecided bool
}

// Condition is an observed fact that changes the phase a reader is shown.
type Condition string

// The conditions Manager.State observes.
const (
	// CondExitedStopped: stored running, fleetd gone, the fleet wanted
	// stopped: shown stopped.
	CondExitedStopped Condition = "fleetd_exited_stopped"
	// CondExitSupervised: stored running, fleetd gone, a supervisor holds
	// the fleet's supervisor.lock (it is about to record the restart):
	// shown restarting.
	CondExitSupervised Condition = "fleetd_exited_supervised"
	// CondExitUnsupervised: stored running, fleetd gone, no supervisor:
	// shown failed.
	CondExitUnsupervised Condition = "fleetd_exited_unsupervised"
	// CondRestartOverdue: stored restarting with a due time long past
	// (start_timeout + 5 s), fleetd gone, no supervisor: shown failed.
	CondRestartOverdue Condition = "restart_overdue"
	// CondInterrupted: stored starting or stopping while nobody holds the
	// fleet's lock (the fleetmgr doing it was killed), or restarting with
	// no due time (an operator's restart) while nobody holds the lock and
	// no serve supervises the fleet: shown failed.
	CondInterrupted Condition = "interrupted"
	// CondStale: stored running, but the recorded fleetd pid names a
	// process that is not the fleet's fleetd (Manager.judge): shown
	// stale, with why, never running with a stranger's pid.
	CondStale Condition = "stale_record"
	// CondStartRetryPending: stored failed by a start that did not become
	// healthy, with start retries left, while a serve supervises the
	// fleet: shown restarting, as the supervisor decides in the next
	// moment (decide.go), never "failed" while retries are coming.
	CondStartRetryPending Condition = "start_retry_pending"
)

// facts are what Manager.State observes beyond the record. The costly ones
// are functions, asked only when the derivation needs them.
type facts struct {
	fleetdAlive bool // the recorded fleetd is alive (pid and start time)
	// staleWhy says why the process the recorded fleetd pid names now is
	// not the fleet's fleetd ("" when it is, or when none runs), asked for
	// a fleet stored running.
	staleWhy func() string
	// herdrLeft says, for a fleet shown failed, which herdr server of the
	// fleet still runs ("" when none): "herdr session kb still runs (pid N)".
	herdrLeft func() string
	// herdrAlive: the recorded herdr server is alive (pid and start
	// time), asked for a fleet shown running that records one.
	herdrAlive func() bool
	// supervised: a Supervisor (any process) holds the fleet's
	// supervisor.lock.
	supervised func() bool
	// busy: a start, stop or restart holds the fleet's lock.
	busy func() bool
	// spawnedPID is the pid of a live fleetd that fleetd.spawned.json
	// names and the record does not, 0 when none.
	spawnedPID func() int
	// overdueAfter is how long past its due time a restart no serve made
	// is shown failed.
	overdueAfter time.Duration
	// inConfig: the config in force defines the fleet; configPath is its
	// file.
	inConfig   bool
	configPath string
	// policy is the fleet's supervision policy in the config in force
	// (nil when the config no longer defines the fleet).
	policy *registry.RestartPolicy
	// settings are the digests of the fleet's settings in the config in
	// force (settingsOf), asked for a fleet shown running.
	settings func() map[string]string
}

// show derives what readers are shown of st from the facts observed at now.
// It is pure: it reads st and f only.
func (st *State) show(now time.Time, f facts) Shown {
	v := Shown{Phase: st.Phase, LastError: withoutLogTail(st.Name, st.LastError), NextRestartAt: st.NextRestartAt}
	if st.Phase == PhaseRunning && st.Fleetd != nil && f.staleWhy != nil {
		if why := f.staleWhy(); why != "" {
			v.Phase, v.Condition = PhaseStale, CondStale
			v.LastError = fmt.Sprintf("stale record: %s; nothing was signalled; `fleetmgr stop %s` clears the record, `fleetmgr start %s` starts the fleet anew", why, st.Name, st.Name)
			if !f.inConfig {
				v.NotInConfig = true
			}
			return v
		}
	}
	if st.Phase == PhaseRunning && !f.fleetdAlive {
		switch {
		case st.Desired == DesiredStopped:
			v.Phase, v.Condition = PhaseStopped, CondExitedStopped
		case f.supervised():
			// The supervisor watching it is about to record the exit and
			// its restart (restarting in …): say so, not "failed".
			v.Phase, v.Condition = PhaseRestarting, CondExitSupervised
		default:
			v.Phase, v.Condition = PhaseFailed, CondExitUnsupervised
			if v.LastError == "" {
				v.LastError = errExitedUnsupervised
			}
		}
	}
	// A restart due long ago that never came (no serve ran to make it,
	// e.g. serve was killed during the backoff). The record is left for
	// the next serve, which makes it without counting it again. While a
	// supervisor watches the fleet the restart is being made.
	if v.Phase == PhaseRestarting && !st.NextRestartAt.IsZero() && !f.fleetdAlive &&
		now.Sub(st.NextRestartAt) > f.overdueAfter && !f.supervised() {
		v.Phase, v.Condition = PhaseFailed, CondRestartOverdue
		v.LastError = fmt.Sprintf("a restart was due at %s but no fleetmgr serve made it; run `fleetmgr serve` (it restarts the fleet) or `fleetmgr start %s`",
			st.NextRestartAt.UTC().Format(time.RFC3339), st.Name)
	}
	// A start, stop or operator's restart (no due time: not the
	// supervisor's) whose fleetmgr is gone (killed mid-way: the fleet's
	// lock is free, so nothing is in progress), instead of "starting" or
	// "restarting" for ever. A serve supervising the fleet makes such a
	// restart itself.
	interrupted := (v.Phase == PhaseStarting || v.Phase == PhaseStopping) && !f.busy()
	if v.Phase == PhaseRestarting && st.Phase == PhaseRestarting && st.NextRestartAt.IsZero() && !f.busy() && !f.supervised() {
		interrupted = true
	}
	if interrupted {
		verb := "start"
		switch v.Phase {
		case PhaseStopping:
			verb = "stop"
		case PhaseRestarting:
			verb = "restart"
		}
		v.Phase, v.Condition = PhaseFailed, CondInterrupted
		v.LastError = fmt.Sprintf("a %s was interrupted (the fleetmgr running it is gone)", verb)
		if pid := f.spawnedPID(); pid != 0 {
			v.LastError += fmt.Sprintf("; fleetd pid %d it spawned still runs unrecorded", pid)
		}
		if verb == "stop" {
			// Nothing was spawned to adopt: the fleet is as the stop left
			// it, and what to do is finish the stop (or keep the fleet).
			if f.fleetdAlive && st.Fleetd != nil {
				v.LastError += fmt.Sprintf("; its fleetd pid %d still runs", st.Fleetd.PID)
			}
			v.LastError += fmt.Sprintf("; run `fleetmgr stop %s` to finish it (it stops every process of the fleet), or `fleetmgr start %s` to keep the fleet running", st.Name, st.Name)
		} else {
			v.LastError += fmt.Sprintf("; run `fleetmgr start %s` or `fleetmgr serve` (either adopts a healthy fleetd the start spawned), or `fleetmgr stop %s` (it stops every process of the fleet)", st.Name, st.Name)
		}
	}
	// The herdr server died under a running fleetd, and no supervisor is
	// there to start the session again: not plainly "running".
	if v.Phase == PhaseRunning && st.Herdr != nil && !f.herdrAlive() && !f.supervised() {
		v.HerdrGone = true
		if v.LastError == "" {
			v.LastError = fmt.Sprintf("its herdr server (pid %d) is gone and no fleetmgr serve supervises the fleet; `fleetmgr start %s` starts the session again (with a new fleetd)", st.Herdr.PID, st.Name)
		}
	}
	if f.inConfig && f.policy != nil {
		st.retryPending(&v, *f.policy, f.supervised)
	}
	// A failed fleet whose herdr server still runs: its session (and the
	// members in it) is still there, and a stop ends it.
	if v.Phase == PhaseFailed && f.herdrLeft != nil {
		if left := f.herdrLeft(); left != "" {
			msg := fmt.Sprintf("%s: `fleetmgr stop %s` ends it", left, st.Name)
			if v.LastError == "" {
				v.LastError = msg
			} else {
				v.LastError += "; " + msg
			}
			v.HerdrLeft = left
		}
	}
	switch {
	case !f.inConfig:
		v.NotInConfig = true
		if v.Phase != PhaseRunning && v.Phase != PhaseStopped {
			v.LastError = fmt.Sprintf("fleet %s is no longer in %s, so nothing restarts it; `fleetmgr stop %s` ends what is left of it", st.Name, f.configPath, st.Name)
		}
	case v.Phase == PhaseRunning && st.Launch != nil:
		v.RestartPending = diffSettings(st.Launch.Settings, f.settings())
	}
	if f.inConfig && f.policy != nil {
		st.whatNext(&v, now, *f.policy, f.supervised)
	}
	return v
}

// retryPending shows a fleet whose start did not become healthy as the
// supervisor watching it will decide in a moment (decide.go): restarting
// (CondStartRetryPending, due after the backoff) while start retries are
// left, or failed and Undecided when they are spent, so that neither
// status nor the journal reads "failed" before the retries are over. It
// is pure.
func (st *State) retryPending(v *Shown, pol registry.RestartPolicy, supervised func() bool) {
	if v.Phase != PhaseFailed || st.Phase != PhaseFailed || v.Condition != "" || st.Desired != DesiredRunning ||
		st.LastError == "" || st.Fleetd != nil || st.CrashLoop || st.StartRetriesExhausted ||
		pol.Mode == registry.RestartNever || !supervised() {
		return
	}
	plan := planRestart(pol, st.RestartTimes, st.BackoffStep, st.PhaseAt)
	if plan.crashLoop || st.StartRetries >= pol.StartRetries {
		v.Undecided = true
		return
	}
	v.Phase, v.Condition, v.NextRestartAt = PhaseRestarting, CondStartRetryPending, plan.due
}

// whatNext fills v.Next (and StartRetrying, StartRetriesLeft) for a fleet
// wanted running whose last start did not become healthy, from its record,
// its policy and whether a serve supervises it. It follows decide's rule
// (decide.go): a failed start is retried start_retries times, with the
// backoff planRestart gives, unless the crash loop comes first; what the
// supervisor has not recorded yet (the ms between a start's failure and
// its decision) is told as it will decide it. It is pure.
func (st *State) whatNext(v *Shown, now time.Time, pol registry.RestartPolicy, supervised func() bool) {
	if st.Desired != DesiredRunning {
		return
	}
	name := st.Name
	switch {
	case st.StartRetriesExhausted && v.Phase == PhaseFailed:
		v.Next, v.StartRetrying = nextFailed(name, st.LastError), true
	case st.CrashLoop:
		// A crash loop that failed starts ran into (start_retries above
		// crash_loop_restarts) ends the retries as well: said so. One
		// after exits of a healthy fleetd is the crash loop's own.
		if v.Phase == PhaseFailed && st.LastError != "" && strings.HasPrefix(st.LastRestartReason, "start failed: ") {
			v.Next = nextFailed(name, st.LastError)
		}
	case v.Phase == PhaseRestarting && st.Phase == PhaseRestarting && st.StartRetries > 0:
		// A retry decided: pending until NextRestartAt, then under way.
		cause := startErrorClause(name, strings.TrimPrefix(firstLine(st.LastRestartReason), "start failed: "))
		v.StartRetrying, v.StartRetriesLeft = true, max(0, pol.StartRetries-st.StartRetries+1)
		if !supervised() { // serve died after deciding it: the next serve goes on with the retries left
			v.StartRetrying, v.Next = false, nextNotRetried(name, cause, false)
			return
		}
		underWay := st.NextRestartAt.IsZero() || !now.Before(st.NextRestartAt)
		v.Next = nextRetrying(name, cause, v.StartRetriesLeft, st.NextRestartAt.Sub(now), underWay, st.StartRetries, pol.StartRetries)
	case (v.Phase == PhaseFailed || v.Condition == CondStartRetryPending) && st.Phase == PhaseFailed && st.LastError != "" && st.Fleetd == nil:
		// A start failed; the supervisor decides (or would) as decide.go.
		cause := startErrorClause(name, st.LastError)
		switch {
		case !supervised():
			v.Next = nextNotRetried(name, cause, false)
		case pol.Mode == registry.RestartNever:
			v.Next = nextNotRetried(name, cause, true)
		default:
			plan := planRestart(pol, st.RestartTimes, st.BackoffStep, st.PhaseAt)
			if plan.crashLoop {
				v.Next = nextFailed(name, crashLoopError(name, len(plan.window), pol.CrashLoopWindow.Duration, reasonStartFailed(name, st.LastError)))
				return
			}
			if st.StartRetries >= pol.StartRetries {
				v.StartRetrying = true
				v.Next = nextFailed(name, startRetriesError(name, st.StartRetries, st.LastError))
				return
			}
			v.StartRetrying, v.StartRetriesLeft = true, pol.StartRetries-st.StartRetries
			v.Next = nextRetrying(name, cause, v.StartRetriesLeft, plan.due.Sub(now), false, 0, 0)
		}
	}
}

// State reads a fleet's record and computes what readers are shown of it
// (st.Shown) from what is alive now and the config in force. The stored
// fields, Phase among them, are returned as recorded.
func (m *Manager) State(name string) (*State, error) {
	if _, err := m.Fleet(name); err != nil {
		return nil, err
	}
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	cfg := m.Config()
	f, inConfig := cfg.Fleets[name]
	st.Shown = st.show(time.Now(), facts{
		fleetdAlive: alive(st.Fleetd),
		staleWhy: func() string {
			if s := m.judge(st.Fleetd, fleetdRole(name)); s != nil {
				return s.why
			}
			return ""
		},
		herdrLeft: func() string {
			if st.Herdr == nil || !alive(st.Herdr) || m.judge(st.Herdr, m.herdrRole(name, st)) != nil {
				return ""
			}
			return fmt.Sprintf("herdr session %s still runs (pid %d)", m.herdrRole(name, st).session, st.Herdr.PID)
		},
		herdrAlive:   func() bool { return alive(st.Herdr) },
		supervised:   sync.OnceValue(func() bool { return m.supervised(name) }),
		busy:         func() bool { return m.busy(name) },
		overdueAfter: cfg.Manager.StartTimeout.Duration + 5*time.Second,
		spawnedPID: func() int {
			if p := m.readSpawned(name, "fleetd"); p != nil && alive(p) && !alive(st.Fleetd) {
				return p.PID
			}
			return 0
		},
		inConfig:   inConfig,
		configPath: cfg.Path,
		settings:   func() map[string]string { return settingsOf(cfg, f) },
		policy:     policyOf(f),
	})
	return st, nil
}

// policyOf is f's supervision policy, nil for a fleet the config does not
// define (f nil).
func policyOf(f *registry.Fleet) *registry.RestartPolicy {
	if f == nil {
		return nil
	}
	return &f.Restart
}

// PendingRestart says when and why the supervisor restarts the fleet, for
// a caller who finds it down: "restarting in 3s (reason: fleetd exited:
// signal: killed)", "restarting now (…)" once due or while the restart's
// start runs, plain "restarting now" for a restart with no due time (an
// operator's `fleetmgr restart`, or an exit the supervisor has not
// recorded yet: the last reason would be an older one), "" when st is not
// restarting. now is the time to count from. A State from Manager.State is
// judged by its shown phase, any other by its stored one.
func (st *State) PendingRestart(now time.Time) string {
	phase := st.Shown.Phase
	if phase == "" {
		phase = st.Phase
	}
	if phase != PhaseRestarting {
		return ""
	}
	when, due, reason := "restarting now", st.NextRestartAt, st.LastRestartReason
	if st.Shown.Phase != "" {
		due = st.Shown.NextRestartAt
	}
	if st.Shown.Condition == CondStartRetryPending {
		reason = reasonStartFailed(st.Name, st.LastError)
	}
	if due.IsZero() {
		return when
	}
	if d := due.Sub(now); d > 0 {
		when = "restarting in " + max(time.Second, d.Round(time.Second)).String()
		if d < time.Second {
			when = "restarting in <1s"
		}
	}
	if r := firstLine(reason); r != "" {
		when += " (reason: " + r + ")"
	}
	return when
}

// NextError is a failed Start's or Restart's error followed, on a line of
// its own, by what happens next to the fleet (Shown.Next): "kb did not
// become healthy: …; serve retries 3 more times, next in 1 s; `fleetmgr
// stop kb` to give up".
type NextError struct {
	Err  error
	Next string
}

func (e *NextError) Error() string { return e.Err.Error() + "\n" + e.Next }
func (e *NextError) Unwrap() error { return e.Err }

// WithNext returns err, the error of a Start or Restart of fleet name,
// as a *NextError saying what happens next when the fleet's record calls
// for it (Shown.Next: its start did not become healthy); else err as it
// is (also nil).
func (m *Manager) WithNext(name string, err error) error {
	if err == nil {
		return nil
	}
	st, serr := m.State(name)
	if serr != nil || st.Shown.Next == "" {
		return err
	}
	return &NextError{Err: err, Next: st.Shown.Next}
}
