package dashboard

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/status"
)

// BenchmarkDashboard measures the dashboard with 10 fleets × 8 members and
// the default periods (samples every 5 s, lifecycle rows every 250 ms,
// call counters every 5 s), in headless Chromium:
//
//   - first-render-ms: from navigation start to the page having drawn every
//     fleet and member (the page's own performance.now() when it has),
//     median over b.N loads;
//   - update-ms: from a fleet's state file changing to the page showing it,
//     without a reload (median and max of 10; includes waiting for the next
//     lifecycle read, at most 250 ms);
//   - page-KB: what a load fetches (page, script, style, icon, snapshot
//     with 60 samples of history per member), uncompressed;
//   - idle-cpu-%: CPU time of this process (the dashboard, its Run loops,
//     the test's status source and chromedp's client) over wall time with
//     one page open and nothing changing, FLEETMGR_BENCH_IDLE long (default
//     20s). The status source here is cheap: the cost of a real member
//     sampling is the status engine's (scripts/status-bench).
//
// Run: go test -run '^$' -bench Dashboard -benchtime 5x ./dashboard
func BenchmarkDashboard(b *testing.B) {
	browsertest.Require(b)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("fleet%02d", i))
	}
	w := newWorld(b, names...)
	vs := []status.Verdict{status.Working, status.Working, status.Stalled, status.Idle, status.Blocked, status.Working, status.Unknown, status.Idle}
	for _, n := range names {
		w.run(n)
		w.setMembers(n, members(vs...)...)
		for i := range 100 {
			w.appendLog(n, fmt.Sprintf("2026-05-02T10:%02d:%02dZ INFO %s: line %d of the log, about as long as fleetd's lines are", i/60, i%60, n, i))
		}
	}
	opt := w.options()
	opt.SampleEvery, opt.StateEvery, opt.CallsEvery = 0, 0, 0 // defaults
	s, ts := w.serve(opt)
	// History, as after five minutes with a page open: 60 samplings.
	for i := range 60 {
		rep, err := w.Status(b.Context(), nil)
		if err != nil {
			b.Fatal(err)
		}
		rep.GeneratedAt = time.Now().Add(time.Duration(i-60) * 5 * time.Second)
		s.hub.applyReport(rep, rep.GeneratedAt)
	}
	p := browsertest.Shared(b).NewPage(b)

	b.ResetTimer()
	var renders []float64
	for range b.N {
		if err := p.Navigate(ts.URL + "/"); err != nil {
			b.Fatal(err)
		}
		if _, err := p.WaitFor(`document.documentElement.dataset.rendered`, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		ms, err := browsertest.Eval[string](p, `document.documentElement.dataset.rendered`)
		if err != nil {
			b.Fatal(err)
		}
		v, _ := strconv.ParseFloat(ms, 64)
		renders = append(renders, v)
	}
	b.StopTimer()
	if t, err := browsertest.Eval[string](p, `JSON.stringify({nav: performance.getEntriesByType('navigation')[0].responseEnd,
		dcl: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
		res: performance.getEntriesByType('resource').map(e => [e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.responseEnd)])})`); err == nil {
		b.Logf("last load (ms since navigation): %s", t)
	}
	if n, err := browsertest.Eval[int](p, `document.querySelectorAll('[data-fleet] [data-member]').length`); err != nil || n != 80 {
		b.Fatalf("%d members drawn (%v)", n, err)
	}
	// What the page loads: itself, its assets and the snapshot (the
	// streams are not counted: they are open-ended).
	kb := 0.0
	for _, u := range []string{"/", "/app.js", "/app.css", "/favicon.svg", "/api/snapshot"} {
		_, body := get(b, ts.URL+u, nil)
		kb += float64(len(body)) / 1024
	}
	if _, err := p.WaitFor(`document.documentElement.dataset.live === 'true'`, 10*time.Second); err != nil {
		b.Fatal(err)
	}

	var updates []float64
	for i := range 10 {
		name := names[i]
		st := *w.state(name)
		st.Restarts++
		t0 := float64(time.Now().UnixNano()) / 1e6
		w.writeState(st)
		at, err := p.WaitFor(fmt.Sprintf(`document.querySelector('[data-fleet="%s"] .f-restarts').textContent.split(' ')[0] === '%d'`, name, st.Restarts), 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		updates = append(updates, at-t0)
	}

	idle := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLEETMGR_BENCH_IDLE")); err == nil && d > 0 {
		idle = d
	}
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(idle) // the measurement is CPU used over this idle time: nothing to wait for
	cpu := float64(cpuTime()-cpu0) / float64(time.Since(t0)) * 100

	b.ReportMetric(median(renders), "first-render-ms")
	b.ReportMetric(median(updates), "update-ms")
	b.ReportMetric(slices.Max(updates), "update-max-ms")
	b.ReportMetric(kb, "page-KB")
	b.ReportMetric(cpu, "idle-cpu-%")
	b.ReportMetric(0, "ns/op")
	if pr := p.Problems(); len(pr) > 0 {
		b.Errorf("page problems: %v", pr)
	}
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
