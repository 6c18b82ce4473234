package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// BenchmarkBigResultMemory measures what large results cost the daemon's
// memory: for each mount (HTTP /mcp, `fleetmgr mcp` over the unix socket)
// and each upstream (fleet "json" answering application/json, fleet "sse"
// answering an SSE stream), a fresh `fleetmgr serve` is started, warmed
// with one small call, its VmHWM reset to its RSS (/proc/PID/clear_refs),
// and then it forwards (a) one result of FLEETMGR_BENCH_MIB MiB (default
// 10), (b) four at once, (c) a series of eight one after another. Each
// result is checked intact (SHA-256). Printed per run: serve's VmRSS before,
// its VmHWM after and the growth, in MB (10^6 bytes) and in payloads.
//
//	go test -run '^$' -bench BigResultMemory -benchtime 1x ./e2e
//
// FLEETMGR_BENCH_ONLY=http/json,stdio/sse runs some of the combinations.
// Issue targets: growth ≤ 3× the payload for one result; four at once stay
// under 120 MB of VmHWM.
func BenchmarkBigResultMemory(b *testing.B) {
	mib := 10
	if s := os.Getenv("FLEETMGR_BENCH_MIB"); s != "" {
		if _, err := fmt.Sscan(s, &mib); err != nil || mib < 1 {
			b.Fatalf("FLEETMGR_BENCH_MIB=%q", s)
		}
	}
	n := mib << 20
	only := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("FLEETMGR_BENCH_ONLY"), ",") {
		if s != "" {
			only[s] = true
		}
	}
	e := newSizeEnv(b)
	var lines []string
	for _, mount := range []string{"http", "stdio"} {
		for _, fleet := range []string{"json", "sse"} {
			name := mount + "/" + fleet
			if len(only) > 0 && !only[name] {
				continue
			}
			for _, shape := range []struct {
				label  string
				conc   int
				series int
			}{{"one", 1, 1}, {"four at once", 4, 1}, {"series of 8", 1, 8}} {
				line := bigResultRun(b, e, mount, fleet, n, shape.conc, shape.series)
				lines = append(lines, fmt.Sprintf("%-11s %-13s %s", name, shape.label, line))
				fmt.Println(lines[len(lines)-1])
			}
		}
	}
	fmt.Printf("\nserve's memory around %d MiB results (MB = 10^6 bytes; payload = %.1f MB):\n", mib, float64(n)/1e6)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// bigResultRun starts a fresh daemon, runs conc callers each making series
// calls of n bytes through mount to fleet, and describes serve's memory.
func bigResultRun(b *testing.B, e *harness.Env, mount, fleet string, n, conc, series int) string {
	b.Helper()
	serve := e.StartServe()
	defer func() {
		_ = serve.Cmd.Process.Signal(syscall.SIGTERM)
		_ = wait.Until(context.Background(), 5*time.Second, wait.Bool(func() bool { // reaped by the harness
			return syscall.Kill(serve.Cmd.Process.Pid, 0) != nil
		}))
	}()
	pid := serve.Cmd.Process.Pid
	clients := make([]*sizeClient, conc)
	for i := range clients {
		if mount == "http" {
			clients[i] = connectSizeHTTP(b, e)
		} else {
			clients[i] = connectSizeStdio(b, e)
		}
	}
	waitEchoTool(b, clients[0].cs, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range clients { // warm: sessions and connections open
		out, err := c.echoSize(ctx, fleet, 4096, 0, "")
		if err == nil {
			err = checkEchoResult(out.res)
		}
		if err != nil {
			b.Fatalf("%s/%s warm-up: %v", mount, fleet, err)
		}
	}
	// A sleep: the warm-up's buffers are let go before the high-water
	// mark is reset, and serve gives no sign when that has happened.
	time.Sleep(200 * time.Millisecond)
	if err := resetHWM(pid); err != nil {
		b.Fatal(err)
	}
	rss0, hwm0, err := procStatus(pid)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, conc)
	t0 := time.Now()
	for i, c := range clients {
		wg.Go(func() {
			for range series {
				out, err := c.echoSize(ctx, fleet, n, 0, "")
				if err == nil {
					err = checkEchoResult(out.res)
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(t0)
	rss1, hwm1, err := procStatus(pid)
	if err != nil {
		b.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			return fmt.Sprintf("FAILED: %v", err)
		}
	}
	mb := func(v int64) float64 { return float64(v) / 1e6 }
	return fmt.Sprintf("RSS before %5.1f MB (HWM reset to %5.1f)  VmHWM after %6.1f MB  growth %6.1f MB = %4.1f payloads  RSS after %6.1f MB  (%v)",
		mb(rss0), mb(hwm0), mb(hwm1), mb(hwm1-rss0), float64(hwm1-rss0)/float64(n), mb(rss1), took.Round(time.Millisecond))
}
