package proxy

import (
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// TestVerdictCacheChanged: a verdict change pushed after a sampling makes that sampling stale
// for a cached answer; the next sampling is good again.
func TestVerdictCacheChanged(t *testing.T) {
	c := newVerdictCache()
	rows := []status.Fleet{{Name: "kb", MemberCount: -1, PID: 42}}
	c.store(&status.Report{GeneratedAt: time.Now(), Fleets: []status.Fleet{{Name: "kb", PID: 42, MemberCount: 1}}})
	if rep := c.get(time.Minute, rows); rep == nil || !rep.Cached || rep.Fleets[0].MemberCount != 1 {
		t.Fatalf("fresh sampling not answered: %+v", rep)
	}
	c.changedNow()
	if rep := c.get(time.Minute, rows); rep != nil {
		t.Fatalf("sampling older than a verdict change answered: %+v", rep)
	}
	c.store(&status.Report{GeneratedAt: time.Now().Add(time.Millisecond), Fleets: []status.Fleet{{Name: "kb", PID: 42, MemberCount: 2}}})
	if rep := c.get(time.Minute, rows); rep == nil || rep.Fleets[0].MemberCount != 2 {
		t.Fatalf("sampling after the change not answered: %+v", rep)
	}
}
