package federation

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
)

// BenchmarkCallRoundTrip measures the federation's own cost of a remote
// tool call (docs/FEDERATION.md "Remote tool calls"): alpha calls a handler on beta that
// answers at once, through the broker, with 1 and 16 concurrent callers.
// It reports p50/p99 latency and calls/s; the difference to a local call
// through the proxy is this figure minus nothing (the handler is free).
//
//	go test -run '^$' -bench CallRoundTrip -benchtime 2000x ./federation
func BenchmarkCallRoundTrip(b *testing.B) {
	brokertest.EachB(b, func(b *testing.B, br *brokertest.Broker) {
		for _, conc := range []int{1, 16} {
			b.Run(map[int]string{1: "c1", 16: "c16"}[conc], func(b *testing.B) {
				e := newFedEnv(b, br)
				alpha := e.newHost("alpha", hostOpts{noStart: true})
				beta := e.newHost("beta", hostOpts{noStart: true})
				trustEachOther(b, alpha, beta)
				beta.cfg.Calls = &fakeCalls{}
				alpha.start(b)
				beta.start(b)
				ctx := context.Background()
				args := json.RawMessage(`{"q":"whoami"}`)
				// warm up
				for i := 0; i < 20; i++ {
					if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", args, CallOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				var mu sync.Mutex
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				next := make(chan struct{}, b.N)
				for i := 0; i < b.N; i++ {
					next <- struct{}{}
				}
				close(next)
				for w := 0; w < conc; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range next {
							t0 := time.Now()
							if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", args, CallOptions{}); err != nil {
								b.Error(err)
								return
							}
							d := time.Since(t0)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
					b.ReportMetric(float64(len(lat))/el.Seconds(), "calls/s")
				}
			})
		}
	})
}
