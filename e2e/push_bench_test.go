package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// memberReadsStatus is a member that sets its pane's agent status to each line typed into it
// (the stand-in's status hook): idle (unknown) until told otherwise.
const memberReadsStatus = `while read s; do printf '\033]777;herdr-status;%s\007' "$s"; done`

// BenchmarkHerdrPush (issue 26) measures `fleetmgr serve` over 10 fleets × 8 members on the
// stand-ins at protocol 20, twice: once sampling (the stand-in lacks the push methods, so
// serve falls back to today's path) and once following herdr's push. Per mode:
//
//   - herdr-req/s: requests serve makes to all ten herdr servers per second (the stand-ins
//     log every call with its caller's pid, STANDIN_HERDR_LOG_CALLS; the fleetd stand-ins'
//     own calls are not counted) with every member idle and one dashboard page
//     open, over FLEETMGR_BENCH_IDLE (default 60 s: one whole snapshot backstop period, whose
//     ticks fall together for fleets started together, so a shorter window counts all ten
//     snapshots or none) after a settling time
//     (FLEETMGR_BENCH_SETTLE, default 45 s); printed by method as well;
//   - serve-cpu-%: serve's CPU (utime+stime) over the same window;
//   - status-p50-ms / status-p99-ms: one member of each fleet made busy (it claims working,
//     prints nothing: STALLED), then 20 status changes typed into other members (blocked,
//     then idle again), each timed from the keystroke to the first `fleetmgr status --json`
//     (through serve, [status] interval 3 s; without --fresh, so answered from serve's last
//     sampling unless a pushed verdict change made it stale) that shows the new verdict;
//     status calls follow each other back to back. call-p50-ms is one such call;
//     verdict-p50/p99-ms (events only) the keystroke to serve's tracker logging the verdict.
//
// Run: go test -run '^$' -bench HerdrPush -benchtime 1x ./e2e
func BenchmarkHerdrPush(b *testing.B) {
	browsertest.Require(b)
	for _, mode := range []string{"sampling", "events"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				benchHerdrPush(b, mode == "sampling")
			}
		})
	}
}

