package dashboard

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// The proxy's metric families PrometheusCalls reads (proxy/metrics.go).
const (
	metricCalls    = "fleetmgr_tool_calls_total"
	metricDuration = "fleetmgr_tool_call_duration_seconds"
)

// PrometheusCalls adapts a Prometheus gatherer of the proxy's call metrics
// (proxy.Metrics.CallsGatherer, or the whole proxy.Metrics.Registry) to a
// CallsFunc: per fleet label, Calls and Buckets from
// fleetmgr_tool_call_duration_seconds (its sample count and cumulative
// buckets, +Inf added), Errors from fleetmgr_tool_calls_total summed over
// every outcome but "ok". It gathers all g holds, so the dashboard reads
// it once per CallsEvery, and only while a page is open.
func PrometheusCalls(g prometheus.Gatherer) CallsFunc {
	return func() (map[string]CallCounts, error) {
		mfs, err := g.Gather()
		if err != nil && len(mfs) == 0 {
			return nil, err
		}
		out := map[string]CallCounts{}
		label := func(ls interface {
			GetName() string
			GetValue() string
		}, name string) bool {
			return ls.GetName() == name
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case metricDuration:
				for _, m := range mf.GetMetric() {
					fleet := ""
					for _, lp := range m.GetLabel() {
						if label(lp, "fleet") {
							fleet = lp.GetValue()
						}
					}
					h := m.GetHistogram()
					if fleet == "" || h == nil {
						continue
					}
					c := out[fleet]
					c.Calls = h.GetSampleCount()
					c.Buckets = make([]Bucket, 0, len(h.GetBucket())+1)
					for _, b := range h.GetBucket() {
						c.Buckets = append(c.Buckets, Bucket{UpperBound: b.GetUpperBound(), Count: b.GetCumulativeCount()})
					}
					if n := len(c.Buckets); n == 0 || !math.IsInf(c.Buckets[n-1].UpperBound, 1) {
						c.Buckets = append(c.Buckets, Bucket{UpperBound: math.Inf(1), Count: h.GetSampleCount()})
					}
					out[fleet] = c
				}
			case metricCalls:
				for _, m := range mf.GetMetric() {
					fleet, outcome := "", ""
					for _, lp := range m.GetLabel() {
						switch {
						case label(lp, "fleet"):
							fleet = lp.GetValue()
						case label(lp, "outcome"):
							outcome = lp.GetValue()
						}
					}
					if fleet == "" || outcome == "ok" || m.GetCounter() == nil {
						continue
					}
					c := out[fleet]
					c.Errors += uint64(m.GetCounter().GetValue())
					out[fleet] = c
				}
			}
		}
		return out, nil
	}
}

// ManagerRestartTimes adapts a *lifecycle.Manager to
// Options.RestartTimes: the restart times in the fleet's state file.
func ManagerRestartTimes(m *lifecycle.Manager) func(string) []time.Time {
	return func(name string) []time.Time {
		st, err := m.State(name)
		if err != nil {
			return nil
		}
		return st.RestartTimes
	}
}

// bucketDelta is one period's histogram: cur minus prev bucket by bucket
// when both have the same bounds; cur itself when prev is empty or has
// other bounds (a new daemon, other buckets).
func bucketDelta(prev, cur []Bucket) []Bucket {
	if len(prev) != len(cur) {
		return cur
	}
	out := make([]Bucket, len(cur))
	for i := range cur {
		if prev[i].UpperBound != cur[i].UpperBound || prev[i].Count > cur[i].Count {
			return cur
		}
		out[i] = Bucket{UpperBound: cur[i].UpperBound, Count: cur[i].Count - prev[i].Count}
	}
	return out
}

// quantile estimates the q-quantile (0 ≤ q ≤ 1) of a cumulative histogram
// the way Prometheus' histogram_quantile does: find the bucket holding
// rank q×total and interpolate linearly inside it, the first bucket's
// lower bound being 0; a rank in the +Inf bucket gives the highest finite
// bound. ok is false when the histogram holds no observation.
func quantile(q float64, buckets []Bucket) (v float64, ok bool) {
	n := len(buckets)
	if n == 0 || buckets[n-1].Count == 0 || math.IsNaN(q) {
		return 0, false
	}
	total := float64(buckets[n-1].Count)
	rank := math.Min(math.Max(q, 0), 1) * total
	i := 0
	for i < n-1 && float64(buckets[i].Count) < rank {
		i++
	}
	if math.IsInf(buckets[i].UpperBound, 1) {
		if i == 0 {
			return 0, false // only a +Inf bucket: no finite bound to give
		}
		return buckets[i-1].UpperBound, true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = buckets[i-1].UpperBound, float64(buckets[i-1].Count)
	}
	upper := buckets[i].UpperBound
	if i == 0 && upper <= 0 {
		return upper, true
	}
	in := float64(buckets[i].Count) - below
	if in <= 0 {
		return upper, true
	}
	return lower + (upper-lower)*(rank-below)/in, true
}
