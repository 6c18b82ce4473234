package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// BenchmarkRemoteOverhead measures what the broker hop costs a tool call:
// fleet_whoami through alpha's HTTP mount on alpha's own fleet kb (local)
// against the same call on beta's fleet docs (remote: alpha's proxy →
// signed call request over the broker → beta's manager in its network
// namespace → beta's fleetd, and back), with 1 and 16 concurrent callers
// (one client session each), interleaved in 200 ms blocks as
// BenchmarkOverhead does, in one run; then a soak: 16 callers on the
// remote fleet for FLEETMGR_REMOTE_SOAK_SECONDS (default 30), each call
// with a request id of its own, after which every call must have been
// answered and beta's fleetd must have executed every id exactly once (no
// loss, no duplicate). Interleaved with them, the floor: a bare AMQP
// request and reply over the same broker through the same relay
// (amqpFloor), and without the relay (floor-direct) — what a remote call
// cannot cost less than, the broker's and the relay's. Each row gives the
// CPU per call of alpha's serve, beta's serve, the relay's halves and the
// broker (its whole VM: other users of the broker count too), which says
// whose the time is; FLEETMGR_REMOTE_BENCH_PROFILE=DIR writes a CPU
// profile of each serve there (DIR/HOST.pprof). Run it with
//
//	go test -run '^$' -bench RemoteOverhead -benchtime 1x ./e2e
//
// (root: beta runs in a network namespace; against RabbitMQ and, when
// configured, LavinMQ). FLEETMGR_BENCH_SECONDS (default 3) is the time of
// each configuration. Target (docs/ARCHITECTURE.md "Remote fleets"):
// remote p50 ≤ local p50 + 2 ms at one caller.
func BenchmarkRemoteOverhead(b *testing.B) {
	brokertest.EachB(b, benchmarkRemoteOverhead)
}

