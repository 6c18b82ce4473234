package federation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestCalls(t *testing.T) { brokertest.Each(t, testCalls) }

// fakeCalls is a CallHandler standing in for the proxy and its fleets.
// Tools: echo (returns its arguments and _meta), big {"size":N} (a text
// of N bytes), progress {"n":N} (N progress, then a result), slow (waits
// for its context), fail (a JSON-RPC error).
type fakeCalls struct {
	mu        sync.Mutex
	calls     []string // fleet/tool of each call served
	cancelled []string // tools whose context ended before they did
}

func (c *fakeCalls) Call(ctx context.Context, from, fleet, tool string, args, meta json.RawMessage, progress func(json.RawMessage)) (json.RawMessage, error) {
	c.mu.Lock()
	c.calls = append(c.calls, fleet+"/"+tool)
	c.mu.Unlock()
	var a struct {
		Size int `json:"size"`
		N    int `json:"n"`
	}
	_ = json.Unmarshal(args, &a)
	text := func(s string) (json.RawMessage, error) {
		return json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": s}}})
	}
	switch tool {
	case "echo":
		return text(fmt.Sprintf("from=%s fleet=%s args=%s meta=%s", from, fleet, args, meta))
	case "big":
		return text(strings.Repeat("y", a.Size))
	case "progress":
		for i := 1; i <= a.N; i++ {
			progress(json.RawMessage(fmt.Sprintf(`{"progress":%d,"total":%d}`, i, a.N)))
		}
		return text("done")
	case "slow":
		<-ctx.Done()
		c.mu.Lock()
		c.cancelled = append(c.cancelled, tool)
		c.mu.Unlock()
		return nil, ctx.Err()
	case "fail":
		return nil, &RPCError{Code: -32602, Message: "bad arguments", Data: json.RawMessage(`{"field":"x"}`)}
	}
	return nil, errors.New("no such tool")
}

func (c *fakeCalls) Catalogue(ctx context.Context, from, fleet string) (json.RawMessage, string, error) {
	tools := json.RawMessage(`[{"name":"echo","inputSchema":{"type":"object"}}]`)
	sum := sha256.Sum256(tools)
	return tools, fmt.Sprintf("%x", sum), nil
}

func (c *fakeCalls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

func (c *fakeCalls) wasCancelled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cancelled)
}

func resultText(t *testing.T, res json.RawMessage) string {
	t.Helper()
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) != 1 {
		t.Fatalf("result %.200s: %v", res, err)
	}
	return r.Content[0].Text
}

