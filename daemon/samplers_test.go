package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/lifecycle/lifecycletest"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestVerdictSamplersReadNoProc (issue 28: resources are read only when
// someone looks): with a running fleet that a member.* notify rule
// watches, the notifier's member sampling (attention.sampleMembers) and
// the federation's presence sampling (sampleVerdicts) judge its members
// again and again, and the collector they share reads nothing from /proc
// for resources meanwhile (its read count stays 0); a status that shows
// them (Request.Resources), a cached answer's caller (AddResources) and a
// scrape (ResourcesNow) each do.
func TestVerdictSamplersReadNoProc(t *testing.T) {
	m := lifecycletest.OneFleet(t, `[[notify]]
on = ["member.blocked", "member.stalled"]
[[notify.sinks]]
type = "command"
command = ["true"]
`)
	lifecycletest.WriteRecord(t, m, lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: lifecycletest.Fleetd(t, "kb"), StartedAt: time.Now().Add(-time.Minute)})
	col := status.New(status.Options{Manager: m, Interval: 50 * time.Millisecond, FleetTimeout: 200 * time.Millisecond,
		Roster: func(context.Context, *registry.Fleet) ([]status.RosterRow, error) {
			return []status.RosterRow{{ID: "m1", PaneID: "w1:p1", State: "ready"}}, nil
		},
		Broker: func(context.Context, *registry.Fleet) (*status.Broker, error) { return nil, nil },
	})
	// run runs one sampler until it has judged kb's members for span (its
	// first sampling to its last), then stops it.
	run := func(name string, sampler func(context.Context), span time.Duration) {
		// first is read before the sampler starts: its first sampling can
		// come at once, and the federation's makes no second one for 30 s.
		var first time.Time
		if s, ok := col.Last("kb"); ok {
			first = s.At
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); sampler(ctx) }()
		defer func() { cancel(); <-done }()
		wait.For(t, 20*time.Second, name+" to judge kb's members", func() (bool, string) {
			s, ok := col.Last("kb")
			if !ok || !s.At.After(first) {
				return false, "not judged yet"
			}
			return s.At.Sub(first) >= span, fmt.Sprintf("judged at %v", s.At.Format(time.StampMilli))
		})
	}
	// The federation's sampler judges a fleet whose last report is missing
	// or older than 30 s: once here.
	run("the federation's sampler", func(ctx context.Context) { sampleVerdicts(ctx, col, m, col.IsLocal) }, 0)
	if n := col.ResourceReads(); n != 0 {
		t.Fatalf("%d reads of /proc for resources while the federation's sampler ran, want 0", n)
	}
	// The notifier's samples every 500 ms or so.
	a := &attention{m: m}
	run("the notifier's member sampling", func(ctx context.Context) { a.sampleMembers(ctx, col) }, 2*time.Second)
	if n := col.ResourceReads(); n != 0 {
		t.Fatalf("%d reads of /proc for resources while the notifier's member sampling ran, want 0", n)
	}
	rep, err := col.Collect(context.Background(), status.Request{Resources: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fleets[0].Resources == nil || col.ResourceReads() == 0 {
		t.Fatalf("a status asking for resources: %+v, %d reads", rep.Fleets[0].Resources, col.ResourceReads())
	}
	n := col.ResourceReads()
	col.AddResources(context.Background(), rep)
	if col.ResourceReads() <= n {
		t.Fatal("AddResources (a cached answer's caller) read nothing")
	}
	n = col.ResourceReads()
	if u := col.ResourcesNow(context.Background(), 20); len(u) != 1 || col.ResourceReads() <= n {
		t.Fatalf("a scrape: %+v, reads %d then %d", u, n, col.ResourceReads())
	}
}
