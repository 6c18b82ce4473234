package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// cpuNS is the CPU time all threads of pid have run so far, in ns
// (/proc/PID/task/*/schedstat, first field), or 0 if unreadable.
func cpuNS(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err == nil {
			sum += ns
		}
	}
	return sum
}

// benchFigures are one measured configuration.
type benchFigures struct {
	// cpuPerCall is the CPU the fleetmgr daemon (through) or the fleetd
	// (direct) spent per call: robust to other load on the machine,
	// unlike latency.
	cpuPerCall   time.Duration
	calls        int
	p50, p99     time.Duration
	callsPerSec  float64
	errs         int
	firstErrText string

	lat     []time.Duration // every call's latency, for the percentiles
	elapsed time.Duration   // wall time measured
	cpu     int64           // CPU ns of the measured process
}

// add folds one block of measurement into f.
func (f *benchFigures) add(b benchFigures) {
	f.lat = append(f.lat, b.lat...)
	f.elapsed += b.elapsed
	f.cpu += b.cpu
	f.errs += b.errs
	if f.firstErrText == "" {
		f.firstErrText = b.firstErrText
	}
}

// finish computes the percentiles, rates and CPU per call.
func (f *benchFigures) finish() {
	slices.Sort(f.lat)
	f.calls = len(f.lat)
	if f.calls > 0 {
		f.p50 = f.lat[f.calls*50/100]
		f.p99 = f.lat[min(f.calls-1, f.calls*99/100)]
		f.cpuPerCall = time.Duration(f.cpu / int64(f.calls))
	}
	if f.elapsed > 0 {
		f.callsPerSec = float64(f.calls) / f.elapsed.Seconds()
	}
}

// measure runs fn from conc callers for d and returns their latencies,
// the wall time and the CPU process pid spent meanwhile.
func measure(conc int, d time.Duration, pid int, fns []func(context.Context) error) benchFigures {
	ctx := context.Background()
	lat := make([][]time.Duration, conc)
	errs := make([]int, conc)
	var firstErr sync.Once
	var errText string
	var wg sync.WaitGroup
	c0 := cpuNS(pid)
	start := time.Now()
	stop := start.Add(d)
	for i := range conc {
		wg.Go(func() {
			fn := fns[i]
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					errs[i]++
					firstErr.Do(func() { errText = err.Error() })
					continue
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	f := benchFigures{firstErrText: errText, elapsed: time.Since(start), cpu: cpuNS(pid) - c0}
	for i := range conc {
		f.lat = append(f.lat, lat[i]...)
		f.errs += errs[i]
	}
	return f
}

// whoamiCaller opens one client session over t and returns a function
// calling fleet_whoami with args on it.
func whoamiCaller(tb testing.TB, t mcp.Transport, args map[string]any) func(context.Context) error {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "test"}, nil).Connect(ctx, t, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return func(ctx context.Context) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: args})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("tool error: %v", textOf(res))
		}
		return nil
	}
}

