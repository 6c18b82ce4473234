package federation

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestHonestHostNotCapped(t *testing.T) { brokertest.Each(t, testHonestHostNotCapped) }

// testHonestHostNotCapped (issue 27, item 1): the per-id bound of the
// seen-sets, which stops a flooding peer, capped an honest one — at
// SeenPerHost live ids every further request (and reply) of a host that
// simply called a lot was refused as seen-set-failed. A manager's ids are
// now sequenced per receiving queue and judged by a replay window, so a
// host calls well past the per-id bound (kept small here so the count is
// too) with nothing refused, across a restart of the receiver, and a
// replay of one of its requests is still refused after it.
func testHonestHostNotCapped(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	const share, calls = 25, 200
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta)
	for _, h := range []*testHost{alpha, beta} {
		h.cfg.SeenMax, h.cfg.SeenPerHost = 2*share, share
	}
	beta.cfg.Calls = &fakeCalls{}
	alpha.start(t)
	beta.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := json.RawMessage(`{"q":"x"}`)
	run := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		var failed atomic.Int32
		next := make(chan struct{}, n)
		for range n {
			next <- struct{}{}
		}
		close(next)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", args, CallOptions{}); err != nil {
						if failed.Add(1) == 1 {
							t.Errorf("call: %v", err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if f := failed.Load(); f != 0 {
			t.Fatalf("%d of %d calls failed (per-id share %d)", f, n, share)
		}
	}
	run(calls)
	for _, r := range []wire.Reason{wire.ReasonSeenSetFailed, wire.ReasonReplayed} {
		if n := testutil.ToFloat64(beta.fed.Metrics().Rejections.WithLabelValues(string(r))); n != 0 {
			t.Fatalf("beta refused %v of alpha's requests as %s", n, r)
		}
	}
	if n := beta.fed.seen.LenFrom(alpha.id); n != 0 {
		t.Fatalf("beta keeps %d of alpha's ids one by one; want them in a window", n)
	}
	// The receiver restarts: its windows come back from the file and the
	// same sender goes on with the same streams.
	beta.stop(t)
	beta.start(t)
	wait.For(t, 10*time.Second, "alpha sees beta again", wait.Bool(func() bool { hv, _ := hostIn(alpha.fed, beta.id); return hv.Online }))
	run(calls / 4)
	if w := beta.fed.seen.Windows(); w < 1 {
		t.Fatalf("beta holds %d windows after its restart", w)
	}
}

// BenchmarkCallsPaced measures calls from one host at a fixed rate of
// 1,000 calls/s (issue 27: "at 1,000 calls/s from one host"): alpha starts
// one call every millisecond (up to 256 in flight) on beta's fast handler;
// b.N is the number of calls, so the run is bounded in count
// (-benchtime 10000x is 10 s). It reports the rate reached, p50 and p99,
// and fails on any failed call.
//
//	go test -run '^$' -bench CallsPaced -benchtime 10000x ./federation
func BenchmarkCallsPaced(b *testing.B) {
	brokertest.EachB(b, func(b *testing.B, br *brokertest.Broker) {
		e := newFedEnv(b, br)
		alpha := e.newHost("alpha", hostOpts{noStart: true})
		beta := e.newHost("beta", hostOpts{noStart: true})
		trustEachOther(b, alpha, beta)
		beta.cfg.Calls = &fakeCalls{}
		alpha.start(b)
		beta.start(b)
		ctx := context.Background()
		args := json.RawMessage(`{"q":"x"}`)
		if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", args, CallOptions{}); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, b.N)
		var failed atomic.Int64
		sem := make(chan struct{}, 256)
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			// Catch up after a late tick: the schedule is i ms after start.
			if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
				<-tick.C
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				t0 := time.Now()
				if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", args, CallOptions{}); err != nil {
					if failed.Add(1) <= 3 {
						b.Error(err)
					}
				}
				lat[i] = time.Since(t0)
			}()
		}
		wg.Wait()
		el := time.Since(start)
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.ReportMetric(float64(beta.fed.seen.LenFrom(alpha.id)), "ids-kept")
	})
}

func TestReconnectWithinTwoBeats(t *testing.T) { brokertest.Each(t, testReconnectWithinTwoBeats) }

// testReconnectWithinTwoBeats (issue 27 item 4): after a broker outage
// longer than a few retries, presence came back on the reconnect
// backoff's time (doubling to 30 s: 4.5–8.5 s after the broker answered
// in the report), not the broker's. The retry interval is now capped at
// one heartbeat, so a host is shown online again within two heartbeats of
// its broker connection being possible again.
func testReconnectWithinTwoBeats(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	hb := time.Second
	alpha := e.newHost("alpha", hostOpts{heartbeat: hb, noStart: true})
	beta := e.newHost("beta", hostOpts{heartbeat: hb, noStart: true})
	trustEachOther(t, alpha, beta)
	alpha.start(t)
	beta.start(t)
	online := func() bool { hv, _ := hostIn(beta.fed, alpha.id); return hv.Online }
	wait.For(t, 10*time.Second, "beta sees alpha", wait.Bool(online))
	// alpha's broker is unreachable for 10 s: long enough for a doubling
	// backoff to reach 8 s.
	alpha.net.kill()
	wait.For(t, 10*time.Second, "alpha shown expired", wait.Bool(func() bool { return !online() }))
	time.Sleep(10*time.Second - ExpiryBeats*hb) // the outage's length is what is tested: a sleep
	alpha.net.revive()
	took := wait.For(t, 20*time.Second, "alpha online again", wait.Bool(online))
	if took > 2*hb {
		t.Fatalf("alpha's presence came back %s after its broker answered again, want ≤ 2 heartbeats (%s)", took.Round(time.Millisecond), 2*hb)
	}
	t.Logf("presence back %s after the broker answered", took.Round(time.Millisecond))
}