func benchHerdrPush(b *testing.B, sampling bool) {
	settle, idle := envDuration("FLEETMGR_BENCH_SETTLE", 45*time.Second), envDuration("FLEETMGR_BENCH_IDLE", 60*time.Second)
	var fleets []harness.Fleet
	var names []string
	for i := range 10 {
		n := fmt.Sprintf("p%02d", i)
		names = append(names, n)
		fleets = append(fleets, harness.Fleet{Name: n})
	}
	e := harness.NewEnv(b, bins, `pass_env = ["STANDIN_HERDR_WITHOUT_PUSH", "STANDIN_HERDR_LOG_CALLS"]`, fleets...)
	e.Environ = append(e.Environ, "STANDIN_HERDR_LOG_CALLS=1")
	if sampling {
		e.Environ = append(e.Environ, "STANDIN_HERDR_WITHOUT_PUSH=1")
	}
	serve := e.StartServe()
	e.MustRun(append([]string{"start"}, names...)...)
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		fd, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "test"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports[n]), MaxRetries: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for m := range 8 {
			res, err := fd.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": fmt.Sprintf("m%d", m), "command": memberReadsStatus}})
			if err != nil || res.IsError {
				b.Fatalf("spawn %s/m%d: %v", n, m, err)
			}
		}
		fd.Close()
		cancel()
	}
	var rep *status.Report
	wait.For(b, 60*time.Second, "80 idle members", func() (bool, string) {
		rep = statusJSONB(b, e)
		n := 0
		for _, f := range rep.Fleets {
			n += f.Summary[status.Idle]
		}
		return n == 80, fmt.Sprint(n)
	})
	openDashboard(b, e)
	time.Sleep(settle) // benchmark: the page's start-up traffic ends before the idle window is measured

	// Idle: requests to herdr and serve's CPU, page open.
	sizes := map[string]int64{}
	logs := map[string]string{}
	for _, n := range names {
		logs[n] = filepath.Join(e.StateDir, "fleets", n, "herdr.log")
		if st, err := os.Stat(logs[n]); err == nil {
			sizes[n] = st.Size()
		}
	}
	cpu0, t0 := procCPU(b, serve.Cmd.Process.Pid), time.Now()
	time.Sleep(idle) // benchmark: the measurement window itself
	cpu1, t1 := procCPU(b, serve.Cmd.Process.Pid), time.Now()
	byMethod := map[string]int{}
	total := 0
	// Only serve's own calls (the fleetd stand-ins ask herdr too).
	methodRE := regexp.MustCompile(fmt.Sprintf(`msg="api call" (?:\S+ )*?method=(\S+) \S+ peer_pid=%d `, serve.Cmd.Process.Pid))
	for _, n := range names {
		data, err := os.ReadFile(logs[n])
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range methodRE.FindAllStringSubmatch(string(data[min(sizes[n], int64(len(data))):]), -1) {
			byMethod[m[1]]++
			total++
		}
	}
	secs := t1.Sub(t0).Seconds()
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(byMethod)) {
		parts = append(parts, fmt.Sprintf("%s %.2f/s", m, float64(byMethod[m])/secs))
	}
	b.Logf("sampling=%v: herdr requests with every member idle, page open: %.2f/s over %.0f s (%s)", sampling, float64(total)/secs, secs, strings.Join(parts, ", "))
	b.ReportMetric(float64(total)/secs, "herdr-req/s")
	b.ReportMetric(100*float64(cpu1-cpu0)/float64(t1.Sub(t0)), "serve-cpu-%")

	// Latency: one busy member per fleet, then status changes typed into others.
	panes := map[string]map[string]string{}
	for _, f := range rep.Fleets {
		panes[f.Name] = map[string]string{}
		for _, m := range f.Members {
			panes[f.Name][m.ID] = m.PaneID
		}
	}
	ctx := context.Background()
	typeStatus := func(fleet, member, st string) {
		if err := herdr.New(e.HerdrSocket(fleet)).PaneSendInput(ctx, panes[fleet][member], st, []string{"Enter"}); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range names {
		typeStatus(n, "m0", "working")
	}
	wait.For(b, 60*time.Second, "one busy member per fleet", func() (bool, string) {
		rep = statusJSONB(b, e)
		n := 0
		for _, f := range rep.Fleets {
			n += f.Summary[status.Stalled] + f.Summary[status.Working]
		}
		return n == 10, fmt.Sprint(n)
	})
	var lat, seen, calls []float64
	verdictRE := func(fleet, member string, v status.Verdict) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`time=(\S+) level=INFO msg="member verdict" fleet=%s member=%s \S+ from=\S+ to=%s `, fleet, member, v))
	}
	for i := range 20 {
		fleet, member := names[i%10], "m1" // blocked, then (i ≥ 10) idle again
		st, want := "blocked", status.Blocked
		if i >= 10 {
			st, want = "idle", status.Idle
		}
		logFrom := len(serve.Log())
		start := time.Now()
		typeStatus(fleet, member, st)
		for {
			c0 := time.Now()
			r := statusJSONB(b, e, fleet)
			calls = append(calls, float64(time.Since(c0).Milliseconds()))
			if verdictOf(r, fleet, member) == want {
				break
			}
			if time.Since(start) > 60*time.Second {
				b.Fatalf("%s/%s not %s after 60 s", fleet, member, want)
			}
		}
		lat = append(lat, float64(time.Since(start).Milliseconds()))
		// When serve's tracker had it (events only): its log line's time.
		if m := verdictRE(fleet, member, want).FindStringSubmatch(serve.Log()[logFrom:]); m != nil {
			if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				seen = append(seen, float64(at.Sub(start).Milliseconds()))
			}
		}
	}
	pct := func(v []float64) (p50, p99 float64) {
		if len(v) == 0 {
			return 0, 0
		}
		sort.Float64s(v)
		return v[len(v)/2], v[min(len(v)-1, len(v)*99/100)]
	}
	p50, p99 := pct(lat)
	c50, c99 := pct(calls)
	b.Logf("sampling=%v: status change → status --json: p50 %.0f ms, p99 %.0f ms (%d changes: %v); one status --json call: p50 %.0f ms, p99 %.0f ms", sampling, p50, p99, len(lat), lat, c50, c99)
	b.ReportMetric(p50, "status-p50-ms")
	b.ReportMetric(p99, "status-p99-ms")
	b.ReportMetric(c50, "call-p50-ms")
	if len(seen) > 0 {
		s50, s99 := pct(seen)
		b.Logf("sampling=%v: status change → serve's verdict (its log): p50 %.0f ms, p99 %.0f ms (%v)", sampling, s50, s99, seen)
		b.ReportMetric(s50, "verdict-p50-ms")
		b.ReportMetric(s99, "verdict-p99-ms")
	}
}

// statusJSONB runs `fleetmgr status --json args…` (through serve) and decodes it.
func statusJSONB(b *testing.B, e *harness.Env, args ...string) *status.Report {
	b.Helper()
	r := e.Run(append([]string{"status", "--json"}, args...)...)
	if r.Code != 0 {
		b.Fatalf("status --json: exit %d: %s", r.Code, r.Stderr)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		b.Fatalf("status --json: %v", err)
	}
	return &rep
}

// verdictOf is member's verdict in fleet's row of rep ("" when absent).
func verdictOf(rep *status.Report, fleet, member string) status.Verdict {
	for _, f := range rep.Fleets {
		for _, m := range f.Members {
			if f.Name == fleet && m.ID == member {
				return m.Verdict
			}
		}
	}
	return ""
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}