func benchmarkRemoteOverhead(b *testing.B, br *brokertest.Broker) {
	d := 3 * time.Second
	if s := os.Getenv("FLEETMGR_BENCH_SECONDS"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
			d = time.Duration(v * float64(time.Second))
		}
	}
	soak := 30 * time.Second
	if s := os.Getenv("FLEETMGR_REMOTE_SOAK_SECONDS"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 {
			soak = time.Duration(v * float64(time.Second))
		}
	}
	// FLEETMGR_REMOTE_BENCH_SAME_NETWORK=1 runs beta beside alpha, without
	// the namespace and its relay (two more processes on every byte's way
	// to the broker and back), to see what they add.
	same := os.Getenv("FLEETMGR_REMOTE_BENCH_SAME_NETWORK") == "1"
	p := newRemotePair(b, br, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}, heartbeat: "1s",
		alphaManager: `call_timeout = "30s"`, sameNetwork: same})
	docs := peerview.RemoteName("docs", p.beta.host)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	transport := func() mcp.Transport {
		return &mcp.StreamableClientTransport{Endpoint: p.alpha.URL(), HTTPClient: hc, MaxRetries: -1}
	}
	// Wait until beta's fleet is callable from alpha.
	probe := whoamiCaller(b, transport(), map[string]any{"fleet": docs})
	wait.For(b, 30*time.Second, docs+" callable from alpha", func() (bool, string) {
		if err := probe(context.Background()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	alphaPID := p.alpha.serve.Cmd.Process.Pid
	// The processes a remote call adds, besides alpha's serve: beta's
	// serve and the relay's two halves (the broker's own CPU is not
	// counted: it is shared with whatever else runs on the machine).
	betaPIDs := []int{p.beta.serve.Cmd.Process.Pid}
	var relayPIDs []int
	if p.relay != nil {
		relayPIDs = p.relay.PIDs()
	}
	brokers := brokerPIDs()
	// The floor: a bare AMQP request and reply over the same broker and
	// relay (amqpFloor); floor-direct without the relay.
	floor := newAMQPFloor(b, br, p.vhost, "relay", false, p.beta.DialContext)
	floorDirect := newAMQPFloor(b, br, p.vhost, "direct", false, (&net.Dialer{}).DialContext)
	// floor-fed: the floor through the relay with the federation's
	// topology and headers (amqpFloor.fedShape).
	floorFed := newAMQPFloor(b, br, p.vhost, "fed", true, p.beta.DialContext)
	const benchBlock = 200 * time.Millisecond
	var report strings.Builder
	defer func() { fmt.Print(report.String()) }()
	fmt.Fprintf(&report, "broker %s; beta in a network namespace behind the relay: %v\n", br, !same)
	res := map[string]benchFigures{}
	for _, conc := range []int{1, 16} {
		type runner struct {
			key string
			fns []func(context.Context) error
		}
		var runners []runner
		for _, m := range []struct{ name, fleet string }{{"local", "kb"}, {"remote", docs}, {"floor", ""}, {"floor-fed", ""}, {"floor-direct", ""}} {
			r := runner{key: fmt.Sprintf("%s/c%d", m.name, conc), fns: make([]func(context.Context) error, conc)}
			switch m.name {
			case "floor":
				r.fns = floor.callers(conc)
			case "floor-direct":
				r.fns = floorDirect.callers(conc)
			case "floor-fed":
				r.fns = floorFed.callers(conc)
			default:
				for i := range r.fns {
					r.fns[i] = whoamiCaller(b, transport(), map[string]any{"fleet": m.fleet})
				}
			}
			for _, fn := range r.fns { // warm-up
				for range 20 {
					_ = fn(context.Background())
				}
			}
			runners = append(runners, r)
		}
		acc := make([]benchFigures, len(runners))
		betaCPU := make([]int64, len(runners))
		relayCPU := make([]int64, len(runners))
		brokerCPU := make([]int64, len(runners))
		for round := 0; time.Duration(round)*benchBlock < d; round++ {
			for j := range runners {
				k := (round + j) % len(runners)
				b0, r0, k0 := cpuNSOf(betaPIDs), cpuNSOf(relayPIDs), cpuNSOf(brokers)
				acc[k].add(measure(conc, benchBlock, alphaPID, runners[k].fns))
				betaCPU[k] += cpuNSOf(betaPIDs) - b0
				relayCPU[k] += cpuNSOf(relayPIDs) - r0
				brokerCPU[k] += cpuNSOf(brokers) - k0
			}
		}
		for k, r := range runners {
			f := acc[k]
			f.finish()
			res[r.key] = f
			perCall := func(ns int64) float64 {
				if f.calls == 0 {
					return 0
				}
				return float64(ns) / 1e3 / float64(f.calls)
			}
			fmt.Fprintf(&report, "%-16s p50 %7.0fµs  p99 %7.0fµs  %6.0f calls/s  CPU µs/call: alpha's serve %5.0f, beta's serve %5.0f, relay %5.0f, broker %5.0f  (%d calls, %d errors %s)\n",
				r.key, us(f.p50), us(f.p99), f.callsPerSec, us(f.cpuPerCall), perCall(betaCPU[k]), perCall(relayCPU[k]), perCall(brokerCPU[k]), f.calls, f.errs, f.firstErrText)
			if f.errs > 0 {
				b.Errorf("%s: %d errors, first: %s", r.key, f.errs, f.firstErrText)
			}
		}
	}
	added := us(res["remote/c1"].p50) - us(res["local/c1"].p50)
	fmt.Fprintf(&report, "remote p50 - local p50 at 1 caller: %.0fµs (target ≤ 2000µs); 16-way throughput remote/local %.2f×\n",
		added, res["remote/c16"].callsPerSec/res["local/c16"].callsPerSec)
	fmt.Fprintf(&report, "floor (bare AMQP round trip, same broker%s): p50 %.0fµs at 1 caller, %.0f round trips/s at 16; without the relay p50 %.0fµs, %.0f/s; "+
		"fleetmgr's own share of the added p50: %.0fµs\n",
		map[bool]string{true: " and relay", false: ""}[!same], us(res["floor/c1"].p50), res["floor/c16"].callsPerSec,
		us(res["floor-direct/c1"].p50), res["floor-direct/c16"].callsPerSec, added-us(res["floor/c1"].p50))
	b.ReportMetric(added, "remote-added-p50-µs")
	for _, k := range []string{"local/c1", "remote/c1", "local/c16", "remote/c16", "floor/c1", "floor/c16"} {
		b.ReportMetric(res[k].callsPerSec, k+"-calls/s")
		b.ReportMetric(us(res[k].p50), k+"-p50-µs")
		b.ReportMetric(us(res[k].p99), k+"-p99-µs")
	}
	if soak > 0 {
		soakRemote(b, p, docs, transport, soak, &report)
	}
}

// soakRemote runs 16 callers on fleet (beta's) for d, every call with a
// request id of its own, and checks that every call was answered and
// that beta's fleetd executed every id exactly once.
func soakRemote(b *testing.B, p *remotePair, fleet string, transport func() mcp.Transport, d time.Duration, report *strings.Builder) {
	const conc = 16
	sessions := make([]*mcp.ClientSession, conc)
	for i := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "test"}, nil).Connect(ctx, transport(), nil)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		sessions[i] = cs
	}
	var mu sync.Mutex
	var sent, answered int
	var failures []string
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	t0 := time.Now()
	for i := range conc {
		wg.Go(func() {
			for n := 0; time.Now().Before(stop); n++ {
				id := fmt.Sprintf("soak-%d-%d", i, n)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := sessions[i].CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": fleet}, Meta: standinRequestID(id)})
				cancel()
				mu.Lock()
				sent++
				switch {
				case err != nil:
					failures = append(failures, id+": "+err.Error())
				case res.IsError:
					failures = append(failures, id+": "+textOf(res))
				default:
					answered++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	// What beta's fleetd executed, by id.
	// A redelivery, if any, would come now. A sleep: what follows counts
	// every execution, so the window for a late one must pass first.
	time.Sleep(time.Second)
	raw, err := os.ReadFile(p.beta.events)
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(string(raw), "\n") {
		if id, ok := strings.CutPrefix(l, "executed fleet_whoami request-id="); ok && strings.HasPrefix(id, "soak-") {
			seen[id]++
		}
	}
	dups, missing := 0, 0
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	missing = answered - len(seen)
	fmt.Fprintf(report, "soak: %d callers on %s for %s: %d calls sent, %d answered, %d failed, %.0f calls/s; beta's fleetd executed %d distinct ids, %d more than once\n",
		conc, fleet, el.Round(time.Millisecond), sent, answered, len(failures), float64(answered)/el.Seconds(), len(seen), dups)
	if len(failures) > 0 {
		b.Errorf("soak: %d of %d calls failed, first: %s", len(failures), sent, failures[0])
	}
	if dups > 0 || missing > 0 || len(seen) != sent {
		b.Errorf("soak: %d calls sent, beta executed %d distinct ids (%d duplicated, %d answered without an execution)", sent, len(seen), dups, missing)
	}
	b.ReportMetric(float64(answered)/el.Seconds(), "soak-calls/s")
}