// BenchmarkOverhead measures fleet_whoami straight to a stand-in fleetd
// against the same call through fleetmgr, over both of fleetmgr's mounts
// (streamable HTTP and the unix socket), with 1 and 32 concurrent callers
// (one client session each), in one run. When socat is installed, a plain
// TCP relay in front of fleetd is measured too, as the floor: what one more
// hop costs this machine before any work is done.
//
// It ignores b.N: each configuration runs for FLEETMGR_BENCH_SECONDS
// (default 3) in all, after a warm-up, in 200 ms blocks taking turns with
// the other configurations of its concurrency (direct, http, relay,
// socket, direct, …), so drifting load on the machine does not favour one
// of them. FLEETMGR_BENCH_ONLY=http/c1 runs one configuration (for
// profiling the daemon with perf record -p; FLEETMGR_BENCH_PIDFILE gets
// its pid), FLEETMGR_BENCH_ONLY=direct/c1,http/c1 a few;
// FLEETMGR_BENCH_JOURNAL=off runs serve with [manager] journal = false
// (issue 25: the journal's cost is the difference of two runs). Run it with
//
//	go test -run '^$' -bench Overhead -benchtime 1x ./e2e
//
// Reported per configuration: p50 and p99 latency (µs), calls/s, CPU per
// call of the process doing the work (fleetmgr, or fleetd when direct);
// and the ratios through/direct (added p50 in µs at one caller, throughput
// ratio at 32). Targets (docs/ARCHITECTURE.md "Overhead"): added p50 ≤ 100 µs
// at one caller, 32-way throughput ≥ 0.8× direct.
func BenchmarkOverhead(b *testing.B) {
	d := 3 * time.Second
	if s := os.Getenv("FLEETMGR_BENCH_SECONDS"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
			d = time.Duration(v * float64(time.Second))
		}
	}
	e := harness.NewEnv(b, bins, "", harness.Fleet{Name: "kb"})
	if os.Getenv("FLEETMGR_BENCH_JOURNAL") == "off" { // the journal's own cost: run once each way
		cfg, err := os.ReadFile(e.ConfigPath)
		if err != nil || !strings.Contains(string(cfg), "[manager]\n") {
			b.Fatalf("config %s: %v", e.ConfigPath, err)
		}
		if err := os.WriteFile(e.ConfigPath, []byte(strings.Replace(string(cfg), "[manager]\n", "[manager]\njournal = false\n", 1)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	e.MustRun("start", "kb")
	// Experiments on the daemon alone: FLEETMGR_BENCH_SERVE_ENV="GOGC=800
	// GOMAXPROCS=1" (say) is added to serve's environment.
	e.Environ = append(e.Environ, strings.Fields(os.Getenv("FLEETMGR_BENCH_SERVE_ENV"))...)
	serve := e.StartServe()
	if f := os.Getenv("FLEETMGR_BENCH_PIDFILE"); f != "" { // for perf record -p
		_ = os.WriteFile(f, []byte(strconv.Itoa(serve.Cmd.Process.Pid)), 0o600)
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"])
	sock := filepath.Join(e.StateDir, "fleetmgr.sock")
	through := map[string]any{"fleet": "kb"}
	// References, not fleetmgr, each in front of the same fleetd: "relay",
	// socat copying bytes (what one more hop, two more process wake-ups and
	// socket round trips, costs this machine before any work is done; when
	// socat is installed), and "goproxy", testbed/cmd/refproxy, the least a
	// Go front door built on net/http does per call (no guard, no JSON).
	type ref struct {
		url string
		pid int // whose CPU is measured (0: not measured, e.g. socat's forked children)
	}
	refs := map[string]ref{}
	startRef := func(name string, measureCPU bool, argv ...string) {
		port := harness.FreePorts(b, 1)[0]
		for i := range argv {
			argv[i] = strings.ReplaceAll(argv[i], "{port}", strconv.Itoa(port))
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // socat's forked children too
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		wait.For(b, 5*time.Second, name+" listening", func() (bool, string) {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				return false, err.Error()
			}
			c.Close()
			return true, ""
		})
		r := ref{url: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}
		if measureCPU {
			r.pid = cmd.Process.Pid
		}
		refs[name] = r
	}
	upstream := fmt.Sprintf("127.0.0.1:%d", e.Ports["kb"])
	if socat, err := exec.LookPath("socat"); err == nil {
		startRef("relay", false, socat, "TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", "TCP:"+upstream+",nodelay")
	}
	startRef("goproxy", true, bins.RefProxy, "127.0.0.1:{port}", upstream)

	// Every caller keeps its connections alive (the default transport keeps
	// only 2 idle per host, so 32 callers would reconnect on most calls and
	// measure peer resolution, not forwarding).
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	mounts := []struct {
		name string
		tr   func() mcp.Transport
		args map[string]any
	}{
		{"direct", func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: direct, HTTPClient: hc, MaxRetries: -1}
		}, map[string]any{}},
		{"http", func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: e.URL(), HTTPClient: hc, MaxRetries: -1}
		}, through},
		{"relay", func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: refs["relay"].url, HTTPClient: hc, MaxRetries: -1}
		}, map[string]any{}},
		{"goproxy", func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: refs["goproxy"].url, HTTPClient: hc, MaxRetries: -1}
		}, map[string]any{}},
		{"socket", func() mcp.Transport {
			c, err := net.Dial("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			return &mcp.IOTransport{Reader: c, Writer: c}
		}, through},
	}
	// The configurations of one concurrency are measured interleaved, in
	// blocks of benchBlock taking turns, so that a change in the machine's
	// load (other work, CPU frequency, the host of this VM) hits direct and
	// through alike instead of whichever ran at that moment.
	const benchBlock = 200 * time.Millisecond
	res := map[string]benchFigures{}
	// The report goes to standard output at the end: the testing package
	// cuts a benchmark's log after ten lines.
	var report strings.Builder
	defer func() { fmt.Print(report.String()) }()
	only := os.Getenv("FLEETMGR_BENCH_ONLY") // e.g. "http/c1" (for profiling) or "direct/c1,http/c1"
	for _, conc := range []int{1, 32} {
		type runner struct {
			key string
			pid int    // whose CPU is measured
			who string // and what it is
			fns []func(context.Context) error
		}
		var runners []runner
		for _, m := range mounts {
			key := fmt.Sprintf("%s/c%d", m.name, conc)
			if only != "" && !slices.Contains(strings.Split(only, ","), key) || (m.name == "relay" || m.name == "goproxy") && refs[m.name].url == "" {
				continue
			}
			r := runner{key: key, pid: serve.Cmd.Process.Pid, who: "fleetmgr", fns: make([]func(context.Context) error, conc)}
			switch m.name {
			case "direct":
				r.pid, r.who = readStateB(b, e, "kb"), "fleetd"
			case "relay", "goproxy":
				r.pid, r.who = refs[m.name].pid, m.name
			}
			for i := range r.fns {
				r.fns[i] = whoamiCaller(b, m.tr(), m.args)
			}
			for _, fn := range r.fns { // warm-up: connections, sessions, caches
				for range 20 {
					_ = fn(context.Background())
				}
			}
			runners = append(runners, r)
		}
		acc := make([]benchFigures, len(runners))
		for round := 0; time.Duration(round)*benchBlock < d; round++ {
			for j := range runners {
				k := (round + j) % len(runners) // rotate who goes first
				acc[k].add(measure(conc, benchBlock, runners[k].pid, runners[k].fns))
			}
		}
		for k, r := range runners {
			f := acc[k]
			f.finish()
			res[r.key] = f
			who := r.who
			fmt.Fprintf(&report, "%-11s p50 %7.0fµs  p99 %7.0fµs  %8.0f calls/s  %s CPU %5.0fµs/call  (%d calls, %d errors %s)", r.key,
				us(f.p50), us(f.p99), f.callsPerSec, who, us(f.cpuPerCall), f.calls, f.errs, f.firstErrText)
			report.WriteByte('\n')
			if f.errs > 0 {
				b.Errorf("%s: %d errors, first: %s", r.key, f.errs, f.firstErrText)
			}
		}
	}
	for _, m := range []string{"http", "socket", "relay", "goproxy"} {
		if _, ok := res[m+"/c1"]; !ok || res["direct/c1"].calls == 0 {
			continue
		}
		d1, t1 := res["direct/c1"], res[m+"/c1"]
		d32, t32 := res["direct/c32"], res[m+"/c32"]
		added := us(t1.p50) - us(d1.p50)
		ratio := 0.0 // 32 callers not measured (FLEETMGR_BENCH_ONLY)
		if d32.callsPerSec > 0 {
			ratio = t32.callsPerSec / d32.callsPerSec
		}
		what := "fleetmgr"
		if m == "relay" || m == "goproxy" {
			what = "reference"
		}
		fmt.Fprintf(&report, "%-7s (%s) added p50 at 1 caller: %5.0fµs; p50 ratio %.2f×; 32-way throughput %.2f× direct; 1-way %.2f×",
			m, what, added, us(t1.p50)/us(d1.p50), ratio, t1.callsPerSec/d1.callsPerSec)
		report.WriteByte('\n')
		b.ReportMetric(added, m+"-added-p50-µs")
		b.ReportMetric(ratio, m+"-c32-throughput-ratio")
	}
	report.WriteString("targets for fleetmgr: added p50 ≤ 100µs at 1 caller, 32-way throughput ≥ 0.8× direct\n")
	for _, k := range []string{"direct/c1", "http/c1", "socket/c1", "direct/c32", "http/c32", "socket/c32"} {
		b.ReportMetric(res[k].callsPerSec, k+"-calls/s")
		b.ReportMetric(us(res[k].p50), k+"-p50-µs")
		b.ReportMetric(us(res[k].p99), k+"-p99-µs")
		b.ReportMetric(us(res[k].cpuPerCall), k+"-cpu-µs/call")
	}
}

func readStateB(b *testing.B, e *harness.Env, name string) int {
	b.Helper()
	var st struct {
		Fleetd *struct {
			PID int `json:"pid"`
		} `json:"fleetd"`
	}
	raw, err := os.ReadFile(filepath.Join(e.StateDir, "fleets", name, "state.json"))
	if err == nil {
		err = json.Unmarshal(raw, &st)
	}
	if err != nil || st.Fleetd == nil {
		b.Fatalf("state of %s: %v", name, err)
	}
	return st.Fleetd.PID
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
