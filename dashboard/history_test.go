package dashboard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/journal"
	poll "github.com/fleetmgr/fleetmgr/testbed/wait" // "wait" is browser_test.go's page helper
)

// runJournal opens a real journal in a temp dir with its writer running
// until the test ends.
func runJournal(t testing.TB) *journal.Journal {
	t.Helper()
	j, err := journal.Open(journal.Options{Path: filepath.Join(t.TempDir(), "journal.db")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return j
}

// appendWritten appends evs and waits until the journal committed them.
func appendWritten(t testing.TB, j *journal.Journal, evs ...journal.Event) {
	t.Helper()
	want := j.Stats().Written + uint64(len(evs))
	for _, e := range evs {
		j.Append(e)
	}
	poll.For(t, 10*time.Second, fmt.Sprintf("%d events written", want), func() (bool, string) {
		w := j.Stats().Written
		return w >= want, fmt.Sprintf("written %d", w)
	})
}

func call(fleet string, at time.Time, outcome string, ms float64) journal.Event {
	return journal.Event{Time: at, Fleet: fleet, Kind: journal.KindCall, Outcome: outcome, Detail: "fleet_whoami",
		Data: map[string]any{"tool": "fleet_whoami", "duration_ms": ms, "result_bytes": 10}}
}

func restart(fleet string, at time.Time, detail string) journal.Event {
	return journal.Event{Time: at, Fleet: fleet, Kind: journal.KindRestart, Outcome: "running", Detail: detail}
}

// TestHistoryFromJournal: readHistory bins each fleet's calls into the
// periods ending at now (calls, errors, p50 from the durations), starting
// at the first period any fleet had a call in; restarts older than
// RestartSpan and other fleets' events are left out; the newest perFleet
// calls are read at most.
func TestHistoryFromJournal(t *testing.T) {
	j := runJournal(t)
	now := time.Now().UTC().Truncate(time.Second)
	p := 5 * time.Second
	appendWritten(t, j,
		call("kb", now.Add(-62*time.Second), "tool_error", 9), // period ending now−60s
		call("kb", now.Add(-12*time.Second), "ok", 2),         // ending now−10s
		call("kb", now.Add(-11*time.Second), "ok", 6),
		call("kb", now.Add(-10*time.Second), "ok", 4),
		call("kb", now.Add(-time.Second), "timeout", 30), // ending now
		call("kb", now.Add(-10*time.Minute), "ok", 1),    // before the window
		call("other", now.Add(-3*time.Second), "ok", 1),  // not shown
		restart("kb", now.Add(-2*time.Hour), "old"),
		restart("kb", now.Add(-40*time.Minute), "supervisor: fleetd exited; ended 3 members"),
		restart("docs", now.Add(-5*time.Minute), "operator: restart; ended 0 members"),
		journal.Event{Time: now.Add(-4 * time.Minute), Fleet: "kb", Kind: journal.KindPhase, Outcome: "restarting"},
	)
	h, err := readHistory(j, []string{"docs", "kb"}, now, restartsSince(now, time.Time{}), p, 60, 1000, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.times) != 13 || !h.times[0].Equal(now.Add(-60*time.Second)) || !h.times[12].Equal(now) {
		t.Fatalf("points %d, from %v to %v; want 13 from now−60s to now", len(h.times), h.times[0].Sub(now), h.times[len(h.times)-1].Sub(now))
	}
	kb, docs := h.calls["kb"], h.calls["docs"]
	if fmt.Sprint(kb.Calls) != "[1 0 0 0 0 0 0 0 0 0 3 0 1]" || fmt.Sprint(kb.Errors) != "[1 0 0 0 0 0 0 0 0 0 0 0 1]" {
		t.Fatalf("kb calls %v errors %v", kb.Calls, kb.Errors)
	}
	if deref(kb.P50MS[10]) != 4.0 || deref(kb.P50MS[0]) != 9.0 || kb.P50MS[5] != nil {
		t.Fatalf("kb p50 %v %v %v", deref(kb.P50MS[0]), deref(kb.P50MS[5]), deref(kb.P50MS[10]))
	}
	if len(docs.Calls) != 13 || fmt.Sprint(docs.Calls) != "[0 0 0 0 0 0 0 0 0 0 0 0 0]" {
		t.Fatalf("docs calls %v", docs.Calls)
	}
	if r := h.restarts["kb"]; len(r) != 1 || r[0].Reason != "supervisor: fleetd exited; ended 3 members" || r[0].seq == 0 {
		t.Fatalf("kb restarts %+v", r)
	}
	if r := h.restarts["docs"]; len(r) != 1 || !r[0].At.Equal(now.Add(-5*time.Minute)) {
		t.Fatalf("docs restarts %+v", r)
	}
	// The newest two calls only: the window starts where they do.
	h, _ = readHistory(j, []string{"kb"}, now, restartsSince(now, time.Time{}), p, 60, 2, 20)
	if len(h.times) != 3 || fmt.Sprint(h.calls["kb"].Calls) != "[1 0 1]" {
		t.Fatalf("newest 2: %d points, %v", len(h.times), h.calls["kb"].Calls)
	}
	// Nothing called: no points.
	if h, _ = readHistory(j, []string{"docs"}, now, restartsSince(now, time.Time{}), p, 60, 1000, 20); len(h.times) != 0 {
		t.Fatalf("no calls, yet %d points", len(h.times))
	}
}

// TestBrowserHistoryFromJournal (issue 25): a page opened on a dashboard
// with a journal shows, in its first paint, the calls and restarts the
// journal holds from before it opened (as after a serve restart: this
// Server saw none of them); a restart journalled while it is open is added
// at once, without a reload, and once. Calls counted by both the journal
// and the counters (as serve counts each) are drawn once: live points go
// on from the counters' baseline, and a page opened again after every page
// closed (past Linger) reads the journal again, with a new baseline.
func TestBrowserHistoryFromJournal(t *testing.T) {
	j := runJournal(t)
	now := time.Now()
	var evs []journal.Event
	w := newWorld(t, "docs", "kb")
	for i := range 7 {
		evs = append(evs, call("kb", now.Add(-time.Duration(20+i)*time.Second), "ok", 3))
		w.call("kb", "ok", 3*time.Millisecond) // serve counts each call twice: journal and counters
	}
	evs = append(evs, restart("kb", now.Add(-40*time.Minute), "supervisor: fleetd exited: signal: killed; ended 3 members"),
		restart("kb", now.Add(-10*time.Minute), "operator: restart; ended 0 members"))
	appendWritten(t, j, evs...)

	w.run("kb")
	opt := w.options()
	opt.Journal, opt.CallsEvery = j, 2*time.Second // sparklines over the last 2 minutes
	opt.Linger = 300 * time.Millisecond
	s, ts, p := openPage(t, w, opt)
	calls := fleetSel("kb") + `.querySelector('.cap-calls').textContent`
	restarts := fleetSel("kb") + `.querySelector('.cap-restarts').textContent`
	// The first paint: no wait for a sampling or a counter read.
	if c := js[string](t, p, calls); !containsAll(c, "7 in view") {
		t.Errorf("kb's calls caption %q; want the journal's 7 calls in view", c)
	}
	if r := js[string](t, p, restarts); !containsAll(r, "restarts in the last hour: 2", "(operator: restart; ended 0 members)") {
		t.Errorf("kb's restarts caption %q; want the journal's two", r)
	}
	if n := js[float64](t, p, fleetSel("kb")+`.querySelectorAll('.axis-marks rect').length`); n != 2 {
		t.Errorf("%v restart marks on kb's axis, want 2", n)
	}
	if r := js[string](t, p, fleetSel("docs")+`.querySelector('.cap-restarts').textContent`); r != "restarts in the last hour: 0" {
		t.Errorf("docs' restarts caption %q", r)
	}
	js[bool](t, p, `window.__notReloaded = true`)

	appendWritten(t, j, restart("kb", time.Now(), "supervisor: fleetd exited: exit status 3; ended 1 members"))
	wait(t, p, restarts+`.startsWith('restarts in the last hour: 3')`, 5*time.Second)
	if r := js[string](t, p, restarts); !containsAll(r, "exit status 3; ended 1 members") {
		t.Errorf("kb's restarts caption after a live restart %q", r)
	}
	// A read of the journal again (after a gap in the subscription) and a
	// second page do not add it twice.
	s.reloadRestarts(time.Time{})
	p2 := browserPage(t, ts.URL)
	if r := js[string](t, p2, restarts); !containsAll(r, "restarts in the last hour: 3") {
		t.Errorf("a second page's restarts caption %q", r)
	}
	if !js[bool](t, p, `window.__notReloaded === true`) {
		t.Error("the page reloaded")
	}

	// Two calls more, journalled and counted: the live points add them
	// (from the counters), once.
	for range 2 {
		appendWritten(t, j, call("kb", time.Now(), "ok", 3))
		w.call("kb", "ok", 3*time.Millisecond)
	}
	wait(t, p, calls+`.includes(' 9 in view')`, 10*time.Second)
	ticks := js[float64](t, p, fleetSel("kb")+`.querySelector('.spark-calls').getAttribute('points').split(' ').length`)
	wait(t, p, fleetSel("kb")+`.querySelector('.spark-calls').getAttribute('points').split(' ').length >= `+fmt.Sprint(ticks+2), 10*time.Second)
	if c := js[string](t, p, calls); !containsAll(c, " 9 in view") {
		t.Errorf("two periods later kb's calls caption says %q; want 9 in view", c)
	}
	clean(t, p, ts.URL)
	clean(t, p2, ts.URL)

	// Every page closed, past Linger: the next page reads the journal
	// again (the same 9 calls and 3 restarts), and goes on from a new
	// baseline (still 9 a period later).
	p.Close()
	p2.Close()
	poll.For(t, 10*time.Second, "the dashboard idle past Linger", func() (bool, string) {
		on, _ := s.hub.active()
		return !on, fmt.Sprintf("%d streams", s.hub.streams())
	})
	p3 := browserPage(t, ts.URL)
	if c := js[string](t, p3, calls); !containsAll(c, " 9 in view") {
		t.Errorf("a page opened after the others closed: kb's calls caption %q; want 9 in view", c)
	}
	if r := js[string](t, p3, restarts); !containsAll(r, "restarts in the last hour: 3") {
		t.Errorf("a page opened after the others closed: kb's restarts caption %q", r)
	}
	ticks = js[float64](t, p3, fleetSel("kb")+`.querySelector('.spark-calls').getAttribute('points').split(' ').length`)
	wait(t, p3, fleetSel("kb")+`.querySelector('.spark-calls').getAttribute('points').split(' ').length >= `+fmt.Sprint(ticks+1), 10*time.Second)
	if c := js[string](t, p3, calls); !containsAll(c, " 9 in view") {
		t.Errorf("a period after the journal was read again, kb's calls caption %q; want 9 in view", c)
	}
	clean(t, p3, ts.URL)
}

// browserPage opens url in a new tab and waits until it is live.
func browserPage(t *testing.T, url string) *browsertest.Page {
	t.Helper()
	p := browsertest.Shared(t).NewPage(t)
	if err := p.Navigate(url + "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitFor(`document.documentElement.dataset.live === 'true'`, 10*time.Second); err != nil {
		t.Fatalf("page not live: %v (problems: %v)", err, p.Problems())
	}
	return p
}

// BenchmarkHistoryFromJournal measures what a page opened after none was
// costs serve to read its history (readHistory: per fleet, the restarts of
// the last hour and the newest HistoryCalls calls of the sparklines'
// window, through the journal's per-fleet newest-N query). The journal
// holds FLEETMGR_BENCH_EVENTS events (default 300,000, about the default
// 64 MB bound) of 10 fleets over the last hour: mostly calls (about 8 a
// second per fleet, so each fleet has more than 1,000 in the 5-minute
// window) and 3 restarts per fleet, spread over the hour.
//
//   - load-ms: wall time of one readHistory of the 10 fleets, the first
//     of this serve (restarts of the whole hour), median;
//   - reload-ms: the same when the restarts were read up to a minute
//     before (a page opened again after an idle minute), median;
//   - restarts-hour-ms: of load-ms, the hour's restarts alone;
//   - events-read: the events it returns (restarts + calls);
//   - points: the sparkline periods they fill (of 60: the newest 1,000
//     calls of a fleet making 8 a second reach about 2 minutes back).
//
// FLEETMGR_BENCH_CALLS sets the calls read per fleet (Options.HistoryCalls).
//
// Run: go test -run '^$' -bench HistoryFromJournal -benchtime 20x ./dashboard
func BenchmarkHistoryFromJournal(b *testing.B) {
	total := 300_000
	if v, err := strconv.Atoi(os.Getenv("FLEETMGR_BENCH_EVENTS")); err == nil && v > 0 {
		total = v
	}
	j, err := journal.Open(journal.Options{Path: filepath.Join(b.TempDir(), "journal.db"), MaxBytes: 4 << 30, Buffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("fleet%02d", i))
	}
	now := time.Now()
	step := time.Hour / time.Duration(total)
	for n := 0; n < total; {
		for k := 0; k < 1<<15 && n < total; k, n = k+1, n+1 {
			at := now.Add(-time.Hour + time.Duration(n)*step)
			f := names[n%len(names)]
			if r := n % (total / 3); r >= 1000 && r < 1010 { // 3 restarts per fleet
				j.Append(restart(f, at, "supervisor: fleetd exited; ended 2 members"))
			} else {
				j.Append(call(f, at, "ok", float64(n%50)/10))
			}
		}
		for j.Stats().Written+j.Stats().Dropped < uint64(n) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if s := j.Stats(); s.Written != uint64(total) {
		b.Fatalf("written %d of %d (dropped %d)", s.Written, total, s.Dropped)
	}
	perFleet := 1000
	if v, err := strconv.Atoi(os.Getenv("FLEETMGR_BENCH_CALLS")); err == nil && v > 0 {
		perFleet = v
	}
	var took, again, restarts []time.Duration
	read, points := 0, 0
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		h, err := readHistory(j, names, now, restartsSince(now, time.Time{}), 5*time.Second, 60, perFleet, 20)
		took = append(took, time.Since(t0))
		if err != nil || len(h.times) == 0 || len(h.restarts["fleet03"]) != 3 {
			b.Fatalf("%v, %d points, fleet03's restarts %+v", err, len(h.times), h.restarts["fleet03"])
		}
		read, points = h.read, len(h.times)
		t0 = time.Now()
		if _, err := readHistory(j, names, now, restartsSince(now, now.Add(-time.Minute)), 5*time.Second, 60, perFleet, 20); err != nil {
			b.Fatal(err)
		}
		again = append(again, time.Since(t0))
		t0 = time.Now()
		if _, _, err := readRestarts(j, names, restartsSince(now, time.Time{}), 20); err != nil {
			b.Fatal(err)
		}
		restarts = append(restarts, time.Since(t0))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2].Microseconds()) / 1e3 }
	b.ReportMetric(p50(took), "load-ms")
	b.ReportMetric(p50(again), "reload-ms")
	b.ReportMetric(p50(restarts), "restarts-hour-ms")
	b.ReportMetric(float64(read), "events-read")
	b.ReportMetric(float64(points), "points")
}

