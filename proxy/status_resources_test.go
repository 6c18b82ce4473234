package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/lifecycle/lifecycletest"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestStatusCacheReadsResourcesOnlyForItsCaller (issue 28: resources are
// read only when someone looks): a fleetmgr_status asking for a cached
// answer (what `status`, `status --watch` and `top` ask serve for) first
// samples anew, reading resources for its caller; the samplings serve then
// keeps making in the background (keepWarm, for the next such call) read
// nothing from /proc for resources, however many there are; the next
// cached answer reads them for its caller, CPU percentage included.
func TestStatusCacheReadsResourcesOnlyForItsCaller(t *testing.T) {
	m := lifecycletest.OneFleet(t, "")
	lifecycletest.WriteRecord(t, m, lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: lifecycletest.Fleetd(t, "kb"), StartedAt: time.Now().Add(-time.Minute)})
	p := New(Options{Manager: m, Version: "test", Status: &status.Options{Interval: 50 * time.Millisecond, FleetTimeout: 200 * time.Millisecond,
		Roster: func(context.Context, *registry.Fleet) ([]status.RosterRow, error) {
			return []status.RosterRow{{ID: "m1", PaneID: "w1:p1", State: "ready"}}, nil
		},
		Broker: func(context.Context, *registry.Fleet) (*status.Broker, error) { return nil, nil },
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	warmCtx, stopWarm := context.WithCancel(ctx)
	warm := make(chan struct{})
	go func() { defer close(warm); p.keepWarm(warmCtx) }()
	defer func() { stopWarm(); <-warm }()
	cs := inMemoryClient(t, ctx, p)
	cached := func() status.Report {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: StatusTool, Arguments: map[string]any{"max_age_ms": 60_000}})
		if err != nil || res.IsError {
			t.Fatalf("fleetmgr_status: %v %+v", err, res)
		}
		js, _ := json.Marshal(res.StructuredContent)
		var rep status.Report
		if err := json.Unmarshal(js, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	col := p.StatusCollector()
	rep := cached()
	if len(rep.Fleets) != 1 || rep.Fleets[0].Resources == nil || col.ResourceReads() == 0 {
		t.Fatalf("the first call (sampled anew): %+v, %d reads", rep.Fleets, col.ResourceReads())
	}
	asked := col.ResourceReads()
	// keepWarm samples back to back (every interval, 50 ms) once asked.
	var first time.Time
	wait.For(t, 20*time.Second, "five background samplings", func() (bool, string) {
		p.verdicts.mu.Lock()
		at := p.verdicts.at
		p.verdicts.mu.Unlock()
		if first.IsZero() {
			first = at
		}
		return at.Sub(first) >= 5*50*time.Millisecond, fmt.Sprintf("last sampling %v", at.Format(time.StampMilli))
	})
	if n := col.ResourceReads(); n != asked {
		t.Fatalf("%d reads of /proc for resources while serve kept its cache warm, want %d (those of the call)", n, asked)
	}
	rep = cached()
	if !rep.Cached {
		t.Fatalf("the second call was not answered from the cache: %+v", rep)
	}
	if f := rep.Fleets[0]; f.Resources == nil || f.Resources.Procs < 1 || f.Resources.CPUPercent == nil {
		t.Fatalf("a cached answer without its resources: %+v", f.Resources)
	}
	if n := col.ResourceReads(); n <= asked {
		t.Fatalf("a cached answer read no resources (%d reads)", n)
	}
}