// testCalls: remote tool calls through the broker — results of 1 KiB,
// 1 MiB and 10 MiB intact, progress in order, a cancellation and a
// timeout reaching the handler, a JSON-RPC error relayed, authorisation,
// catalogue, and a replayed call never run twice.
func testCalls(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	gamma := e.newHost("gamma", hostOpts{noStart: true})
	tr, _ := identity.ParseTrust([]string{alpha.line(identity.CapAll), gamma.line(identity.CapRead)})
	beta.cfg.Trust = tr
	tr, _ = identity.ParseTrust([]string{beta.line(identity.CapAll), gamma.line(identity.CapAll)})
	alpha.cfg.Trust = tr
	tr, _ = identity.ParseTrust([]string{beta.line(identity.CapAll), alpha.line(identity.CapAll)})
	gamma.cfg.Trust = tr
	fc := &fakeCalls{}
	beta.cfg.Calls = fc
	alpha.start(t)
	beta.start(t)
	gamma.start(t)
	ctx := context.Background()

	res, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", json.RawMessage(`{"q":"hi"}`), CallOptions{Meta: json.RawMessage(`{"trace":"t1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, res); got != `from=`+alpha.id+` fleet=docs args={"q":"hi"} meta={"trace":"t1"}` {
		t.Fatalf("echo: %s", got)
	}

	for _, size := range []int{1 << 10, 1 << 20, 10 << 20} {
		start := time.Now()
		res, err := alpha.fed.Call(ctx, beta.id, "docs", "big", json.RawMessage(fmt.Sprintf(`{"size":%d}`, size)), CallOptions{Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		want, _ := fc.Call(ctx, "", "", "big", json.RawMessage(fmt.Sprintf(`{"size":%d}`, size)), nil, nil)
		if !bytes.Equal(res, want) {
			t.Fatalf("%d bytes: result differs (%d bytes back)", size, len(res))
		}
		t.Logf("%8d-byte text: %s", size, time.Since(start).Round(time.Millisecond))
	}

	var got []string
	res, err = alpha.fed.Call(ctx, beta.id, "docs", "progress", json.RawMessage(`{"n":20}`), CallOptions{Progress: func(p json.RawMessage) {
		got = append(got, string(p))
	}})
	if err != nil || resultText(t, res) != "done" {
		t.Fatalf("progress call: %s %v", res, err)
	}
	if len(got) != 20 || got[0] != `{"progress":1,"total":20}` || got[19] != `{"progress":20,"total":20}` {
		t.Fatalf("progress relayed: %d, %v", len(got), got)
	}
	for i := range got {
		if got[i] != fmt.Sprintf(`{"progress":%d,"total":20}`, i+1) {
			t.Fatalf("progress out of order at %d: %v", i, got)
		}
	}

	// A JSON-RPC error is relayed as it is.
	_, err = alpha.fed.Call(ctx, beta.id, "docs", "fail", nil, CallOptions{})
	var re *RPCError
	if !errors.As(err, &re) || re.Code != -32602 || re.Message != "bad arguments" || string(re.Data) != `{"field":"x"}` {
		t.Fatalf("rpc error: %v", err)
	}

	// The caller cancels: the call's context ends on beta.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	n := fc.count()
	go func() {
		_, err := alpha.fed.Call(cctx, beta.id, "docs", "slow", nil, CallOptions{Timeout: time.Minute})
		done <- err
	}()
	wait.For(t, 5*time.Second, "slow call running", wait.Bool(func() bool { return fc.count() == n+1 }))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	wait.For(t, 5*time.Second, "cancellation reaching beta", wait.Bool(func() bool { return fc.wasCancelled() == 1 }))

	// A timeout fails that call only, and cancels it upstream.
	start := time.Now()
	_, err = alpha.fed.Call(ctx, beta.id, "docs", "slow", nil, CallOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 3*time.Second {
		t.Fatalf("timeout: %v after %s", err, time.Since(start))
	}
	wait.For(t, 5*time.Second, "timeout cancelling beta's call", wait.Bool(func() bool { return fc.wasCancelled() == 2 }))
	if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", nil, CallOptions{}); err != nil {
		t.Fatalf("after a timeout: %v", err)
	}

	// gamma may read: catalogue yes, calls no (refused, never run).
	tools, hash, err := gamma.fed.Catalogue(ctx, beta.id, "docs")
	if err != nil || !strings.Contains(string(tools), `"echo"`) || len(hash) != 64 {
		t.Fatalf("catalogue: %s %s %v", tools, hash, err)
	}
	n = fc.count()
	_, err = gamma.fed.Call(ctx, beta.id, "docs", "echo", nil, CallOptions{})
	var ce *ControlError
	if !errors.As(err, &ce) || !errors.Is(err, ErrRefused) || ce.Reason != wire.ReasonNotAuthorised || fc.count() != n {
		t.Fatalf("call by a read-only peer: %v (%d calls)", err, fc.count()-n)
	}
	// gamma serves no calls: refused with a reason, not a timeout.
	if _, err := alpha.fed.Call(ctx, gamma.id, "docs", "echo", nil, CallOptions{}); !errors.Is(err, ErrRefused) {
		t.Fatalf("call to a host without a call handler: %v", err)
	}

	// A replayed call request is dead-lettered and never forwarded again.
	admin := e.adminChannel()
	if _, err := admin.QueueDeclare("capture", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueueBind("capture", beta.id, ExchangeControl, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.fed.Call(ctx, beta.id, "docs", "echo", nil, CallOptions{}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := admin.Get("capture", true)
	if err != nil || !ok {
		t.Fatalf("capture: %v %v", ok, err)
	}
	n = fc.count()
	publishRaw(t, admin, ExchangeControl, beta.id, d.Headers, d.Body)
	var dlq []dlqMessage
	e.waitDLQ(admin, &dlq, "replayed call", func(m dlqMessage) bool { return m.ID == d.Headers[wire.HdrID] && m.Reason == "replayed" })
	if fc.count() != n {
		t.Fatal("replayed call forwarded")
	}
	if got := testutil.ToFloat64(beta.fed.Metrics().Calls.WithLabelValues("in", alpha.id, "ok")); got < 5 {
		t.Fatalf("calls{in,alpha,ok} = %v", got)
	}
}