func TestClockSkewShown(t *testing.T) { brokertest.Each(t, testClockSkewShown) }

// testClockSkewShown (issue 27 item 3): presence was checked with the
// 30 s allowance requests use, so a host whose clock was off by more was
// hidden (its beats refused as not-yet-valid or expired). Presence is now
// judged on arrival, on the receiver's clock: alpha, 10 minutes ahead,
// is shown online at beta with its skew measured, and each side says
// the other's requests are refused, naming the skew, at once rather than
// after a timeout.
func testClockSkewShown(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	const ahead = 10 * time.Minute
	alpha := e.newHost("alpha", hostOpts{heartbeat: 500 * time.Millisecond, noStart: true})
	beta := e.newHost("beta", hostOpts{heartbeat: 500 * time.Millisecond, noStart: true})
	trustEachOther(t, alpha, beta)
	alpha.cfg.Now = func() time.Time { return time.Now().Add(ahead) }
	alpha.start(t)
	beta.start(t)
	wait.For(t, 10*time.Second, "beta shows alpha online", wait.Bool(func() bool { hv, _ := hostIn(beta.fed, alpha.id); return hv.Online }))
	wait.For(t, 10*time.Second, "alpha shows beta online", wait.Bool(func() bool { hv, _ := hostIn(alpha.fed, beta.id); return hv.Online }))
	hv, _ := hostIn(beta.fed, alpha.id)
	if d := hv.Skew - ahead; d > time.Second || d < -5*time.Second || !hv.SkewRefused {
		t.Fatalf("alpha's skew as beta measures it: %s refused=%v, want about +%s, refused", hv.Skew, hv.SkewRefused, ahead)
	}
	words := SkewWords(alpha.id, hv.Skew, DefaultClockSkew)
	if !strings.HasPrefix(words, alpha.id+"'s clock is 10m0s ahead: its requests are refused") {
		t.Fatalf("SkewWords: %q", words)
	}
	hv, _ = hostIn(alpha.fed, beta.id)
	if d := hv.Skew + ahead; d > 5*time.Second || d < -time.Second || !hv.SkewRefused {
		t.Fatalf("beta's skew as alpha measures it: %s", hv.Skew)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct{ from, to *testHost }{{alpha, beta}, {beta, alpha}} {
		t0 := time.Now()
		_, err := c.from.fed.Control(ctx, c.to.id, "status", "kb", nil)
		if !errors.Is(err, ErrClockSkew) || !strings.Contains(err.Error(), c.to.id+"'s clock is 10m") || time.Since(t0) > time.Second {
			t.Fatalf("%s → %s: %v after %s", c.from.id, c.to.id, err, time.Since(t0))
		}
	}
	if n := alpha.exec.count() + beta.exec.count(); n != 0 {
		t.Fatalf("%d requests ran across a 10-minute skew", n)
	}
}

func TestLateReplyWhileCancelling(t *testing.T) { brokertest.Each(t, testLateReplyWhileCancelling) }

// testLateReplyWhileCancelling (issue 27 item 7): a reply that arrived
// after the caller gave up but while its give-up (the signed cancel) was
// being published found the request still pending, went into a channel
// nobody read, and was neither delivered nor counted. The request stops
// being pending before the give-up runs, so such a reply is counted late.
func testLateReplyWhileCancelling(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta)
	beta.exec.delay = 200 * time.Millisecond
	alpha.start(t)
	beta.start(t)
	s := alpha.fed.current()
	if s == nil {
		t.Fatal("alpha not connected")
	}
	body, _ := json.Marshal(wire.ControlRequest{Verb: "status", Fleet: "kb", Reply: s.instance})
	late := func() float64 { return testutil.ToFloat64(alpha.fed.Metrics().RepliesDropped.WithLabelValues("late")) }
	// The give-up lasts until beta's answer has come back.
	giveUp := func(string) {
		wait.For(t, 10*time.Second, "beta ran the request", wait.Bool(func() bool { return beta.exec.count() == 1 }))
		time.Sleep(beta.exec.delay + 500*time.Millisecond) // beta answers once its delay is over; the reply needs a hop
	}
	_, err := alpha.fed.roundTrip(context.Background(), s, beta.id, wire.KindControlRequest, body, 100*time.Millisecond, wire.KindControlReply, nil, giveUp)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("round trip: %v", err)
	}
	wait.For(t, 5*time.Second, "the reply that came during the give-up counted late", wait.Bool(func() bool { return late() == 1 }))
}
