package lifecycle

import (
	"fmt"
	"time"
)

// The fleet state machine (docs/ARCHITECTURE.md "Lifecycle of one fleet",
// "States and transitions"). A fleet's stored phase (State.Phase, in
// state.json) changes only through State.transition, along an edge of
// transitions below; each change records why and when (State.PhaseReason,
// State.PhaseAt). What a reader is shown (State.Shown, computed by
// Manager.State) is derived from the stored phase and what is alive now
// (shown.go): a phase is never rewritten for display. The supervisor's
// decisions are in decide.go.

// Phase is a fleet's lifecycle phase: stored in its state.json, or shown to
// operators (State.Shown.Phase).
type Phase string

// The phases a fleet moves through.
const (
	// PhaseStopped: nothing of the fleet runs (a stop completed, or it
	// never started).
	PhaseStopped Phase = "stopped"
	// PhaseStarting: an operator's start is under way (or was interrupted:
	// shown as failed once nobody holds the fleet's lock).
	PhaseStarting Phase = "starting"
	// PhaseRunning: fleetd answered /healthz with the fleet's name.
	PhaseRunning Phase = "running"
	// PhaseRestarting: a restart is decided (the supervisor's, due at
	// NextRestartAt, or an operator's) or its start is under way.
	PhaseRestarting Phase = "restarting"
	// PhaseStopping: a stop is under way (or was interrupted).
	PhaseStopping Phase = "stopping"
	// PhaseFailed: a start failed, the supervisor found a crash loop, or
	// (shown only) a fleet is down with nothing bringing it back.
	PhaseFailed Phase = "failed"
	// PhaseUnknown is shown, never stored, for a fleet whose state.json
	// cannot be read (corrupt); `fleetmgr stop` still stops it by
	// discovery.
	PhaseUnknown Phase = "unknown"
	// PhaseStale is shown, never stored, for a fleet recorded running
	// whose recorded fleetd pid names a process that is not the fleet's
	// (pid reused, another boot, another executable, no FLEET_NAME of the
	// fleet: identity.go); Shown.LastError says why. Nothing is signalled.
	PhaseStale Phase = "stale"
)

// anyPhase, as the source of an edge, matches every stored phase (also the
// empty one of a record that has none).
const anyPhase Phase = "*"

// edge is one allowed change of a fleet's stored phase and what makes it.
type edge struct {
	from, to Phase
	trigger  string // who makes the change and when, for the docs
}

// transitions are the only changes of a stored phase fleetmgr makes. A
// change to the phase a record already has is always allowed (it records a
// new reason and time). The operator's verbs begin in any phase: they are
// the ways out of every state.
var transitions = []edge{
	{anyPhase, PhaseStarting, "`fleetmgr start` (also inside `fleetmgr restart`) records the fleet wanted running before anything runs"},
	{anyPhase, PhaseStopping, "`fleetmgr stop` records the fleet wanted stopped before it signals anything; or the supervisor, when fleetd exited and the fleet's restart policy does not restart it"},
	{anyPhase, PhaseRestarting, "`fleetmgr restart` begins; or the supervisor records a failure of fleetd (exit, health, herdr session) with its due time"},
	{PhaseStarting, PhaseRunning, "start: fleetd answers /healthz with the fleet's name and herdr answers ping; or start or the supervisor adopts the fleetd an interrupted start spawned, or finds the recorded one healthy"},
	{PhaseRestarting, PhaseRunning, "a restart's start completes; or the supervisor adopts the fleetd an interrupted restart spawned, or finds the recorded one healthy"},
	{PhaseStarting, PhaseFailed, "start: a step failed; what the start started is rolled back"},
	{PhaseRestarting, PhaseFailed, "a restart's start failed, or fleetd's session survived SIGKILL; or the supervisor found a crash loop"},
	{PhaseRunning, PhaseFailed, "start: the lead failed to launch (rolled back); or the supervisor found a crash loop"},
	{PhaseFailed, PhaseRunning, "start, or the supervisor, finds the fleet's fleetd alive and healthy (it outlived a rollback, or an interrupted start spawned it)"},
	{PhaseStopping, PhaseRunning, "start finds the fleetd an interrupted stop left alive and healthy"},
	{PhaseStopping, PhaseStopped, "stop: every process of the fleet ended (also the supervisor's, for a restart policy that does not restart)"},
}

// allowedTransition reports whether the stored phase may change from from to to.
func allowedTransition(from, to Phase) bool {
	if from == to {
		return true
	}
	for _, e := range transitions {
		if e.to == to && (e.from == from || e.from == anyPhase) {
			return true
		}
	}
	return false
}

// TransitionError is a change of stored phase the table does not allow: a
// bug in fleetmgr, or a state file edited by hand. The state is left as it
// was.
type TransitionError struct {
	Fleet    string
	From, To Phase
	Reason   string
}

func (e *TransitionError) Error() string {
	from := e.From
	if from == "" {
		from = "(none)"
	}
	return fmt.Sprintf("fleet %s: its recorded phase cannot change from %s to %s (%s); this is a bug in fleetmgr or an edited state.json: `fleetmgr stop %s` resets it",
		e.Fleet, from, e.To, e.Reason, e.Fleet)
}

// settlePhase gives a record that stores no phase (none recorded yet, or
// a record older than phases) the phase it is in: running when it records
// a fleetd (what is shown is then derived from whether it is alive, as for
// any record), else stopped; never "", which no reader expects
// (docs/status-schema.json's state enum). A record with a phase is left
// as it is. readState calls it on every record it returns; it is, beside
// transition, the only code that sets State.Phase.
func (st *State) settlePhase() {
	if st.Phase != "" {
		return
	}
	st.Phase = PhaseStopped
	if st.Fleetd != nil {
		st.Phase = PhaseRunning
	}
}

// transition changes st's stored phase to to, recording reason and now
// (UTC) in PhaseReason and PhaseAt, when transitions allows it (a change
// to running also clears the count of failed starts, StartRetries);
// otherwise
// it changes nothing and returns a *TransitionError. It is the only place
// that changes a stored State.Phase (settlePhase gives one to a record
// that has none; tests may build states directly). It is called inside a
// Manager.Mutate function, which checks the change against the table
// again and writes st.
func (st *State) transition(to Phase, reason string, now time.Time) error {
	if !allowedTransition(st.Phase, to) {
		return &TransitionError{Fleet: st.Name, From: st.Phase, To: to, Reason: reason}
	}
	st.Phase, st.PhaseReason, st.PhaseAt = to, reason, now.UTC()
	if to == PhaseRunning {
		// Running means fleetd answered /healthz: the starts that failed
		// in a row before it are over (start_retries counts afresh).
		st.StartRetries, st.StartRetriesExhausted = 0, false
	}
	return nil
}
