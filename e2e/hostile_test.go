package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// The hostile pass's open points on issue 24 (docs: /work/notes CLOSING
// "A hostile pass at the end"): each test drives the real binary.

// TestEventsUnknownFleet: `fleetmgr events NAME` of a name the config
// does not define and the journal never saw is refused (exit 2) with the
// fleets the config defines, as the other verbs refuse it; a fleet
// removed from the config whose events the journal holds is still shown.
func TestEventsUnknownFleet(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "gone"})
	for _, args := range [][]string{{"events", "nofleet"}, {"events", "kb", "nofleet"}} {
		r := e.Run(args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, `unknown fleet "nofleet"`) || !strings.Contains(r.Stderr, "gone, kb") {
			t.Errorf("%v without serve: exit %d, want 2 naming nofleet and the fleets gone, kb:\n%s%s", args, r.Code, r.Stdout, r.Stderr)
		}
	}
	if r := e.Run("events", "kb"); r.Code != 0 {
		t.Errorf("events kb (defined, no events yet): exit %d\n%s", r.Code, r.Stderr)
	}

	serve := e.StartServe()
	e.MustRun("start", "gone")
	e.MustRun("stop", "--yes", "gone")
	var before string
	if !svWait(10*time.Second, func() bool {
		before = e.MustRun("events", "gone").Stdout
		return strings.Contains(before, "control")
	}) {
		t.Fatalf("no control event for gone's start and stop:\n%s\nserve log:\n%s", before, serve.Log())
	}
	editConfig(t, e, func(s string) string { return dropFleet(s, "gone") })
	e.MustRun("reload")
	r := e.Run("events", "gone")
	if r.Code != 0 || !strings.Contains(r.Stdout, "control") {
		t.Errorf("events of a removed fleet with history: exit %d, want 0 and its events:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = e.Run("events", "nofleet")
	if r.Code != 2 || !strings.Contains(r.Stderr, `unknown fleet "nofleet"`) || !strings.Contains(r.Stderr, "defines kb") {
		t.Errorf("events nofleet through serve: exit %d, want 2 naming kb:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
