package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/fleetd"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestRemoteFleetTools, on each broker: alpha's mount drives beta's fleet
// through the broker (docs/ARCHITECTURE.md "Remote fleets"). alpha runs
// fleet kb on the host, beta fleet docs in a network namespace of its own;
// only the broker joins them.
//   - the official Go SDK client on alpha's HTTP mount lists each tool once,
//     with docs@beta beside kb in its fleet enum;
//   - fleet_whoami {"fleet":"docs@beta"} is answered by beta's docs fleetd
//     (it names docs), which sees beta's serve as its caller: primary;
//     the caller's _meta reaches it (the stand-in counts the request id
//     once);
//   - results of 1 KiB, 1 MiB and 10 MiB arrive intact through both mounts
//     (HTTP and `fleetmgr mcp` over the unix socket, the two fast paths),
//     and a call the go-sdk's own tool handler takes (the third entry
//     point) reaches beta too;
//   - progress from beta's fleetd reaches the caller in order, before the
//     result, with the caller's token;
//   - a cancelled call is cancelled on beta's fleetd (the stand-in records
//     it by request id);
//   - a call past alpha's call_timeout fails alone with a tool error, and
//     the next call on the same session works.
func TestRemoteFleetTools(t *testing.T) { brokertest.Each(t, testRemoteFleetTools) }

