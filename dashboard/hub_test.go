package dashboard

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// TestQuantile: the p50 of a cumulative histogram as Prometheus'
// histogram_quantile computes it (linear inside the bucket holding the
// rank; the first bucket starts at 0; a rank in +Inf gives the highest
// finite bound), checked on hand-computed cases.
func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	b := func(pairs ...float64) []Bucket {
		var out []Bucket
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, Bucket{UpperBound: pairs[i], Count: uint64(pairs[i+1])})
		}
		return out
	}
	cases := []struct {
		name    string
		q       float64
		buckets []Bucket
		want    float64
		ok      bool
	}{
		{"empty", 0.5, nil, 0, false},
		{"no observation", 0.5, b(0.1, 0, 1, 0, inf, 0), 0, false},
		// 10 calls all ≤ 0.1: rank 5 of 10 in [0, 0.1] → 0.05.
		{"first bucket", 0.5, b(0.1, 10, 1, 10, inf, 10), 0.05, true},
		// 4 in [0,0.1], 6 in (0.1,1]: rank 5 → 0.1 + 0.9*(1/6) = 0.25.
		{"second bucket", 0.5, b(0.1, 4, 1, 10, inf, 10), 0.25, true},
		// all above 1: rank in +Inf → highest finite bound 1.
		{"+Inf bucket", 0.5, b(0.1, 0, 1, 0, inf, 3), 1, true},
		{"only +Inf", 0.5, b(inf, 3), 0, false},
		// rank exactly at a bucket's cumulative count stays in it.
		{"boundary", 0.5, b(0.1, 5, 1, 10, inf, 10), 0.1, true},
		{"q clamped", 1.7, b(0.1, 4, 1, 10, inf, 10), 1, true},
	}
	for _, c := range cases {
		got, ok := quantile(c.q, c.buckets)
		if ok != c.ok || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestCallDelta: a period's point is the difference of two cumulative
// reads; counters that went down (another daemon) count from zero; other
// bucket bounds take the new histogram whole.
func TestCallDelta(t *testing.T) {
	inf := math.Inf(1)
	prev := CallCounts{Calls: 10, Errors: 1, Buckets: []Bucket{{0.01, 8}, {0.1, 10}, {inf, 10}}}
	cur := CallCounts{Calls: 14, Errors: 2, Buckets: []Bucket{{0.01, 8}, {0.1, 14}, {inf, 14}}}
	p := callDelta(prev, cur)
	// 4 new calls, all in (0.01, 0.1]: p50 at rank 2 of 4 → 0.01+0.09*0.5 = 55 ms.
	if p.Calls != 4 || p.Errors != 1 || p.P50MS == nil || math.Abs(*p.P50MS-55) > 1e-6 {
		t.Errorf("delta: %+v p50 %v", p, deref(p.P50MS))
	}
	if p := callDelta(cur, cur); p.Calls != 0 || p.P50MS != nil {
		t.Errorf("no calls: %+v", p)
	}
	reset := CallCounts{Calls: 2, Buckets: []Bucket{{0.01, 2}, {0.1, 2}, {inf, 2}}}
	if p := callDelta(cur, reset); p.Calls != 2 || p.P50MS == nil || *p.P50MS != 5 {
		t.Errorf("after a reset: %+v %v", p, deref(p.P50MS))
	}
	other := CallCounts{Calls: 20, Buckets: []Bucket{{1, 20}, {inf, 20}}}
	if got := bucketDelta(cur.Buckets, other.Buckets); len(got) != 2 || got[0].Count != 20 {
		t.Errorf("other bounds: %v", got)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestPrometheusCalls: the adapter reads the proxy's two families by
// fleet: calls and buckets from the histogram, errors from every outcome
// but ok.
func TestPrometheusCalls(t *testing.T) {
	w := newWorld(t, "kb")
	for range 3 {
		w.call("kb", "ok", 3*time.Millisecond)
	}
	w.call("kb", "tool_error", 30*time.Millisecond)
	w.call("kb", "timeout", 300*time.Millisecond)
	w.call("docs", "ok", time.Millisecond)
	got, err := PrometheusCalls(w.reg)()
	if err != nil {
		t.Fatal(err)
	}
	kb := got["kb"]
	if kb.Calls != 5 || kb.Errors != 2 || len(kb.Buckets) != 8 || !math.IsInf(kb.Buckets[7].UpperBound, 1) || kb.Buckets[7].Count != 5 {
		t.Fatalf("kb: %+v", kb)
	}
	// 3 of 5 ≤ 5 ms: p50 (rank 2.5) inside (2.5ms, 5ms].
	if q, ok := quantile(0.5, kb.Buckets); !ok || q <= 0.0025 || q > 0.005 {
		t.Errorf("kb p50 %v", q)
	}
	if d := got["docs"]; d.Calls != 1 || d.Errors != 0 {
		t.Errorf("docs: %+v", d)
	}
}

// TestTimelineBounded: each member's timeline has one letter per kept
// sample ('-' when absent), at most Timeline of them; a member gone for
// Timeline samples is forgotten; a new member is padded.
func TestTimelineBounded(t *testing.T) {
	opt := Options{Timeline: 4}
	opt.defaults()
	h := newHub(&opt, "e", "h")
	h.setNamesLocked([]string{"kb"})
	fs := h.fleets["kb"]
	at := time.Unix(1000, 0)
	sample := func(ms ...status.Member) {
		fs.row = status.Fleet{Name: "kb", State: "running", Members: ms}
		h.sampleLocked(fs, at)
		at = at.Add(time.Second)
	}
	m := func(id string, v status.Verdict) status.Member { return status.Member{ID: id, Verdict: v} }
	sample(m("a", status.Working))
	sample(m("a", status.Stalled), m("b", status.Idle), m("b", status.Blocked)) // b twice: counts once
	sample(m("b", status.Unknown))
	if got := string(fs.members["a"]) + "|" + string(fs.members["b"]); got != "WS-|-IU" {
		t.Fatalf("timelines %q", got)
	}
	for range 4 {
		sample(m("b", status.Working))
	}
	if len(fs.times) != 4 || fs.members["a"] != nil || string(fs.members["b"]) != "WWWW" {
		t.Fatalf("after 7 samples: %d times, a=%q b=%q", len(fs.times), fs.members["a"], fs.members["b"])
	}
	for id, s := range fs.members {
		if len(s) != len(fs.times) {
			t.Errorf("%s: %d letters for %d samples", id, len(s), len(fs.times))
		}
	}
}

// TestReportDoesNotUndoNewerRows: a sampling that began before a
// lifecycle change (fleetd killed while members were sampled) does not
// bring the old "running" back: the newer rows win, members go.
func TestReportDoesNotUndoNewerRows(t *testing.T) {
	opt := Options{}
	opt.defaults()
	h := newHub(&opt, "e", "h")
	running := status.Fleet{Name: "kb", State: "running", PID: 7, MemberCount: -1, Members: []status.Member{}, Summary: map[status.Verdict]int{}}
	h.applyRows([]status.Fleet{running}, time.Now())
	started := time.Now()
	failed := status.Fleet{Name: "kb", State: "failed", Desired: "running", LastError: "fleetd exited", MemberCount: -1, Members: []status.Member{}, Summary: map[status.Verdict]int{}}
	h.applyRows([]status.Fleet{failed}, started.Add(time.Millisecond))
	sampled := running
	sampled.MemberCount, sampled.Members = 1, []status.Member{{ID: "m1", Verdict: status.Working, Evidence: []string{"files"}}}
	sampled.Health = &status.Health{OK: true}
	h.applyReport(&status.Report{GeneratedAt: time.Now(), Fleets: []status.Fleet{sampled}}, started)
	if r := h.fleets["kb"].row; r.State != "failed" || len(r.Members) != 0 || r.Health != nil {
		t.Fatalf("row after an older sampling: %+v", r)
	}
	// A sampling that began after the rows were read is taken as it is.
	h.applyRows([]status.Fleet{running}, time.Now())
	h.applyReport(&status.Report{GeneratedAt: time.Now(), Fleets: []status.Fleet{sampled}}, time.Now())
	if r := h.fleets["kb"].row; r.State != "running" || len(r.Members) != 1 {
		t.Fatalf("row after a newer sampling: %+v", r)
	}
	// Rows of the same fleetd keep what the sampling found.
	more := running
	more.Restarts = 0
	more.UptimeS = 99
	h.applyRows([]status.Fleet{more}, time.Now())
	if r := h.fleets["kb"].row; len(r.Members) != 1 || r.Health == nil {
		t.Fatalf("same fleetd: %+v", r)
	}
}

// TestRestartMarks: a restart count that grows by one is a mark with the
// reason; a larger jump (while no page watched) takes the supervisor's
// recorded times; marks stay bounded.
func TestRestartMarks(t *testing.T) {
	recorded := []time.Time{time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)}
	opt := Options{RestartMarks: 3, RestartTimes: func(string) []time.Time { return recorded }}
	opt.defaults()
	h := newHub(&opt, "e", "h")
	row := func(n int, reason string) status.Fleet {
		return status.Fleet{Name: "kb", State: "running", PID: n + 1, Restarts: n, LastRestartReason: reason, Members: []status.Member{}}
	}
	h.applyRows([]status.Fleet{row(3, "r3")}, time.Unix(400, 0)) // first sight: the recorded three
	if got := marks(h); got != "100,200,300:r3" {
		t.Fatalf("first sight: %s", got)
	}
	h.applyRows([]status.Fleet{row(4, "r4")}, time.Unix(500, 0))
	if got := marks(h); got != "200,300:r3,500:r4" {
		t.Fatalf("one more: %s", got)
	}
	// The supervisor recorded the restart seen at 500 at 450, then two
	// more while nobody watched: only those two are new.
	recorded = append(recorded, time.Unix(450, 0), time.Unix(600, 0), time.Unix(700, 0))
	h.applyRows([]status.Fleet{row(6, "r6")}, time.Unix(800, 0))
	if got := marks(h); got != "500:r4,600,700:r6" {
		t.Fatalf("a jump of two: %s", got)
	}
}

func marks(h *hub) string {
	var parts []string
	for _, m := range h.fleets["kb"].meta.Restarts {
		s := strconv.FormatInt(m.At.Unix(), 10)
		if m.Reason != "" {
			s += ":" + m.Reason
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
