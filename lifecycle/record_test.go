package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// recorder collects the record changes a Manager tells.
type recorder struct {
	mu  sync.Mutex
	got []RecordChange
}

func (r *recorder) observe(c RecordChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, c)
}

func (r *recorder) changes() []RecordChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RecordChange(nil), r.got...)
}

// TestMutateIsTheOneWriter: Mutate writes a change, tells observers what it
// was (old, new, reason, origin), refuses a phase change the table does
// not allow, and neither writes nor tells when the function says
// ErrUnchanged or changes nothing.
func TestMutateIsTheOneWriter(t *testing.T) {
	m := checkFailConfig(t)
	ctx := context.Background()
	var r recorder
	remove := m.ObserveRecords(r.observe)
	st, err := m.Mutate(ctx, "kb", Change{Origin: "test"}, func(st *State) error {
		st.Desired = DesiredRunning
		return st.transition(PhaseStarting, "start begun", st.UpdatedAt)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseStarting || st.Desired != DesiredRunning {
		t.Fatalf("Mutate returned %+v", st)
	}
	got := r.changes()
	if len(got) != 1 {
		t.Fatalf("%d changes told, want 1: %+v", len(got), got)
	}
	c := got[0]
	if c.Fleet != "kb" || c.Old.Phase != PhaseStopped || c.New.Phase != PhaseStarting || c.Reason != "start begun" || c.Origin != "test" || !c.At.Equal(c.New.UpdatedAt) {
		t.Fatalf("change told: fleet %s, %s -> %s, reason %q, origin %q", c.Fleet, c.Old.Phase, c.New.Phase, c.Reason, c.Origin)
	}
	// The observer's copies are its own.
	st.LastError = "changed by the caller"
	if c.New.LastError != "" {
		t.Fatal("the observer's New shares memory with the record Mutate returned")
	}
	// ErrUnchanged: nothing written, nothing told, the record returned.
	st, err = m.Mutate(ctx, "kb", Change{}, func(st *State) error { st.Restarts = 9; return ErrUnchanged })
	if err != nil || st.Restarts != 0 || st.Phase != PhaseStarting {
		t.Fatalf("ErrUnchanged: %+v, %v", st, err)
	}
	// A phase set by hand along no edge of the table (starting -> stopped).
	_, err = m.Mutate(ctx, "kb", Change{}, func(st *State) error { st.Phase = PhaseStopped; return nil })
	var te *TransitionError
	if !errors.As(err, &te) || te.From != PhaseStarting || te.To != PhaseStopped {
		t.Fatalf("a change outside the table: err %v, want a TransitionError starting -> stopped", err)
	}
	// A write that changes nothing is not a change.
	if _, err := m.Mutate(ctx, "kb", Change{}, func(*State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(r.changes()); n != 1 {
		t.Fatalf("%d changes told after ErrUnchanged, a refused change and a no-op, want 1", n)
	}
	if cur, err := readState(m.statePath("kb"), "kb"); err != nil || cur.Phase != PhaseStarting || cur.Restarts != 0 {
		t.Fatalf("record after refused changes: %+v, %v", cur, err)
	}
	remove()
	remove()
	if _, err := m.Mutate(ctx, "kb", Change{}, func(st *State) error { st.Restarts = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(r.changes()); n != 1 {
		t.Fatalf("a removed observer was told: %d changes", n)
	}
}

// TestStartAndStopTellEveryChange: a start and a stop through the real
// stand-ins tell observers each phase they record, in order, with the
// caller's origin.
func TestStartAndStopTellEveryChange(t *testing.T) {
	m, _, _ := inProcessFleet(t, "1h")
	var r recorder
	defer m.ObserveRecords(r.observe)()
	ctx := context.Background()
	if _, err := m.Start(ctx, "kb", Options{Origin: "cli"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stop(ctx, "kb", Options{}); err != nil {
		t.Fatal(err)
	}
	var phases []Phase
	for _, c := range r.changes() {
		if c.Old.Phase != c.New.Phase {
			phases = append(phases, c.New.Phase)
		}
		want := "cli"
		if c.New.Phase == PhaseStopping || c.New.Phase == PhaseStopped {
			want = "stop"
		}
		if c.Origin != want {
			t.Errorf("change to %s told with origin %q, want %q", c.New.Phase, c.Origin, want)
		}
	}
	want := []Phase{PhaseStarting, PhaseRunning, PhaseStopping, PhaseStopped}
	if len(phases) != len(want) {
		t.Fatalf("phases told %v, want %v", phases, want)
	}
	for i := range want {
		if phases[i] != want[i] {
			t.Fatalf("phases told %v, want %v", phases, want)
		}
	}
	last := r.changes()[len(r.changes())-1]
	if last.Old.Fleetd == nil || last.New.Fleetd != nil || last.Reason != "stop: every process ended" {
		t.Fatalf("last change: fleetd %v -> %v, reason %q", last.Old.Fleetd, last.New.Fleetd, last.Reason)
	}
}
