package status

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/lifecycle/lifecycletest"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestResourcesOnlyWhenAsked: a Collect that does not ask for Resources
// (serve's verdict-only samplings: the notifier's member rules,
// federation presence, the fleetmgr_status cache kept warm, the
// dashboard's warm-up) reads nothing from /proc for resources (the
// collector's read count stays 0) and reports none for a running fleet;
// one that asks (a status, a page) reads its fleetd's tree; AddResources
// (a cached answer's caller) and ResourcesNow (a scrape) read too, each
// once more at least.
func TestResourcesOnlyWhenAsked(t *testing.T) {
	st := lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: liveFleetd(t, "kb"), StartedAt: time.Now().Add(-time.Minute)}
	c := kbCollector(t, st)
	for range 3 {
		rep, err := c.Collect(context.Background(), Request{})
		if err != nil {
			t.Fatal(err)
		}
		if f := rep.Fleets[0]; f.State != "running" || f.Resources != nil {
			t.Fatalf("verdicts only: state %s, resources %+v", f.State, f.Resources)
		}
	}
	if n := c.ResourceReads(); n != 0 {
		t.Fatalf("%d reads of /proc for resources by verdict-only Collects, want 0", n)
	}
	rep, err := c.Collect(context.Background(), Request{Resources: true})
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Fleets[0]; f.Resources == nil || f.Resources.Procs < 1 {
		t.Fatalf("asked for resources: %+v (the test's fleetd runs)", f.Resources)
	}
	asked := c.ResourceReads()
	if asked == 0 {
		t.Fatal("a Collect asking for resources counted no read")
	}
	rep, err = c.Collect(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	rep.Fleets[0].Resources = nil
	c.AddResources(context.Background(), rep)
	if f := rep.Fleets[0]; f.Resources == nil || f.Resources.Procs < 1 {
		t.Fatalf("AddResources: %+v", f.Resources)
	}
	if n := c.ResourceReads(); n <= asked {
		t.Fatalf("AddResources: %d reads, want more than %d", n, asked)
	}
	asked = c.ResourceReads()
	if u := c.ResourcesNow(context.Background(), 20); len(u) != 1 || u[0].Usage.Procs < 1 {
		t.Fatalf("ResourcesNow: %+v", u)
	}
	if n := c.ResourceReads(); n <= asked {
		t.Fatalf("ResourcesNow: %d reads, want more than %d", n, asked)
	}
}

// TestAddResourcesCPUWithoutAnEarlierRead: an answer made from a
// verdict-only sampling gets its CPU percentage at once although nothing
// read /proc before: AddResources reads twice, cpuWindow apart (it takes
// at least that long), rather than leaving it out or waiting a second.
func TestAddResourcesCPUWithoutAnEarlierRead(t *testing.T) {
	st := lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: liveFleetd(t, "kb"), StartedAt: time.Now().Add(-time.Minute)}
	c := kbCollector(t, st)
	rep, err := c.Collect(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.AddResources(context.Background(), rep)
	took := time.Since(t0)
	f := rep.Fleets[0]
	if f.Resources == nil || f.Resources.CPUPercent == nil {
		t.Fatalf("no CPU percentage: %+v", f.Resources)
	}
	if took < cpuWindow {
		t.Errorf("took %v, less than the %v window its percentage covers", took, cpuWindow)
	}
	if n := c.ResourceReads(); n != 2 {
		t.Errorf("%d reads, want 2 (the window's start and end)", n)
	}
}

// kbCollector is a Collector over a fleets.toml of one fleet, kb (port
// 20001), whose record is st; its roster and broker probes answer
// nothing.
func kbCollector(t *testing.T, st lifecycle.State) *Collector {
	t.Helper()
	m := lifecycletest.OneFleet(t, "")
	lifecycletest.WriteRecord(t, m, st)
	c := New(Options{Manager: m, Interval: 100 * time.Millisecond, FleetTimeout: 100 * time.Millisecond,
		Roster: func(context.Context, *registry.Fleet) ([]RosterRow, error) { return nil, nil },
		Broker: func(context.Context, *registry.Fleet) (*Broker, error) { return nil, nil }})
	return c
}
