package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppend reports what a caller pays to journal one event (the
// p50 of Append, the figure issue 25 bounds at 20 µs) and what the writer
// pays per event committed (one batch's commit time over its size, p50),
// with the writer running.
func BenchmarkAppend(b *testing.B) {
	j, err := Open(Options{Path: filepath.Join(b.TempDir(), "j.db"), Buffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.Run(ctx) })
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		j.Append(Event{Fleet: "kb", Kind: KindCall, Outcome: "ok", Data: map[string]any{"tool": "search", "duration_ms": 3.2, "result_bytes": 812}})
		lat = append(lat, time.Since(t0))
		if i%256 == 255 {
			time.Sleep(time.Millisecond) // a steady stream, not a flood the buffer drops
		}
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "append-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "append-p99-µs")

	// The writer's side: batches of 64 committed (fsync included).
	j2, err := Open(Options{Path: filepath.Join(b.TempDir(), "w.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer j2.Close()
	var per []time.Duration
	for range 50 {
		batch := make([]Event, 64)
		for i := range batch {
			batch[i] = Event{Time: time.Now(), Fleet: "kb", Kind: KindCall, Outcome: "ok"}
		}
		t0 := time.Now()
		j2.write(batch)
		per = append(per, time.Since(t0)/64)
	}
	slices.Sort(per)
	b.ReportMetric(float64(per[len(per)/2].Nanoseconds())/1e3, "commit-per-event-p50-µs")
}

// BenchmarkLastOfOneFleet fills a journal with 1,000,000 events of 20
// fleets and reports how long the last 1,000 events of one fleet take to
// read (issue 25: ≤ 50 ms). The log is committed as Run commits it (past
// maxPending events), so the first read also commits what the log still
// holds, as a reader of serve's journal may.
func BenchmarkLastOfOneFleet(b *testing.B) {
	j, err := Open(Options{Path: filepath.Join(b.TempDir(), "j.db"), MaxBytes: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	t0 := time.Now().Add(-24 * time.Hour)
	const total, per = 1_000_000, 5000
	for n := 0; n < total; n += per {
		batch := make([]Event, per)
		for i := range batch {
			batch[i] = Event{Time: t0.Add(time.Duration(n+i) * time.Millisecond * 50), Fleet: fmt.Sprintf("fleet%02d", (n+i)%20),
				Kind: KindCall, Outcome: "ok", Data: map[string]any{"tool": "search", "duration_ms": 3.2}}
		}
		j.write(batch)
		if j.pendingLen() >= maxPending { // as Run does: the log is committed past maxPending
			j.checkpoint()
		}
	}
	if w := j.Stats().Written; w != total {
		b.Fatalf("written %d", w)
	}
	b.ResetTimer()
	var worst time.Duration
	for b.Loop() {
		t := time.Now()
		ev, err := j.Query(Query{Fleets: []string{"fleet07"}, Limit: 1000})
		worst = max(worst, time.Since(t))
		if err != nil || len(ev) != 1000 || ev[999].Fleet != "fleet07" {
			b.Fatalf("%d events, %v", len(ev), err)
		}
	}
	b.ReportMetric(float64(worst.Microseconds())/1e3, "worst-ms")
}