func testRemoteFleetTools(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}, alphaManager: `call_timeout = "6s"`})
	docs := peerview.RemoteName("docs", p.beta.host)
	fleets := []string{docs, "kb"}
	slices.Sort(fleets)
	c := connectRemoteHTTP(t, p.alpha.Env)
	tools := waitFleetEnum(t, c.cs, "fleet_whoami", fleets, 30*time.Second)
	seen := map[string]int{}
	for _, tl := range tools {
		seen[tl.Name]++
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("tool %s listed %d times", name, n)
		}
	}
	for _, name := range []string{"fleet_whoami", "fleet_slow", fleetd.EchoSizeTool} {
		if seen[name] != 1 {
			t.Fatalf("tool %s not listed: %v", name, seen)
		}
	}

	// fleet_whoami on docs@beta: beta's docs fleetd answers, and its caller
	// is beta's serve (primary).
	res, err := c.callTool(t, 20*time.Second, "fleet_whoami", map[string]any{"fleet": docs}, standinRequestID("who-1"))
	if err != nil {
		t.Fatal(err)
	}
	w := whoamiOf(t, res)
	if w.Fleet != "docs" || w.Role != fleetd.RolePrimary || w.CallerPID != p.beta.serve.Cmd.Process.Pid {
		t.Fatalf("fleet_whoami on %s: %+v; want fleet docs, primary, caller pid %d (beta's serve)", docs, w, p.beta.serve.Cmd.Process.Pid)
	}
	if n := standinExecutions(p.beta.events, "who-1"); n != 1 {
		t.Fatalf("beta's fleetd executed who-1 %d times", n)
	}
	if n := standinExecutions(p.alpha.events, "who-1"); n != 0 {
		t.Fatalf("alpha's fleetd executed who-1 %d times", n)
	}
	w = whoamiOf(t, call(t, c.cs, "fleet_whoami", map[string]any{"fleet": "kb"}))
	if w.Fleet != "kb" {
		t.Fatalf("fleet_whoami on kb: %+v", w)
	}

	// Results of 1 KiB, 1 MiB and 10 MiB through both fast paths.
	clients := map[string]*sizeClient{"http": connectSizeHTTP(t, p.alpha.Env), "stdio": connectSizeStdio(t, p.alpha.Env)}
	for _, mount := range []string{"http", "stdio"} {
		for _, n := range []int{1 << 10, 1 << 20, 10 << 20} {
			t.Run(fmt.Sprintf("%s/result/%d", mount, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, err := clients[mount].echoSize(ctx, docs, n, 0, "")
				if err == nil {
					err = checkEchoResult(out.res)
				}
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	// The SDK's own tool handler (a call on the unix socket after
	// initialize and before notifications/initialized is the SDK's, not
	// the fast path's) goes through the same call path.
	w = sdkPathWhoami(t, filepath.Join(p.alpha.StateDir, "fleetmgr.sock"), docs, "sdk-1")
	if w.Fleet != "docs" || w.Role != fleetd.RolePrimary || standinExecutions(p.beta.events, "sdk-1") != 1 {
		t.Fatalf("through the SDK's handler: %+v, executed %d times on beta", w, standinExecutions(p.beta.events, "sdk-1"))
	}

	// Progress: five steps from beta's fleetd, in order, before the result,
	// with the caller's own token.
	params := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": docs, "seconds": 0.5, "steps": 5}}
	params.SetProgressToken("remote-progress")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	res, err = c.cs.CallTool(ctx, params)
	cancel()
	if err != nil || res.IsError {
		t.Fatalf("fleet_slow on %s: %v %s", docs, err, textOf(res))
	}
	// (The client hands notifications to its handler on its own schedule.)
	wait.For(t, 5*time.Second, "5 progress notifications", func() (bool, string) {
		got := c.progressOf("remote-progress")
		return len(got) >= 5, fmt.Sprintf("%+v", got)
	})
	got := c.progressOf("remote-progress")
	if len(got) != 5 {
		t.Fatalf("%d progress notifications before the result, want 5: %+v", len(got), got)
	}
	for i, np := range got {
		if np.Progress != float64(i+1) || np.Total != 5 || np.Message != fmt.Sprintf("step %d/5", i+1) {
			t.Fatalf("progress %d: %+v", i, np)
		}
	}

	// On the wire (the unix socket's fast path, raw): the five progress
	// lines come before the response line, with the caller's token.
	rs := dialRawSocket(t, filepath.Join(p.alpha.StateDir, "fleetmgr.sock"), true)
	lines := rs.call(t, 2, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":%q,"seconds":0.5,"steps":5},"_meta":{"progressToken":"raw-tok"}}}`, docs))
	var steps []float64
	for _, l := range lines[:len(lines)-1] {
		var n struct {
			Method string                         `json:"method"`
			Params mcp.ProgressNotificationParams `json:"params"`
		}
		if json.Unmarshal(l, &n) == nil && n.Method == "notifications/progress" && n.Params.ProgressToken == "raw-tok" {
			steps = append(steps, n.Params.Progress)
		}
	}
	if !slices.Equal(steps, []float64{1, 2, 3, 4, 5}) {
		t.Fatalf("progress lines before the response on the socket: %v\n%s", steps, lines)
	}

	// Cancellation reaches beta's fleetd.
	ctx, cancel = context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": docs, "seconds": 30, "steps": 3},
			Meta: standinRequestID("cancel-1")})
		errc <- err
	}()
	waitStandinEvent(t, p.beta.events, "executed fleet_slow request-id=cancel-1", 10*time.Second)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	waitStandinEvent(t, p.beta.events, "cancelled fleet_slow request-id=cancel-1", 10*time.Second)

	// A call past call_timeout (6 s) fails alone; beta's fleetd is told.
	t0 := time.Now()
	res, err = c.callTool(t, 30*time.Second, "fleet_slow", map[string]any{"fleet": docs, "seconds": 30, "steps": 3}, standinRequestID("timeout-1"))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); !res.IsError || !strings.Contains(textOf(res), "did not answer within 6s (call_timeout)") || el > 12*time.Second {
		t.Fatalf("a call past call_timeout after %s: %s", el, textOf(res))
	}
	waitStandinEvent(t, p.beta.events, "cancelled fleet_slow request-id=timeout-1", 10*time.Second)
	if w := whoamiOf(t, call(t, c.cs, "fleet_whoami", map[string]any{"fleet": docs})); w.Fleet != "docs" {
		t.Fatalf("after a timeout: %+v", w)
	}
	if n := standinExecutions(p.beta.events, "timeout-1"); n != 1 {
		t.Fatalf("timeout-1 executed %d times", n)
	}

	// `fleetmgr status` shows the calls to beta and their round trips.
	var rep status.Report
	if err := json.Unmarshal([]byte(p.alpha.MustRun("status", "--json").Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var calls *peerview.Calls
	if rep.Federation != nil {
		for _, h := range rep.Federation.Hosts {
			if h.Host == p.beta.host {
				calls = h.Calls
			}
		}
	}
	if calls == nil || calls.Calls < 10 || calls.Answered >= calls.Calls || calls.RTTP50MS <= 0 || calls.RTTP99MS < calls.RTTP50MS {
		t.Fatalf("status of alpha: calls to beta %+v (federation %+v)", calls, rep.Federation)
	}
	if text := p.alpha.MustRun("status").Stdout; !strings.Contains(text, "call(s), round trip p50 ") {
		t.Fatalf("status table of alpha:\n%s", text)
	}
	waitRemoteMetric(t, p.alpha.Env, fmt.Sprintf(`fleetmgr_remote_calls_total{host=%q,outcome="timeout"} 1`, p.beta.host), 5*time.Second)
	if m := remoteMetricsText(t, p.alpha.Env); !strings.Contains(m, fmt.Sprintf(`fleetmgr_remote_call_rtt_seconds_count{host=%q}`, p.beta.host)) ||
		!strings.Contains(m, fmt.Sprintf(`fleetmgr_tool_calls_total{fleet=%q,outcome="ok",tool="fleet_whoami"}`, docs)) {
		t.Fatalf("alpha's /metrics lacks the remote call series")
	}
}

// rawSocket is a JSON-RPC session on fleetmgr's unix socket, line by line.
type rawSocket struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialRawSocket connects to sock and initializes; with initialized it also
// sends notifications/initialized (from then on the socket's fast path
// takes fleet tool calls; before it, the go-sdk server does).
func dialRawSocket(t *testing.T, sock string, initialized bool) *rawSocket {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	rs := &rawSocket{conn: conn, r: bufio.NewReader(conn)}
	rs.call(t, 1, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e-raw","version":"1"}}}`)
	if initialized {
		rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	}
	return rs
}

func (rs *rawSocket) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := rs.conn.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
}

// call sends msg (a request with id) and returns every line read up to
// and including its response.
func (rs *rawSocket) call(t *testing.T, id int, msg string) [][]byte {
	t.Helper()
	rs.send(t, msg)
	var lines [][]byte
	for {
		line, err := rs.r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the answer to %d: %v", id, err)
		}
		lines = append(lines, line)
		var m struct {
			ID    *int            `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &m) == nil && m.ID != nil && *m.ID == id {
			if m.Error != nil {
				t.Fatalf("request %d: error %s", id, m.Error)
			}
			return lines
		}
	}
}

// sdkPathWhoami calls fleet_whoami on fleet over the unix socket at sock
// right after initialize, before notifications/initialized: the socket's
// fast path takes calls only once a session is set up, so this call is
// the go-sdk server's (Proxy.forward). id is its stand-in request id.
func sdkPathWhoami(t *testing.T, sock, fleet, id string) fleetd.WhoamiResult {
	t.Helper()
	rs := dialRawSocket(t, sock, false)
	lines := rs.call(t, 2, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":%q},"_meta":{%q:%q}}}`,
		fleet, fleetd.RequestIDMetaKey, id))
	var m struct {
		Result mcp.CallToolResult `json:"result"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &m); err != nil {
		t.Fatal(err)
	}
	return whoamiOf(t, &m.Result)
}

// TestRemoteHostGone, on each broker: what a caller on alpha sees when
// beta's manager goes away, and that nothing runs twice.
//   - beta's serve killed (SIGKILL) during a slow call: the caller gets a
//     tool error naming beta and its last-seen time as soon as alpha sees
//     beta expire (3 heartbeats), well within call_timeout;
//   - beta's tools stay listed; a call now is a tool error saying beta
//     stopped answering, when it was last seen and what to do;
//   - beta's serve started again: the next call on the same client
//     session works, and the killed call was executed once only (the
//     stand-in counts executions by request id);
//   - a clean stop of beta's serve shows at once (it announces going
//     offline); alpha's serve restarted meanwhile still lists docs@beta
//     from its cache on disk, and its error gives beta's last-seen time
//     from before the restart.
func TestRemoteHostGone(t *testing.T) { brokertest.Each(t, testRemoteHostGone) }

func testRemoteHostGone(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}, alphaManager: `call_timeout = "20s"`})
	docs := peerview.RemoteName("docs", p.beta.host)
	fleets := []string{docs, "kb"}
	slices.Sort(fleets)
	c := connectRemoteHTTP(t, p.alpha.Env)
	waitFleetEnum(t, c.cs, "fleet_whoami", fleets, 30*time.Second)
	if w := whoamiOf(t, call(t, c.cs, "fleet_whoami", map[string]any{"fleet": docs})); w.Fleet != "docs" {
		t.Fatalf("fleet_whoami on %s: %+v", docs, w)
	}

	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.callTool(t, 60*time.Second, "fleet_slow", map[string]any{"fleet": docs, "seconds": 60, "steps": 3}, standinRequestID("killed-1"))
		done <- outcome{res, err}
	}()
	waitStandinEvent(t, p.beta.events, "executed fleet_slow request-id=killed-1", 10*time.Second)
	t0 := time.Now()
	p.beta.killServe(t)
	o := <-done
	el := time.Since(t0)
	if o.err != nil {
		t.Fatal(o.err)
	}
	text := textOf(o.res)
	if !o.res.IsError || !strings.Contains(text, "host "+p.beta.host+" stopped answering") || !strings.Contains(text, "last seen") ||
		!strings.Contains(text, "may have run on "+p.beta.host+"; check before calling it again") || el > 10*time.Second {
		t.Fatalf("after beta's serve was killed, %s later: %s", el, text)
	}
	t.Logf("the caller heard of beta's end %s after the kill: %s", el.Round(time.Millisecond), text)

	// Still listed; a call is a tool error saying what happened and what to do.
	waitFleetEnum(t, c.cs, "fleet_whoami", fleets, time.Second)
	res, err := c.callTool(t, 10*time.Second, "fleet_whoami", map[string]any{"fleet": docs}, standinRequestID("while-down"))
	if err != nil {
		t.Fatal(err)
	}
	if text := textOf(res); !res.IsError || !strings.Contains(text, "stopped answering") || !strings.Contains(text, "last seen") ||
		!strings.Contains(text, "fleetmgr serve") {
		t.Fatalf("a call to %s while beta is down: %s", docs, text)
	}

	// beta back: the next call on the same session works.
	p.beta.startServe()
	waitRemoteWhoami(t, c, docs, 20*time.Second)
	// A request redelivered to beta's new serve would run now; give it a beat.
	wait.Never(t, time.Second, "a killed or refused call executed again", func() (bool, string) {
		k, d := standinExecutions(p.beta.events, "killed-1"), standinExecutions(p.beta.events, "while-down")
		return k != 1 || d != 0, fmt.Sprintf("killed-1 executed %d times (want 1), while-down %d (want 0)", k, d)
	})

	// A clean stop shows at once; alpha restarted lists docs@beta from its
	// cache and still knows when beta was last seen.
	p.beta.stopServe(t)
	wait.For(t, 5*time.Second, "beta's clean stop seen", func() (bool, string) {
		res, err := c.callTool(t, 10*time.Second, "fleet_whoami", map[string]any{"fleet": docs}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(textOf(res), "announced going offline"), textOf(res)
	})
	p.alpha.stopServe(t)
	p.alpha.startServe()
	c2 := connectRemoteHTTP(t, p.alpha.Env)
	waitFleetEnum(t, c2.cs, "fleet_whoami", fleets, time.Second)
	res, err = c2.callTool(t, 10*time.Second, "fleet_whoami", map[string]any{"fleet": docs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if text := textOf(res); !res.IsError || !strings.Contains(text, "has not been heard from since this manager started, last seen") {
		t.Fatalf("after alpha's restart, with beta down: %s", text)
	}
}

// waitRemoteWhoami calls fleet_whoami on fleet (a remote one) until it
// answers (its host back in the view), at most d.
func waitRemoteWhoami(t *testing.T, c *remoteClient, fleet string, d time.Duration) {
	t.Helper()
	name, _, _ := peerview.SplitRemote(fleet)
	wait.For(t, d, "fleet_whoami on "+fleet+" to answer", func() (bool, string) {
		res, err := c.callTool(t, 10*time.Second, "fleet_whoami", map[string]any{"fleet": fleet}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			return false, textOf(res)
		}
		if w := whoamiOf(t, res); w.Fleet != name {
			t.Fatalf("fleet_whoami on %s: %+v", fleet, w)
		}
		return true, ""
	})
}

// TestRemoteCallRefusals, on each broker: what may not reach beta's fleetd
// does not, and what may not reach alpha's caller does not.
//   - a genuine call request captured on the broker and published again
//     (a replay) is dead-lettered as replayed and not executed again;
//   - a reply to alpha's pending call signed by gamma (a host alpha trusts,
//     but not the one the call went to) is dropped and counted
//     (from-mismatch); the caller gets beta's genuine result;
//   - a call request signed by a key beta does not trust is dead-lettered
//     (untrusted-key) and never executed;
//   - with alpha's trust line on beta narrowed to read,control, alpha's
//     call is refused with the reason and what to do, dead-lettered
//     (not-authorised) and never executed.
func TestRemoteCallRefusals(t *testing.T) { brokertest.Each(t, testRemoteCallRefusals) }

func testRemoteCallRefusals(t *testing.T, b *brokertest.Broker) {
	gammaKey, mallory := remoteTestKey(t), remoteTestKey(t)
	tag := brokertest.Unique("g")[2:8]
	gamma := "gamma-" + tag
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}, alphaManager: `call_timeout = "20s"`,
		alphaTrusts: []string{identity.FormatTrustLine(gamma, identity.PublicKey(gammaKey), identity.CapAll)}})
	docs := peerview.RemoteName("docs", p.beta.host)
	c := connectRemoteHTTP(t, p.alpha.Env)
	fleets := []string{docs, "kb"}
	slices.Sort(fleets)
	waitFleetEnum(t, c.cs, "fleet_whoami", fleets, 30*time.Second)
	admin := remoteAdminChannel(t, b, p.vhost)
	capture := "capture-" + tag
	if _, err := admin.QueueDeclare(capture, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueueBind(capture, p.beta.host, federation.ExchangeControl, false, nil); err != nil {
		t.Fatal(err)
	}

	// A call alpha makes; its request is captured on the way.
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.callTool(t, 30*time.Second, "fleet_slow", map[string]any{"fleet": docs, "seconds": 2, "steps": 2}, standinRequestID("genuine-1"))
		done <- outcome{res, err}
	}()
	req := captureCallRequest(t, admin, capture, 10*time.Second)
	var body struct {
		Reply string `json:"reply"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	// gamma answers it, as if it were beta.
	now := time.Now()
	forged := &wire.Envelope{Kind: wire.KindCallReply, ID: wire.NewID(), Re: req.Headers[wire.HdrID].(string), Seq: 1,
		From: gamma, To: p.alpha.host, Issued: now, Expires: now.Add(time.Minute),
		Body: []byte(`{"result":{"content":[{"type":"text","text":"forged"}],"structuredContent":{"fleet":"forged","completed":true}}}`)}
	remotePublishSealed(t, admin, federation.ReplyExchange(p.alpha.host), body.Reply, forged, gammaKey)
	o := <-done
	if o.err != nil || o.res.IsError || strings.Contains(textOf(o.res), "forged") || !strings.Contains(textOf(o.res), `"fleet":"docs"`) {
		t.Fatalf("alpha's caller got %v %s; want beta's genuine result", o.err, textOf(o.res))
	}
	waitRemoteMetric(t, p.alpha.Env, `fleetmgr_federation_replies_dropped_total{reason="from-mismatch"} 1`, 5*time.Second)

	// The captured request, published again: a replay.
	remotePublishRaw(t, admin, federation.ExchangeControl, p.beta.host, req.Headers, req.Body)
	dl := waitRemoteDeadLetter(t, admin, req.Headers[wire.HdrID].(string), 10*time.Second)
	if dl.Headers[wire.HdrRejectReason] != string(wire.ReasonReplayed) {
		t.Fatalf("the replayed request was dead-lettered with %v", dl.Headers)
	}

	// A call request signed by a key beta does not trust.
	now = time.Now()
	untrusted := &wire.Envelope{Kind: wire.KindCallRequest, ID: wire.NewID(), From: p.alpha.host, To: p.beta.host, Issued: now, Expires: now.Add(time.Minute),
		Body: fmt.Appendf(nil, `{"fleet":"docs","tool":"fleet_whoami","arguments":{},"_meta":{%q:"untrusted-1"},"reply":%q}`, fleetd.RequestIDMetaKey, body.Reply)}
	remotePublishSealed(t, admin, federation.ExchangeControl, p.beta.host, untrusted, mallory)
	if dl := waitRemoteDeadLetter(t, admin, untrusted.ID, 10*time.Second); dl.Headers[wire.HdrRejectReason] != string(wire.ReasonUntrustedKey) {
		t.Fatalf("the untrusted call request was dead-lettered with %v", dl.Headers)
	}
	// beta journalled the refusals made before any executor ran (issue
	// 25): the replay and the untrusted key, with the claimed sender; and
	// alpha the forged reply it dropped.
	for _, w := range []struct {
		e      *remoteHostEnv
		reason wire.Reason
	}{{p.beta, wire.ReasonReplayed}, {p.beta, wire.ReasonUntrustedKey}, {p.alpha, wire.ReasonFromMismatch}} {
		wait.For(t, 10*time.Second, w.e.host+"'s journal of the "+string(w.reason)+" refusal", func() (bool, string) {
			evs := eventsJSON(t, w.e.Env, "--kind", journal.KindFederation)
			for _, ev := range evs {
				if ev.Outcome == "refused: "+string(w.reason) && ev.Data["reason"] == string(w.reason) && strings.HasPrefix(ev.Origin, "claimed peer ") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", evs)
		})
	}

	// alpha may read and control on beta, not call.
	p.beta.stopServe(t)
	remoteNarrowTrust(t, p.beta.Env, p.alpha.host, "read,control")
	p.beta.startServe()
	var res *mcp.CallToolResult
	wait.For(t, 20*time.Second, "beta back with narrowed trust", func() (bool, string) {
		var err error
		res, err = c.callTool(t, 20*time.Second, "fleet_whoami", map[string]any{"fleet": docs}, standinRequestID("narrowed-1"))
		if err != nil {
			t.Fatal(err)
		}
		return !strings.Contains(textOf(res), "stopped answering") && !strings.Contains(textOf(res), "offline"), textOf(res)
	})
	t.Logf("narrowed: %s", textOf(res))
	if text := textOf(res); !res.IsError || !strings.Contains(text, "refused the call of fleet_whoami (not-authorised)") || !strings.Contains(text, "`calls`") {
		t.Fatalf("a call without the calls capability: %s", text)
	}
	waitRemoteDeadLetterReason(t, admin, wire.ReasonNotAuthorised, 10*time.Second)

	// Nothing refused was executed; the genuine call ran once.
	wait.Never(t, 500*time.Millisecond, "an execution count on beta other than genuine-1: 1, untrusted-1: 0, narrowed-1: 0", func() (bool, string) {
		for id, want := range map[string]int{"genuine-1": 1, "untrusted-1": 0, "narrowed-1": 0} {
			if n := standinExecutions(p.beta.events, id); n != want {
				return true, fmt.Sprintf("%s executed %d times, want %d", id, n, want)
			}
		}
		return false, ""
	})
}
