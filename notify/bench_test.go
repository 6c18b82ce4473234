package notify

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// BenchmarkLatencyAfterHold reports the time from the end of a state's
// hold to its notification reaching a local webhook receiver (issue 25:
// p50 ≤ 1 s), over b.N episodes with a 200 ms hold.
func BenchmarkLatencyAfterHold(b *testing.B) {
	got := make(chan time.Time, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- time.Now() }))
	defer srv.Close()
	b.Setenv("BENCH_HOOK_URL", srv.URL)
	const hold = 200 * time.Millisecond
	rule := registry.Notify{Name: "r", On: []string{"member.blocked"}, Hold: registry.Duration{Duration: hold},
		Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "BENCH_HOOK_URL", Preset: "json"}}}
	n := New(Options{Rules: func() []registry.Notify { return []registry.Notify{rule} }})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		member := fmt.Sprintf("m%d", i)
		t0 := time.Now()
		n.Observe("kb", []string{"member.blocked"}, map[Subject]string{{"member.blocked", member}: ""})
		at := <-got
		lat = append(lat, at.Sub(t0.Add(hold)))
		n.Observe("kb", []string{"member.blocked"}, nil) // resolved
		<-got
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "after-hold-p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1e3, "after-hold-max-ms")
}
