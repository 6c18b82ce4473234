package daemon

import (
	"context"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

// verdictSampleAge is how old the status collector's last report of a
// running fleet may grow before the federation's sampler judges its
// members again (presence carries the counts with their age).
const verdictSampleAge = 30 * time.Second

// sampleVerdicts keeps the verdict counts presence announces from going
// stale while no operator asks for status: every 5 s it looks for running
// local fleets whose last report (status.Collector.Last) is missing,
// older than verdictSampleAge, or older than the fleet's current run, and
// collects a status of those (one Collect at a time: about one [status]
// interval). It never samples per heartbeat. Runs until ctx ends.
func sampleVerdicts(ctx context.Context, col *status.Collector, m *lifecycle.Manager, isLocal func(string) bool) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		var due []string
		now := time.Now()
		for _, n := range m.Names() {
			f, err := m.Fleet(n)
			if err != nil || !isLocal(f.Host) {
				continue
			}
			st, err := m.State(n)
			if err != nil || st.Shown.Phase != lifecycle.PhaseRunning {
				continue
			}
			if s, ok := col.Last(n); !ok || now.Sub(s.At) > verdictSampleAge || s.At.Before(st.StartedAt) {
				due = append(due, n)
			}
		}
		if len(due) > 0 {
			_, _ = col.Collect(ctx, status.Request{Fleets: due})
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
