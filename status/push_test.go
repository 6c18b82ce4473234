package status

import (
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// TestTrackerJudges: the tracker's judgement of a member from its pane table and its own
// output reads, and the label it would show in herdr's sidebar.
func TestTrackerJudges(t *testing.T) {
	now := time.Now()
	tr := &track{panes: map[string]herdr.PaneInfo{
		"w1:p1": {PaneID: "w1:p1", AgentStatus: herdr.StatusBlocked},
		"w1:p2": {PaneID: "w1:p2", AgentStatus: herdr.StatusIdle},
		"w1:p3": {PaneID: "w1:p3", AgentStatus: herdr.StatusWorking},
		"w1:p4": {PaneID: "w1:p4", AgentStatus: herdr.StatusWorking},
		"w1:p5": {PaneID: "w1:p5", AgentStatus: herdr.StatusWorking},
	}, looks: map[string]*lookMemo{
		"w1:p4": {n: 2, at: now, prevAt: now.Add(-3 * time.Second), outChanged: true, outSince: now},
		"w1:p5": {n: 5, at: now, prevAt: now.Add(-3 * time.Second), outSince: now.Add(-200 * time.Second)},
	}}
	for _, c := range []struct {
		pane, live string
		want       Verdict
		known      bool
		label      string
	}{
		{"w1:p1", "", Blocked, true, "BLOCKED"},
		{"w1:p2", "idle", Idle, true, "IDLE"},
		{"w1:p3", "working", "", false, ""}, // busy, not read twice yet: no verdict
		{"w1:p4", "working", Working, true, "WORKING"},
		{"w1:p5", "working", Stalled, true, "STALLED 3m"},
		{"w1:p9", "working", Unknown, true, "UNKNOWN"}, // gone
	} {
		m, known := tr.memberLocked(RosterRow{ID: c.pane, PaneID: c.pane, LiveStatus: c.live}, now)
		if known != c.known || m.Verdict != c.want {
			t.Errorf("%s: %s known=%v, want %s known=%v (%+v)", c.pane, m.Verdict, known, c.want, c.known, m)
			continue
		}
		if known && labelOf(m) != c.label {
			t.Errorf("%s: label %q, want %q", c.pane, labelOf(m), c.label)
		}
	}
	for d, want := range map[time.Duration]string{45 * time.Second: "45s", 3 * time.Minute: "3m", 150 * time.Minute: "2h"} {
		if got := shortAge(d); got != want {
			t.Errorf("shortAge(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestTrackerHeard: Heard answers, by socket, when that herdr last answered the tracker or
// sent it an event (the supervisor counts it as a ping that answered); nothing for a socket
// no tracked fleet uses.
func TestTrackerHeard(t *testing.T) {
	t0 := time.Now()
	tk := &Tracker{fleets: map[string]*track{
		"a": {name: "a", socket: "/run/a.sock", heard: t0},
		"b": {name: "b", socket: "/run/b.sock"},
	}}
	if got := tk.Heard("/run/a.sock"); !got.Equal(t0) {
		t.Errorf("Heard(a) = %v, want %v", got, t0)
	}
	if got := tk.Heard("/run/b.sock"); !got.IsZero() {
		t.Errorf("Heard(b), never heard = %v", got)
	}
	if got := tk.Heard("/run/c.sock"); !got.IsZero() {
		t.Errorf("Heard of an untracked socket = %v", got)
	}
	tk.noteHeard(tk.fleets["b"])
	if got := tk.Heard("/run/b.sock"); got.Before(t0) {
		t.Errorf("Heard(b) after noteHeard = %v", got)
	}
}
