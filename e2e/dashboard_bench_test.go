package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// BenchmarkDashboardServe measures the dashboard of a real `fleetmgr
// serve` (defaults: [status] interval 3 s, health checks every 2 s) over
// 10 fleets × 8 members on the stand-ins (per fleet two members writing a
// file every 0.3 s, one printing as often, two stalled, one blocked, two
// idle: 80 shells in PTYs; with FLEETMGR_BENCH_QUIET set the writers and
// the printer stall too, so nothing changes), in headless Chromium:
//
//   - first-render-ms: navigation start to the page having drawn every
//     fleet and member from its snapshot (the page's performance.now()),
//     median over b.N loads;
//   - page-KB: what one load fetches before the streams (page, script,
//     style, icon, snapshot with the history so far), and logs-KB: the
//     first message of the log stream (every fleet's last 100 lines);
//   - serve-idle-cpu-%: serve's CPU (utime+stime of /proc/PID/stat) with
//     one page open and idle, settled (from 75 s after it opened, when
//     member samplings are a minute apart, over FLEETMGR_BENCH_IDLE or a
//     minute, whichever is longer); serve-page-first-cpu-%: over the first
//     FLEETMGR_BENCH_IDLE (default 30 s) after it opened, samplings still
//     5, 10, 20 s apart; serve-nopage-cpu-%: FLEETMGR_BENCH_IDLE with no
//     page open, for comparison. Nothing changes but the members' own
//     work;
//   - update-ms: kill -9 of a fleet's fleetd to the page's data-state
//     leaving running, without a reload (median and max over the 10
//     fleets; the page learns it from the lifecycle rows, read when the
//     supervisor records the exit in the fleet's state file).
//
// Run: go test -run '^$' -bench DashboardServe -benchtime 5x ./e2e
func BenchmarkDashboardServe(b *testing.B) {
	browsertest.Require(b)
	var fleets []harness.Fleet
	var names []string
	for i := range 10 {
		n := fmt.Sprintf("f%02d", i)
		names = append(names, n)
		fleets = append(fleets, harness.Fleet{Name: n})
	}
	e := harness.NewEnv(b, bins, "", fleets...)
	serve := e.StartServe()
	e.MustRun(append([]string{"start"}, names...)...)
	ids := []string{"files1", "files2", "prints", "stall1", "stall2", "blocked", "idle1", "idle2"}
	cmds := map[string]string{"files1": memberWritesFiles, "files2": memberWritesFiles, "prints": memberPrints,
		"stall1": memberStalls, "stall2": memberStalls, "blocked": memberBlocks, "idle1": "true", "idle2": "true"}
	if os.Getenv("FLEETMGR_BENCH_QUIET") != "" {
		// Nobody writes or prints: what serve costs when the fleets idle.
		cmds["files1"], cmds["files2"], cmds["prints"] = memberStalls, memberStalls, memberStalls
	}
	for _, n := range names {
		spawnMembers(b, e, n, ids, cmds)
	}
	pid := serve.Cmd.Process.Pid
	idle := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLEETMGR_BENCH_IDLE")); err == nil && d > 0 {
		idle = d
	}

	// No page open: what serve costs without the dashboard (its warm-up
	// sampling at start is long over by now).
	c0, t0 := procCPU(b, pid), time.Now()
	time.Sleep(idle) // a measurement window: CPU used over idle time
	noPage := float64(procCPU(b, pid)-c0) / float64(time.Since(t0)) * 100

	p := openDashboard(b, e)
	opened := time.Now()
	// Every member judged once, so the loads below draw 80 rows.
	pageWait(b, p, `document.querySelectorAll('[data-fleet] [data-member]').length === 80 && `+
		`!Array.from(document.querySelectorAll('[data-member]')).some(e => e.dataset.verdict === 'UNKNOWN')`, 60*time.Second)

	b.ResetTimer()
	var renders []float64
	for range b.N {
		if err := p.Navigate("http://" + e.Listen + "/"); err != nil {
			b.Fatal(err)
		}
		pageWait(b, p, `document.documentElement.dataset.rendered`, 20*time.Second)
		ms := pageEval[string](b, p, `document.documentElement.dataset.rendered`)
		v, _ := strconv.ParseFloat(ms, 64)
		renders = append(renders, v)
		if n := pageEval[int](b, p, `document.querySelectorAll('[data-fleet] [data-member]').length`); n != 80 {
			b.Fatalf("first render drew %d members", n)
		}
	}
	b.StopTimer()

	kb := 0.0
	for _, u := range []string{"/", "/app.js", "/app.css", "/favicon.svg", "/api/snapshot"} {
		resp, err := http.Get("http://" + e.Listen + u)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		kb += float64(n) / 1024
	}
	logsKB := logTailsKB(b, e, names)

	// One page open and idle: right after it opened (the samplings still
	// 5, 10, 20 s apart), and settled (75 s after it opened the samplings
	// are a minute apart; the window is a minute at least, so it holds one).
	pageWait(b, p, `document.documentElement.dataset.live === 'true'`, 10*time.Second)
	// Sleeps: measurement windows over time passing, and the settling
	// is the samplings' own schedule (75 s after the page opened).
	c0, t0 = procCPU(b, pid), time.Now()
	time.Sleep(idle)
	firstCPU := float64(procCPU(b, pid)-c0) / float64(time.Since(t0)) * 100
	time.Sleep(time.Until(opened.Add(75 * time.Second)))
	c0, t0 = procCPU(b, pid), time.Now()
	time.Sleep(max(idle, time.Minute))
	idleCPU := float64(procCPU(b, pid)-c0) / float64(time.Since(t0)) * 100

	// State changes: kill -9 of each fleet's fleetd in turn.
	var updates []float64
	for _, n := range names {
		fp := readStateB(b, e, n)
		k0 := float64(time.Now().UnixNano()) / 1e6
		if err := syscall.Kill(fp, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		at, err := p.WaitFleetStateNot(n, "running", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		updates = append(updates, at-k0)
	}

	b.ReportMetric(median(renders), "first-render-ms")
	b.ReportMetric(slices.Max(renders), "first-render-max-ms")
	b.ReportMetric(kb, "page-KB")
	b.ReportMetric(logsKB, "logs-KB")
	b.ReportMetric(firstCPU, "serve-page-first-cpu-%")
	b.ReportMetric(idleCPU, "serve-idle-cpu-%")
	b.ReportMetric(noPage, "serve-nopage-cpu-%")
	b.ReportMetric(median(updates), "update-ms")
	b.ReportMetric(slices.Max(updates), "update-max-ms")
	b.ReportMetric(0, "ns/op")
	if pr := p.Problems(); len(pr) > 0 {
		b.Errorf("page problems: %v", pr)
	}
}

// procCPU is a process's user + system CPU time from /proc/PID/stat.
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14, utime
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15, stime
	const hz = 100                           // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

// logTailsKB reads /api/logs until every fleet's "tail" event arrived and
// returns its size.
func logTailsKB(tb testing.TB, e *harness.Env, names []string) float64 {
	tb.Helper()
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "fleet=" + n
	}
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get("http://" + e.Listen + "/api/logs?" + strings.Join(q, "&"))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	size, tails := 0, 0
	for tails < len(names) {
		line, err := r.ReadString('\n')
		size += len(line)
		if err != nil {
			tb.Fatalf("log stream: %v after %d tails", err, tails)
		}
		if line == "event: tail\n" {
			tails++
		}
	}
	// The last tail's data line.
	line, _ := r.ReadString('\n')
	return float64(size+len(line)) / 1024
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
