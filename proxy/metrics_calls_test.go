package proxy

import (
	"slices"
	"testing"
	"time"
)

// TestCallsGatherer: the dashboard's gatherer holds the forwarded calls'
// counter and latency histogram as recorded, and nothing a scrape of
// /metrics costs more for (fleet states, process, Go runtime).
func TestCallsGatherer(t *testing.T) {
	m := NewMetrics()
	m.observe("kb", "fleet_whoami", "ok", 3*time.Millisecond)
	m.observe("kb", "fleet_whoami", "timeout", time.Second)
	mfs, err := m.CallsGatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		if mf.GetName() == "fleetmgr_tool_call_duration_seconds" {
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
				t.Errorf("latency samples %d, want 2", n)
			}
		}
	}
	if want := []string{"fleetmgr_tool_call_duration_seconds", "fleetmgr_tool_calls_total"}; !slices.Equal(names, want) {
		t.Errorf("gathered %v, want %v", names, want)
	}
	all, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) <= len(mfs) {
		t.Errorf("the registry gathers %d families, the calls gatherer %d", len(all), len(mfs))
	}
}
