package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

var storedPhases = []Phase{"", PhaseStopped, PhaseStarting, PhaseRunning, PhaseRestarting, PhaseStopping, PhaseFailed, PhaseUnknown}

// TestTransitionTable: the operator's verbs begin anywhere, a stop ends
// only a stop, and no stored phase becomes "unknown" (it is shown only).
func TestTransitionTable(t *testing.T) {
	for _, from := range storedPhases {
		for _, to := range []Phase{PhaseStarting, PhaseStopping, PhaseRestarting} {
			if !allowedTransition(from, to) {
				t.Errorf("%q → %s refused: an operator's verb must begin in any phase", from, to)
			}
		}
		if from != PhaseUnknown && allowedTransition(from, PhaseUnknown) {
			t.Errorf("%q → unknown allowed: unknown is shown, never stored", from)
		}
		if want := from == PhaseStopping || from == PhaseStopped; allowedTransition(from, PhaseStopped) != want {
			t.Errorf("%q → stopped: allowed %v, want %v (only a stop ends in stopped)", from, !want, want)
		}
	}
	for _, c := range []struct {
		from, to Phase
		ok       bool
	}{
		{PhaseStarting, PhaseRunning, true},
		{PhaseRestarting, PhaseRunning, true},
		{PhaseFailed, PhaseRunning, true},
		{PhaseStopping, PhaseRunning, true},
		{PhaseRunning, PhaseRunning, true},
		{PhaseStarting, PhaseFailed, true},
		{PhaseRestarting, PhaseFailed, true},
		{PhaseRunning, PhaseFailed, true},
		{PhaseFailed, PhaseFailed, true},
		{PhaseStopped, PhaseRunning, false}, // only through a start
		{"", PhaseRunning, false},
		{PhaseStopped, PhaseFailed, false}, // nothing ran to fail
		{PhaseStopping, PhaseFailed, false},
		{PhaseRunning, PhaseStopped, false}, // only through a stop
		{PhaseFailed, PhaseStopped, false},
		{PhaseUnknown, PhaseRunning, false},
	} {
		if got := allowedTransition(c.from, c.to); got != c.ok {
			t.Errorf("%q → %s: allowed %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}

func TestTransitionRecordsOrRefuses(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	st := &State{Name: "kb", Phase: PhaseStarting}
	if err := st.transition(PhaseRunning, "start: fleetd healthy", now); err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseRunning || st.PhaseReason != "start: fleetd healthy" || !st.PhaseAt.Equal(now) || st.PhaseAt.Location() != time.UTC {
		t.Fatalf("after starting → running: %+v", st)
	}
	err := st.transition(PhaseStopped, "a bug", now.Add(time.Second))
	var te *TransitionError
	if !errors.As(err, &te) || te.From != PhaseRunning || te.To != PhaseStopped {
		t.Fatalf("running → stopped: %v", err)
	}
	if !strings.Contains(err.Error(), "fleet kb") || !strings.Contains(err.Error(), "fleetmgr stop kb") {
		t.Errorf("refusal does not say what to do: %v", err)
	}
	if st.Phase != PhaseRunning || st.PhaseReason != "start: fleetd healthy" || !st.PhaseAt.Equal(now) {
		t.Fatalf("a refused transition changed the state: %+v", st)
	}
}

// TestTransitionTableInDocs: docs/ARCHITECTURE.md lists every transition
// the code allows, with its trigger, as a table row.
func TestTransitionTableInDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, e := range transitions {
		from := "`" + string(e.from) + "`"
		if e.from == anyPhase {
			from = "any"
		}
		row := fmt.Sprintf("| %s | `%s` | %s |", from, e.to, e.trigger)
		if !strings.Contains(doc, row) {
			t.Errorf("docs/ARCHITECTURE.md lacks the row\n%s", row)
		}
	}
}