func verdict(fleet, member string, at time.Time, v string) journal.Event {
	return journal.Event{Time: at, Fleet: fleet, Member: member, Kind: journal.KindVerdict, Outcome: v}
}

// TestVerdictsFromJournal: readVerdicts rebuilds a fleet's verdict
// timeline from its member.verdict changes: one sample per period back
// from now, beginning at the first change; each member's letter is its
// last change's verdict at or before the sample, '-' before its first and
// after "gone"; a fleet without changes gets none, and at most timeline
// samples are made.
func TestVerdictsFromJournal(t *testing.T) {
	j := runJournal(t)
	now := time.Now().UTC().Truncate(time.Second)
	p := 5 * time.Second
	appendWritten(t, j,
		verdict("kb", "a", now.Add(-20*time.Second), "WORKING"),
		verdict("kb", "b", now.Add(-12*time.Second), "IDLE"),
		verdict("kb", "a", now.Add(-10*time.Second), "BLOCKED"),
		verdict("kb", "b", now.Add(-4*time.Second), "gone"),
		verdict("other", "x", now.Add(-3*time.Second), "WORKING"),
	)
	v, _, err := readVerdicts(j, []string{"kb", "docs"}, now, p, 60, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v["docs"]; ok || len(v) != 1 {
		t.Fatalf("fleets: %v", v)
	}
	kb := v["kb"]
	// Samples at now−20, −15, −10, −5, now.
	if len(kb.times) != 5 || !kb.times[0].Equal(now.Add(-20*time.Second)) || !kb.times[4].Equal(now) {
		t.Fatalf("times %v", kb.times)
	}
	if a, b := string(kb.members["a"]), string(kb.members["b"]); a != "WWBBB" || b != "--II-" {
		t.Errorf("a %q (want WWBBB), b %q (want --II-)", a, b)
	}
	if v, _, _ = readVerdicts(j, []string{"kb"}, now, p, 3, 1000); string(v["kb"].members["a"]) != "BBB" {
		t.Errorf("3 samples: a %q", v["kb"].members["a"])
	}
}
