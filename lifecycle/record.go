package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// One way to change a fleet's record (state.json): Mutate, or mutate when
// the caller holds the fleet's lock already. Each reads the record, hands
// a copy to the caller's function, checks the phase change it made
// against the phase table (fsm.go), writes the record atomically and tells
// the Manager's record observers (ObserveRecords). The write is
// writeRecord's (reserve.go: writeState, and the state dir's reserve on a
// full disk); neither has another caller outside tests.

// ErrUnchanged, returned by a Mutate function, leaves the record as it is:
// nothing is written and no observer is told. Mutate then returns the
// record it read and no error. It is how a writer says "the record no
// longer says what I acted on" (the fleet was stopped meanwhile, another
// process restarted it).
var ErrUnchanged = errors.New("record unchanged")

// Change says who changes a fleet's record and why, for the record
// observers (RecordChange.Origin, RecordChange.Reason).
type Change struct {
	// Origin is who makes the change: an operator's verb ("start",
	// "stop", "restart", or the caller's Options.Origin such as "cli",
	// "mcp", "dashboard", "remote") or "supervisor".
	Origin string
	// Reason says why, in one sentence; empty means the phase's new
	// reason (State.PhaseReason) when the change moved or re-recorded
	// the phase.
	Reason string
}

// RecordChange is one write of a fleet's record, as its observers get it.
// Old and New are copies the observer may keep (never written to by
// fleetmgr afterwards); their Shown is zero.
type RecordChange struct {
	Fleet string
	// Old is the record before the write: the zero record of a stopped
	// fleet (phase stopped, desired stopped) when there was none.
	Old *State
	// New is the record as written.
	New *State
	// Reason is why it changed (Change.Reason, else New.PhaseReason when
	// the phase or its reason changed; may be empty for a change of other
	// fields, e.g. the herdr server an interrupted start left recorded).
	Reason string
	// Origin is who changed it (Change.Origin).
	Origin string
	// At is when it was written (New.UpdatedAt, UTC).
	At time.Time
}

// RecordObserver is told of every change of a fleet's record this Manager
// writes (a write that leaves every field but UpdatedAt as it was is not a
// change). It is called after the record is on disk, while the fleet's
// lock is held, so for one fleet the calls come in the order of the
// writes; it must return quickly and must not call a Manager method that
// takes the same fleet's lock (Start, Stop, Restart, Mutate …). Changes
// written by another fleetmgr process (a CLI without a serve) are that
// process's Manager's to tell.
type RecordObserver func(RecordChange)

// observers holds a Manager's record observers.
type observers struct {
	mu   sync.Mutex
	next int
	fns  map[int]RecordObserver
}

// ObserveRecords adds fn to the observers of every record change this
// Manager writes (see RecordObserver) and returns its removal, which may
// be called more than once. A journal of fleet events subscribes here.
func (m *Manager) ObserveRecords(fn RecordObserver) (remove func()) {
	o := &m.observers
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fns == nil {
		o.fns = map[int]RecordObserver{}
	}
	id := o.next
	o.next++
	o.fns[id] = fn
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.fns, id)
	}
}

func (m *Manager) notify(c RecordChange) {
	o := &m.observers
	o.mu.Lock()
	fns := make([]RecordObserver, 0, len(o.fns))
	for i := range o.next {
		if fn, ok := o.fns[i]; ok {
			fns = append(fns, fn)
		}
	}
	o.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
}

// Mutate changes fleet name's record under the fleet's lock (waiting for
// it until ctx ends): it reads the record, calls fn with it, and, unless fn
// returns an error, checks the phase change fn made against the phase
// table (a change not in it is a *TransitionError and nothing is
// written), writes the record and tells the record observers. fn changes
// the phase only through State.transition. It returns the record as
// written, or as read when fn returned ErrUnchanged. Errors: the lock's
// (ctx ended), the record's (corrupt: the message says how to recover),
// fn's, the phase table's (each with a nil record), the write's (with
// the record as fn changed it, not on disk, for a caller that goes on to
// end what the record names).
func (m *Manager) Mutate(ctx context.Context, name string, by Change, fn func(*State) error) (*State, error) {
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.mutate(name, by, fn)
}

// mutate is Mutate for a caller that holds the fleet's lock.
func (m *Manager) mutate(name string, by Change, fn func(*State) error) (*State, error) {
	path := m.statePath(name)
	old, err := readState(path, name)
	if err != nil {
		return nil, err
	}
	st := old.clone()
	if err := fn(st); err != nil {
		if errors.Is(err, ErrUnchanged) {
			return old, nil
		}
		return nil, err
	}
	st.Name = name
	if st.Phase != old.Phase && !allowedTransition(old.Phase, st.Phase) {
		return nil, &TransitionError{Fleet: name, From: old.Phase, To: st.Phase, Reason: st.PhaseReason}
	}
	if err := m.writeRecord(path, st); err != nil {
		return st, err
	}
	if !sameRecord(old, st) {
		reason := by.Reason
		if reason == "" && (st.PhaseReason != old.PhaseReason || !st.PhaseAt.Equal(old.PhaseAt)) {
			reason = st.PhaseReason
		}
		m.notify(RecordChange{Fleet: name, Old: old, New: st.clone(), Reason: reason, Origin: by.Origin, At: st.UpdatedAt})
	}
	return st, nil
}

// clone is a deep copy of st's stored fields (Shown is dropped), made
// through its JSON form so a field added to State is copied too.
func (st *State) clone() *State {
	b, err := json.Marshal(st)
	c := &State{}
	if err == nil {
		err = json.Unmarshal(b, c)
	}
	if err != nil {
		// A State always encodes (it is what writeState writes); a copy
		// that shares its slices is the fallback for a bug.
		s := *st
		s.Shown = Shown{}
		return &s
	}
	return c
}

// sameRecord reports whether a and b store the same record but for
// UpdatedAt.
func sameRecord(a, b *State) bool {
	enc := func(s *State) []byte {
		c := *s
		c.UpdatedAt = time.Time{}
		out, _ := json.Marshal(&c)
		return out
	}
	return bytes.Equal(enc(a), enc(b))
}
