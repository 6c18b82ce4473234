package proxy

import (
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// TestVerdictCacheChanged: a verdict change pushed after a sampling makes that sampling stale
// for a cached answer when nothing pushed can replace it; the next sampling is good again.
func TestVerdictCacheChanged(t *testing.T) {
	c := newVerdictCache()
	rows := []status.Fleet{{Name: "kb", MemberCount: -1, PID: 42}}
	c.store(&status.Report{GeneratedAt: time.Now(), Fleets: []status.Fleet{{Name: "kb", PID: 42, MemberCount: 1}}}, time.Now().Add(-time.Second))
	if rep := c.get(time.Minute, rows, nil); rep == nil || !rep.Cached || rep.Fleets[0].MemberCount != 1 {
		t.Fatalf("fresh sampling not answered: %+v", rep)
	}
	c.changedNow()
	if rep := c.get(time.Minute, rows, nil); rep != nil {
		t.Fatalf("sampling older than a verdict change answered: %+v", rep)
	}
	// A sampling that began before the change and ended after it may lack the change.
	began := time.Now().Add(-time.Second)
	c.store(&status.Report{GeneratedAt: time.Now().Add(time.Millisecond), Fleets: []status.Fleet{{Name: "kb", PID: 42, MemberCount: 3}}}, began)
	if rep := c.get(time.Minute, rows, nil); rep != nil {
		t.Fatalf("sampling that began before a verdict change answered: %+v", rep)
	}
	c.store(&status.Report{GeneratedAt: time.Now().Add(2 * time.Millisecond), Fleets: []status.Fleet{{Name: "kb", PID: 42, MemberCount: 2}}}, time.Now().Add(time.Millisecond))
	if rep := c.get(time.Minute, rows, nil); rep == nil || rep.Fleets[0].MemberCount != 2 {
		t.Fatalf("sampling after the change not answered: %+v", rep)
	}
}

// TestVerdictCacheOverlay: a verdict change pushed after a sampling is answered from the
// sampling with the pushed verdicts over it (members' verdicts, reasons, summary; the
// sampling's other fields kept), not by sampling anew; a fleet not followed from the push
// keeps its sampled verdicts; a pushed fleet that cannot say now, or knows other member panes
// than the sampling, makes the caller sample anew.
func TestVerdictCacheOverlay(t *testing.T) {
	c := newVerdictCache()
	rows := []status.Fleet{{Name: "kb", MemberCount: -1, PID: 42}, {Name: "sx", MemberCount: -1, PID: 43}}
	idle := func(id, pane string) status.Member {
		return status.Member{ID: id, PaneID: pane, AgentStatus: "idle", Verdict: status.Idle, PaneAgeS: new(float64)}
	}
	c.store(&status.Report{GeneratedAt: time.Now(), Fleets: []status.Fleet{
		{Name: "kb", PID: 42, MemberCount: 2, Members: []status.Member{idle("m0", "w1:p1"), idle("m1", "w1:p2")}, Summary: map[status.Verdict]int{status.Idle: 2}},
		{Name: "sx", PID: 43, MemberCount: 1, Members: []status.Member{idle("s0", "w1:p1")}, Summary: map[status.Verdict]int{status.Idle: 1}},
	}}, time.Now().Add(-time.Second))
	c.changedNow()
	state := "ok"
	pushed := func(fleet string) (map[string]status.Member, bool, bool) {
		if fleet != "kb" {
			return nil, false, false
		}
		m := map[string]status.Member{
			"w1:p1": {ID: "m0", PaneID: "w1:p1", AgentStatus: "idle", Verdict: status.Idle},
			"w1:p2": {ID: "m1", PaneID: "w1:p2", AgentStatus: "blocked", Verdict: status.Blocked, Reason: "herdr agent_status blocked: waiting for a human"},
		}
		switch state {
		case "resync":
			return nil, true, false
		case "spawned":
			m["w1:p3"] = status.Member{ID: "m2", PaneID: "w1:p3", Verdict: status.Idle}
		}
		return m, true, true
	}
	rep := c.get(time.Minute, rows, pushed)
	if rep == nil || !rep.Cached {
		t.Fatalf("a pushed change over a sampling was not answered from it: %+v", rep)
	}
	kb, sx := rep.Fleets[0], rep.Fleets[1]
	if m := kb.Members[1]; m.Verdict != status.Blocked || m.AgentStatus != "blocked" || m.Reason == "" || m.PaneAgeS == nil {
		t.Errorf("kb/m1 = %+v: want the pushed BLOCKED over the sampled member (its pane age kept)", m)
	}
	if kb.Summary[status.Blocked] != 1 || kb.Summary[status.Idle] != 1 {
		t.Errorf("kb summary %v", kb.Summary)
	}
	if sx.Members[0].Verdict != status.Idle || sx.Summary[status.Idle] != 1 {
		t.Errorf("sx (not pushed) = %+v", sx)
	}
	for _, st := range []string{"resync", "spawned"} {
		state = st
		if rep := c.get(time.Minute, rows, pushed); rep != nil {
			t.Errorf("%s: answered from the sampling: %+v", st, rep.Fleets[0].Members)
		}
	}
}
