package federation

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestPresence(t *testing.T)                { brokertest.Each(t, testPresence) }
func TestControl(t *testing.T)                 { brokertest.Each(t, testControl) }
func TestRejectionMatrix(t *testing.T)         { brokertest.Each(t, testRejectionMatrix) }
func TestForgedPresence(t *testing.T)          { brokertest.Each(t, testForgedPresence) }
func TestLeastPrivilege(t *testing.T)          { brokertest.Each(t, testLeastPrivilege) }
func TestHostIDsAreUnique(t *testing.T)        { brokertest.Each(t, testHostIDsAreUnique) }
func TestControlTimeouts(t *testing.T)         { brokertest.Each(t, testControlTimeouts) }
func TestProvisionIdempotent(t *testing.T)     { brokertest.Each(t, testProvisionIdempotent) }
func TestAtMostOnce(t *testing.T)              { brokertest.Each(t, testAtMostOnce) }
func TestRepliesNotMisdelivered(t *testing.T)  { brokertest.Each(t, testRepliesNotMisdelivered) }
func TestImpostorRefused(t *testing.T)         { brokertest.Each(t, testImpostorRefused) }
func TestRefusedHostReprovisions(t *testing.T) { brokertest.Each(t, testRefusedHostReprovisions) }

var kb = wire.FleetSummary{Name: "kb", State: "running", UptimeS: 42, Restarts: 1, Members: 3,
	Verdicts: map[string]int{"WORKING": 2, "IDLE": 1}, Catalogue: strings.Repeat("ab", 32)}

// testPresence: presence both ways within 2 beats; a killed host expires
// after 3 missed beats (not sooner, and within one more); a clean stop is
// offline at once; a restart is back.
func testPresence(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	const hb = time.Second
	alpha := e.newHost("alpha", hostOpts{heartbeat: hb, noStart: true})
	beta := e.newHost("beta", hostOpts{heartbeat: hb, noStart: true})
	trustEachOther(t, alpha, beta)
	beta.src.set(kb, wire.FleetSummary{Name: "docs", State: "stopped"})
	alpha.src.set(wire.FleetSummary{Name: "web", State: "failed", CrashLoop: true, Restarts: 5})
	alpha.start(t)
	t0 := time.Now()
	beta.start(t)
	wait.For(t, 2*hb, "alpha sees beta online", wait.Bool(func() bool {
		hv, _ := hostIn(alpha.fed, beta.id)
		return hv.Online && len(hv.Fleets) == 2
	}))
	wait.For(t, 2*hb, "beta sees alpha online", wait.Bool(func() bool { hv, _ := hostIn(beta.fed, alpha.id); return hv.Online }))
	t.Logf("both see each other %s after the second host began to connect", time.Since(t0))
	hv, _ := hostIn(alpha.fed, beta.id)
	if hv.Fleets[0].Name != "docs" || hv.Fleets[1].Name != "kb" || hv.Fleets[1].Verdicts["WORKING"] != 2 ||
		hv.Fleets[1].Catalogue != kb.Catalogue || hv.Heartbeat != hb {
		t.Fatalf("beta as alpha sees it: %+v", hv)
	}
	if av, _ := hostIn(beta.fed, alpha.id); !av.Fleets[0].CrashLoop || av.Fleets[0].State != "failed" {
		t.Fatalf("alpha as beta sees it: %+v", av)
	}
	for _, v := range alpha.fed.View() {
		if v.Host == alpha.id {
			t.Fatal("a host lists itself")
		}
	}
	if n := testutil.ToFloat64(alpha.fed.Metrics().PresenceReceived.WithLabelValues(beta.id)); n < 1 {
		t.Fatalf("presence received counter %v", n)
	}
	// A change of beta's fleets shows within a beat.
	beta.src.set(kb)
	wait.For(t, 2*hb, "beta's fleet change", wait.Bool(func() bool { hv, _ := hostIn(alpha.fed, beta.id); return len(hv.Fleets) == 1 }))

	// kill: beta's connection dies without a word.
	before, _ := hostIn(alpha.fed, beta.id)
	beta.kill(t)
	var expiredAt time.Time
	wait.For(t, (ExpiryBeats+2)*hb, "alpha shows beta expired", wait.Bool(func() bool {
		hv, _ := hostIn(alpha.fed, beta.id)
		if hv.State == HostExpired {
			expiredAt = time.Now()
			return true
		}
		return false
	}))
	hv, _ = hostIn(alpha.fed, beta.id)
	gap := expiredAt.Sub(hv.LastSeen)
	t.Logf("expired %s after beta's last beat (3 beats = %s)", gap, ExpiryBeats*hb)
	if gap < ExpiryBeats*hb || gap > (ExpiryBeats+1)*hb {
		t.Fatalf("expired %s after the last beat; want between 3 and 4 beats", gap)
	}
	if len(hv.Fleets) != 1 || hv.Fleets[0].Name != "kb" || !hv.LastSeen.Equal(before.LastSeen) && hv.LastSeen.Before(before.LastSeen) {
		t.Fatalf("expired host's fleets not kept: %+v", hv)
	}
	// The gauge follows at the next sweep (a quarter beat).
	wait.For(t, hb/2, "hosts_online to drop to 0", wait.Bool(func() bool { return testutil.ToFloat64(alpha.fed.Metrics().HostsOnline) == 0 }))

	// restart → back; clean stop → offline at once.
	beta.start(t)
	wait.For(t, 2*hb, "beta back online", wait.Bool(func() bool { hv, _ := hostIn(alpha.fed, beta.id); return hv.Online }))
	stopAt := time.Now()
	beta.stop(t)
	wait.For(t, hb/2, "alpha shows beta offline at once", wait.Bool(func() bool {
		hv, _ := hostIn(alpha.fed, beta.id)
		return hv.State == HostOffline
	}))
	t.Logf("offline shown %s after Stop was called", time.Since(stopAt))
	// Offline stays offline (no late presence revives it).
	wait.Never(t, hb+hb/2, "beta revived after its clean stop", func() (bool, string) {
		hv, _ := hostIn(alpha.fed, beta.id)
		return hv.State != HostOffline || len(hv.Fleets) != 1, fmt.Sprintf("%+v", hv)
	})
}

// testControl: request/reply, failure, refusal by capability, and the
// executor only ever runs what was asked, once.
func testControl(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	gamma := e.newHost("gamma", hostOpts{noStart: true})
	// beta trusts alpha fully, gamma for reading only.
	tr, _ := identity.ParseTrust([]string{alpha.line(identity.CapAll), gamma.line(identity.CapRead)})
	beta.cfg.Trust = tr
	tr, _ = identity.ParseTrust([]string{beta.line(identity.CapAll)})
	alpha.cfg.Trust, gamma.cfg.Trust = tr, tr
	alpha.start(t)
	beta.start(t)
	gamma.start(t)
	beta.exec.fail = map[string]string{"broken": "fleet broken: fleetd exited with status 3"}
	ctx := context.Background()

	res, err := alpha.fed.Control(ctx, beta.id, "stop", "kb", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal(res, &out); err != nil || out["done"] != "stop" || out["fleet"] != "kb" {
		t.Fatalf("result %s (%v)", res, err)
	}
	if c := beta.exec.snapshot(); len(c) != 1 || c[0] != (execCall{alpha.id, "stop", "kb", ""}) {
		t.Fatalf("executions %+v", c)
	}
	if _, err := alpha.fed.Control(ctx, beta.id, "logs", "kb", json.RawMessage(`{"lines":20}`)); err != nil {
		t.Fatal(err)
	}
	if c := beta.exec.snapshot(); c[1].Args != `{"lines":20}` {
		t.Fatalf("args %q", c[1].Args)
	}

	_, err = alpha.fed.Control(ctx, beta.id, "restart", "broken", nil)
	var ce *ControlError
	if !errors.As(err, &ce) || !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "fleetd exited with status 3") {
		t.Fatalf("failing verb: %v", err)
	}

	// gamma may read, not control: refused, dead-lettered, never executed.
	n := beta.exec.count()
	if _, err := gamma.fed.Control(ctx, beta.id, "status", "kb", nil); err != nil {
		t.Fatalf("read verb for a read-only peer: %v", err)
	}
	_, err = gamma.fed.Control(ctx, beta.id, "start", "kb", nil)
	if !errors.Is(err, ErrRefused) || !errors.As(err, &ce) || ce.Reason != wire.ReasonNotAuthorised {
		t.Fatalf("start by a read-only peer: %v", err)
	}
	if beta.exec.count() != n+1 {
		t.Fatalf("refused request executed: %+v", beta.exec.snapshot())
	}
	admin := e.adminChannel()
	var dlq []dlqMessage
	e.waitDLQ(admin, &dlq, "not-authorised", func(m dlqMessage) bool { return m.Reason == "not-authorised" && m.By == beta.id })

	// Concurrent requests: each answered with its own result.
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			fleet := "f" + string(rune('a'+i))
			res, err := alpha.fed.Control(ctx, beta.id, "status", fleet, nil)
			if err == nil && !strings.Contains(string(res), `"fleet":"`+fleet+`"`) {
				err = errors.New("wrong result " + string(res) + " for " + fleet)
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(beta.fed.Metrics().ControlRequests.WithLabelValues("in", "status", "ok")); got != 9 {
		t.Fatalf("in/status/ok = %v, want 9", got)
	}
	if got := testutil.ToFloat64(gamma.fed.Metrics().ControlRequests.WithLabelValues("out", "start", "refused")); got != 1 {
		t.Fatalf("out/start/refused = %v", got)
	}
	// Results around the reply's cap: just under arrives whole, over is a
	// failure saying so.
	beta.exec.mu.Lock()
	beta.exec.big = map[string]int{"under": wire.MaxControlReply - 1024, "over": wire.MaxControlReply}
	beta.exec.mu.Unlock()
	res, err = alpha.fed.Control(ctx, beta.id, "logs", "under", nil)
	if err != nil || len(res) != wire.MaxControlReply-1024+2 {
		t.Fatalf("result under the cap: %d bytes, %v", len(res), err)
	}
	if _, err := alpha.fed.Control(ctx, beta.id, "logs", "over", nil); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "more than a reply carries") {
		t.Fatalf("result over the cap: %v", err)
	}

	// Argument checks happen before anything is sent.
	for _, c := range [][3]string{{"Beta", "stop", "kb"}, {beta.id, "explode", "kb"}, {beta.id, "stop", "../kb"}} {
		if _, err := alpha.fed.Control(ctx, c[0], c[1], c[2], nil); err == nil || errors.As(err, &ce) {
			t.Errorf("Control(%q, %q, %q) = %v", c[0], c[1], c[2], err)
		}
	}
}

// testControlTimeouts: an unknown host is an immediate no-route error; a
// provisioned but absent host is a timeout after control_timeout, and its
// request then expires into fleet.dlq rather than waiting for it.
func testControlTimeouts(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{controlTimeout: time.Second})
	gamma := e.newHost("gamma", hostOpts{noStart: true}) // provisioned, never started
	ctx := context.Background()

	start := time.Now()
	_, err := alpha.fed.Control(ctx, e.hostID("nobody"), "stop", "kb", nil)
	if !errors.Is(err, ErrNoRoute) || time.Since(start) > 900*time.Millisecond || IsIndeterminate(err) || strings.Contains(err.Error(), "may have run") {
		t.Fatalf("unknown host (the request never left: not indeterminate): %v after %s", err, time.Since(start))
	}
	start = time.Now()
	_, err = alpha.fed.Control(ctx, gamma.id, "stop", "kb", nil)
	if !errors.Is(err, ErrTimeout) || time.Since(start) < time.Second || !strings.Contains(err.Error(), "never-seen") ||
		!IsIndeterminate(err) || !strings.Contains(err.Error(), "it may have run on "+gamma.id+": check `fleetmgr status kb@"+gamma.id+"` before trying again") {
		t.Fatalf("absent host: %v after %s", err, time.Since(start))
	}
	t.Logf("timeout error: %v", err)
	// The caller's context ends it sooner.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := alpha.fed.Control(cctx, gamma.id, "stop", "kb", nil); !errors.Is(err, ErrTimeout) || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("caller deadline: %v after %s", err, time.Since(start))
	}
	admin := e.adminChannel()
	var dlq []dlqMessage
	m := e.waitDLQ(admin, &dlq, "expired request", func(m dlqMessage) bool { return m.XDeath && m.Reason == "" })
	if m.Headers[wire.HdrTo] != gamma.id {
		t.Fatalf("dead letter %+v", m)
	}
	// gamma, started now, finds nothing stale to execute.
	gamma.start(t)
	wait.Never(t, 300*time.Millisecond, "gamma executing a request its sender gave up on", func() (bool, string) {
		return gamma.exec.count() != 0, fmt.Sprintf("%+v", gamma.exec.snapshot())
	})
}

// testRejectionMatrix: every refused request is dead-lettered with its
// reason and never executed; a replay is refused before and after the
// receiver restarts.
func testRejectionMatrix(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	stranger := e.newHost("stranger", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta)
	alpha.start(t)
	beta.start(t)
	admin := e.adminChannel()

	// Capture a genuine request on the wire: the administrator binds a
	// queue of its own to fleet.control with beta's key.
	if _, err := admin.QueueDeclare("capture", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueueBind("capture", beta.id, ExchangeControl, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.fed.Control(context.Background(), beta.id, "restart", "kb", nil); err != nil {
		t.Fatal(err)
	}
	captured, ok, err := admin.Get("capture", true)
	if err != nil || !ok {
		t.Fatalf("capture: %v %v", ok, err)
	}
	if beta.exec.count() != 1 {
		t.Fatalf("genuine request: %d executions", beta.exec.count())
	}

	now := time.Now()
	reqBody := func(reply string) []byte {
		b, _ := json.Marshal(wire.ControlRequest{Verb: "stop", Fleet: "kb", Reply: reply})
		return b
	}
	inst := alpha.fed.Status().Instance
	env := func(mut func(e *wire.Envelope)) *wire.Envelope {
		e := &wire.Envelope{Kind: wire.KindControlRequest, ID: wire.NewID(), From: alpha.id, To: beta.id,
			Issued: now, Expires: now.Add(time.Minute), Body: reqBody(inst)}
		if mut != nil {
			mut(e)
		}
		return e
	}
	type sent struct {
		name, reason string
		id           string
	}
	var cases []sent
	pub := func(name, reason, exchange, key string, h map[string]any, body []byte) {
		publishRaw(t, admin, exchange, key, h, body)
		id, _ := h[wire.HdrID].(string)
		cases = append(cases, sent{name, reason, id})
	}
	// unsigned: a well-formed envelope with no signature.
	h, body := sealed(t, env(nil), alpha.key)
	delete(h, wire.HdrSig)
	pub("unsigned", "unsigned", ExchangeControl, beta.id, h, body)
	// signed by a key beta does not trust.
	h, body = sealed(t, env(nil), stranger.key)
	pub("untrusted key", "untrusted-key", ExchangeControl, beta.id, h, body)
	// alpha's key, claiming to be from stranger.
	h, body = sealed(t, env(func(e *wire.Envelope) { e.From = stranger.id }), alpha.key)
	pub("wrong from", "from-mismatch", ExchangeControl, beta.id, h, body)
	// addressed to stranger, routed to beta.
	h, body = sealed(t, env(func(e *wire.Envelope) { e.To = stranger.id }), alpha.key)
	pub("wrong to", "to-mismatch", ExchangeControl, beta.id, h, body)
	// right to, but into beta's queue by the default exchange.
	h, body = sealed(t, env(nil), alpha.key)
	pub("default exchange", "routing-key-mismatch", "", ControlQueue(beta.id), h, body)
	// expired (beyond the skew).
	h, body = sealed(t, env(func(e *wire.Envelope) { e.Issued, e.Expires = now.Add(-10*time.Minute), now.Add(-5*time.Minute) }), alpha.key)
	pub("expired", "expired", ExchangeControl, beta.id, h, body)
	// malformed JSON, validly signed.
	h, body = sealed(t, env(func(e *wire.Envelope) { e.Body = []byte(`{"verb":"stop","fleet":`) }), alpha.key)
	pub("malformed JSON", "malformed", ExchangeControl, beta.id, h, body)
	// oversized: a control request over 64 KiB (signed over a valid size,
	// then padded: the size check comes first).
	h, body = sealed(t, env(nil), alpha.key)
	pub("oversized", "oversized", ExchangeControl, beta.id, h, append(body, make([]byte, wire.MaxRequestBody)...))
	// replayed: the captured genuine request, published again.
	pub("replayed", "replayed", ExchangeControl, beta.id, captured.Headers, captured.Body)
	// an unknown verb from a trusted peer: refused with an answer.
	h, body = sealed(t, env(func(e *wire.Envelope) {
		e.Body, _ = json.Marshal(map[string]string{"verb": "format-disk", "fleet": "kb", "reply": inst})
	}), alpha.key)
	pub("unknown verb", "unknown-verb", ExchangeControl, beta.id, h, body)

	var dlq []dlqMessage
	for _, c := range cases {
		m := e.waitDLQ(admin, &dlq, c.name, func(m dlqMessage) bool { return m.ID == c.id && m.Reason == c.reason })
		if m.By != beta.id || m.Headers[wire.HdrOrigRoutingKey] == nil {
			t.Errorf("%s: dead letter %+v", c.name, m)
		}
	}
	if n := beta.exec.count(); n != 1 {
		t.Fatalf("refused requests executed: %+v", beta.exec.snapshot())
	}
	for _, c := range cases {
		if got := testutil.ToFloat64(beta.fed.Metrics().Rejections.WithLabelValues(c.reason)); got < 1 {
			t.Errorf("rejections{reason=%s} = %v", c.reason, got)
		}
	}

	// The replay after beta restarts (a new process, the same state dir).
	beta.stop(t)
	beta.start(t)
	publishRaw(t, admin, ExchangeControl, beta.id, captured.Headers, captured.Body)
	e.waitDLQ(admin, &dlq, "replay after restart", func(m dlqMessage) bool {
		return m.ID == captured.Headers[wire.HdrID] && m.Reason == "replayed" && testutil.ToFloat64(beta.fed.Metrics().Rejections.WithLabelValues("replayed")) == 1
	})
	if n := beta.exec.count(); n != 1 {
		t.Fatalf("replay after restart executed: %+v", beta.exec.snapshot())
	}
	// And beta still works.
	if _, err := alpha.fed.Control(context.Background(), beta.id, "status", "kb", nil); err != nil {
		t.Fatal(err)
	}
}

// testForgedPresence: presence one host publishes as another is refused
// by the broker where it has topic permissions; published by the
// administrator (or on a broker without them) it is dropped by the
// receiver, like unsigned, untrusted and stale presence.
func testForgedPresence(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	const hb = 500 * time.Millisecond
	alpha := e.newHost("alpha", hostOpts{heartbeat: hb, noStart: true})
	beta := e.newHost("beta", hostOpts{heartbeat: hb, noStart: true})
	stranger := e.newHost("stranger", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta)
	alpha.start(t)
	t.Logf("protections: %s", e.prot)

	fake := []byte(`{"heartbeat_ms":500,"started_ms":1,"fleets":[{"name":"evil","state":"running","uptime_s":1,"restarts":0,"members":0}]}`)
	now := time.Now()
	presence := func(from string) *wire.Envelope {
		return &wire.Envelope{Kind: wire.KindPresence, ID: wire.NewID(), From: from, To: wire.Broadcast, Issued: now, Expires: now.Add(time.Minute), Body: fake}
	}
	// stranger's broker user publishes presence under beta's key.
	conn, ch := e.userChannel(stranger)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	_ = ch.Confirm(false)
	h, body := sealed(t, presence(beta.id), stranger.key)
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), ExchangeRoster, RosterKey(beta.id), false, false,
		amqp.Publishing{Headers: amqp.Table(h), Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if e.prot.TopicPermissions {
		select {
		case cerr := <-closed:
			if cerr == nil || cerr.Code != amqp.AccessRefused {
				t.Fatalf("channel closed with %v, want 403 ACCESS_REFUSED", cerr)
			}
			t.Logf("broker refused: %v", cerr)
		case <-time.After(5 * time.Second):
			t.Fatal("the broker let a host publish presence under another host's key")
		}
		// Its own key is allowed.
		ch2, _ := conn.Channel()
		_ = ch2.Confirm(false)
		h, body = sealed(t, presence(stranger.id), stranger.key)
		publishRaw(t, ch2, ExchangeRoster, RosterKey(stranger.id), h, body)
	} else if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("no topic permissions, yet the publish failed: %v %v", ok, err)
	}

	admin := e.adminChannel()
	drops := alpha.fed.Metrics().PresenceDropped
	forged := []struct {
		reason string
		h      map[string]any
		body   []byte
		key    string
	}{}
	add := func(reason string, env *wire.Envelope, signer []byte, mut func(h map[string]any), key string) {
		h, b := sealed(t, env, signer)
		if mut != nil {
			mut(h)
		}
		forged = append(forged, struct {
			reason string
			h      map[string]any
			body   []byte
			key    string
		}{reason, h, b, key})
	}
	add("from-mismatch", presence(beta.id), alpha.key, nil, RosterKey(beta.id))
	add("untrusted-key", presence(beta.id), stranger.key, nil, RosterKey(beta.id))
	add("unsigned", presence(beta.id), beta.key, func(h map[string]any) { delete(h, wire.HdrSig) }, RosterKey(beta.id))
	old := presence(beta.id)
	old.Issued, old.Expires = now.Add(-time.Hour), now.Add(-50*time.Minute)
	add("expired", old, beta.key, nil, RosterKey(beta.id))
	add("routing-key-mismatch", presence(beta.id), beta.key, nil, RosterKey(alpha.id))
	for _, f := range forged {
		before := testutil.ToFloat64(drops.WithLabelValues(f.reason))
		publishRaw(t, admin, ExchangeRoster, f.key, f.h, f.body)
		wait.For(t, 5*time.Second, "drop of "+f.reason, wait.Bool(func() bool { return testutil.ToFloat64(drops.WithLabelValues(f.reason)) == before+1 }))
	}
	// A presence genuinely signed by beta, published twice: accepted,
	// then dropped as replayed; an older one of the same run: stale.
	good := []byte(`{"heartbeat_ms":500,"started_ms":1,"fleets":[{"name":"kb","state":"running","uptime_s":1,"restarts":0,"members":0}]}`)
	genuine := presence(beta.id)
	genuine.Body = good
	h, body = sealed(t, genuine, beta.key)
	recv := alpha.fed.Metrics().PresenceReceived.WithLabelValues(beta.id)
	publishRaw(t, admin, ExchangeRoster, RosterKey(beta.id), h, body)
	wait.For(t, 5*time.Second, "genuine presence", wait.Bool(func() bool { return testutil.ToFloat64(recv) == 1 }))
	for _, f := range []struct {
		reason string
		mut    func(e *wire.Envelope)
	}{
		{"replayed", nil},
		{"stale", func(e *wire.Envelope) { e.ID, e.Issued = wire.NewID(), now.Add(-time.Second) }},
	} {
		env := *genuine
		if f.mut != nil {
			f.mut(&env)
			h, body = sealed(t, &env, beta.key)
		}
		before := testutil.ToFloat64(drops.WithLabelValues(f.reason))
		publishRaw(t, admin, ExchangeRoster, RosterKey(beta.id), h, body)
		wait.For(t, 5*time.Second, "drop of "+f.reason, wait.Bool(func() bool { return testutil.ToFloat64(drops.WithLabelValues(f.reason)) == before+1 }))
	}
	// The real beta (a later run) replaces it; nothing forged is shown.
	beta.start(t)
	wait.For(t, 2*hb, "beta online", wait.Bool(func() bool { hv, _ := hostIn(alpha.fed, beta.id); return hv.Online && hv.Started.UnixMilli() > 1 }))
	for _, hv := range alpha.fed.View() {
		for _, f := range hv.Fleets {
			if f.Name == "evil" {
				t.Fatalf("forged fleet shown: %+v", hv)
			}
		}
		if hv.Host == stranger.id {
			t.Fatalf("untrusted host shown: %+v", hv)
		}
	}
}

// testLeastPrivilege: a host's broker user cannot read another host's
// requests or replies, nor fleet.dlq, nor publish by the default
// exchange, nor delete shared things.
func testLeastPrivilege(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	conn, _ := e.userChannel(alpha)
	refused := func(what string, op func(ch *amqp.Channel) error) {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		err = op(ch)
		if err == nil {
			// publish errors come asynchronously: a round trip makes the
			// channel close visible; the close itself carries the reason
			// (the round trip may only see "channel not open").
			_, err = ch.QueueDeclarePassive(QueueDLQ, true, false, false, false, nil)
			if err != nil && !isCode(err, amqp.AccessRefused) {
				select {
				case ce := <-closed:
					if ce != nil {
						err = ce
					}
				case <-time.After(5 * time.Second):
				}
			}
		}
		if !isCode(err, amqp.AccessRefused) {
			// The broker's close may have beaten the round trip (then it
			// fails with 504 "channel/connection is not open"): the
			// reason is in the channel's close notification.
			select {
			case cerr := <-closed:
				if cerr != nil {
					err = cerr
				}
			case <-time.After(5 * time.Second):
			}
		}
		if !isCode(err, amqp.AccessRefused) {
			t.Errorf("%s: %v, want 403 ACCESS_REFUSED", what, err)
		}
	}
	refused("consume another host's control queue", func(ch *amqp.Channel) error {
		_, err := ch.Consume(ControlQueue(beta.id), "", false, false, false, false, nil)
		return err
	})
	refused("consume fleet.dlq", func(ch *amqp.Channel) error {
		_, err := ch.Consume(QueueDLQ, "", false, false, false, false, nil)
		return err
	})
	refused("bind from another host's reply exchange", func(ch *amqp.Channel) error {
		q := ReplyQueue(alpha.id, "0123456789abcdef")
		if _, err := ch.QueueDeclare(q, false, true, true, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(q, "#", ReplyExchange(beta.id), false, nil)
	})
	refused("bind its queue to fleet.control", func(ch *amqp.Channel) error {
		q := ReplyQueue(alpha.id, "0123456789abcde0")
		if _, err := ch.QueueDeclare(q, false, true, true, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(q, beta.id, ExchangeControl, false, nil)
	})
	refused("delete fleet.dlq", func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(QueueDLQ, false, false, false)
		return err
	})
	refused("declare a queue of another name", func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("roster."+beta.id, false, true, true, false, nil)
		return err
	})
	refused("publish by the default exchange", func(ch *amqp.Channel) error {
		return ch.Publish("", ControlQueue(beta.id), false, false, amqp.Publishing{Body: []byte("x")})
	})
}

// testHostIDsAreUnique: a second manager with the same host id is refused
// with a clear error, and the first keeps working.
func testHostIDsAreUnique(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{})
	cfg := alpha.cfg
	cfg.StateDir = t.TempDir()
	cfg.Metrics = NewMetrics()
	cfg.Dial = nil
	twin, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := twin.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer twin.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = twin.WaitConnected(ctx)
	if err == nil || !strings.Contains(err.Error(), "another manager is connected as host") {
		t.Fatalf("twin: %v", err)
	}
	if !alpha.fed.Status().Connected {
		t.Fatal("the first manager lost its connection")
	}
}

// testProvisionIdempotent: provisioning twice is fine and keeps the
// password; provisioning reports what it set up.
func testProvisionIdempotent(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	ctx := context.Background()
	p, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: alpha.id, Password: alpha.password, Key: identity.PublicKey(alpha.key)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Permissions || !p.Signatures {
		t.Fatalf("protections %+v", p)
	}
	t.Logf("%s", p)
	alpha.start(t)
	if _, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: "Alpha", Password: "x", Key: identity.PublicKey(alpha.key)}); err == nil {
		t.Fatal("bad host id provisioned")
	}
}

// testAtMostOnce: a request being executed when its target dies is not
// executed again by the target's next run; the sender is told, at the
// timeout or as soon as the target expires, that it may have run.
func testAtMostOnce(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true, controlTimeout: 3 * time.Second})
	beta := e.newHost("beta", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta)
	alpha.start(t)
	beta.start(t)
	beta.exec.delay = 1500 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := alpha.fed.Control(context.Background(), beta.id, "restart", "kb", nil)
		done <- err
	}()
	wait.For(t, 5*time.Second, "beta executing", wait.Bool(func() bool { return beta.exec.count() == 1 }))
	beta.kill(t)
	if err := <-done; !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrHostGone) || !IsIndeterminate(err) {
		t.Fatalf("sender: %v, want a timeout or the host gone, either that may have run", err)
	}
	beta.exec.delay = 0
	beta.start(t)
	// Give the new run time to take anything left in control.<beta>.
	if _, err := alpha.fed.Control(context.Background(), beta.id, "status", "kb", nil); err != nil {
		t.Fatal(err)
	}
	if c := beta.exec.snapshot(); len(c) != 2 || c[0].Verb != "restart" || c[1].Verb != "status" {
		t.Fatalf("executions %+v: the restart ran again", c)
	}
}

// testRepliesNotMisdelivered: a reply forged by another trusted host for a
// pending request is dropped (from-mismatch) and the real one still
// arrives; a reply after its caller gave up is dropped as late.
func testRepliesNotMisdelivered(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	alpha := e.newHost("alpha", hostOpts{noStart: true})
	beta := e.newHost("beta", hostOpts{noStart: true})
	gamma := e.newHost("gamma", hostOpts{noStart: true})
	trustEachOther(t, alpha, beta, gamma)
	alpha.start(t)
	beta.start(t)
	admin := e.adminChannel()
	if _, err := admin.QueueDeclare("capture", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueueBind("capture", beta.id, ExchangeControl, false, nil); err != nil {
		t.Fatal(err)
	}
	beta.exec.delay = time.Second
	type result struct {
		res json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := alpha.fed.Control(context.Background(), beta.id, "status", "kb", nil)
		done <- result{r, err}
	}()
	var req amqp.Delivery
	wait.For(t, 5*time.Second, "request captured", wait.Bool(func() bool {
		d, ok, err := admin.Get("capture", true)
		req = d
		return err == nil && ok
	}))
	// gamma answers alpha's request to beta.
	now := time.Now()
	forged, _ := json.Marshal(wire.ControlReply{Status: wire.StatusOK, Result: json.RawMessage(`"forged"`)})
	h, body := sealed(t, &wire.Envelope{Kind: wire.KindControlReply, ID: wire.NewID(), Re: req.Headers[wire.HdrID].(string),
		From: gamma.id, To: alpha.id, Issued: now, Expires: now.Add(time.Minute), Body: forged}, gamma.key)
	publishRaw(t, admin, ReplyExchange(alpha.id), alpha.fed.Status().Instance, h, body)
	r := <-done
	if r.err != nil || strings.Contains(string(r.res), "forged") {
		t.Fatalf("alpha got %s, %v", r.res, r.err)
	}
	if got := testutil.ToFloat64(alpha.fed.Metrics().RepliesDropped.WithLabelValues("from-mismatch")); got != 1 {
		t.Fatalf("replies_dropped{from-mismatch} = %v", got)
	}
	// A caller that gives up: the reply that comes later is dropped.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := alpha.fed.Control(ctx, beta.id, "status", "kb", nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("short deadline: %v", err)
	}
	wait.For(t, 5*time.Second, "late reply dropped", wait.Bool(func() bool {
		return testutil.ToFloat64(alpha.fed.Metrics().RepliesDropped.WithLabelValues("late")) == 1
	}))
}

// TestProvisionOlderLayout: a control queue declared with other arguments
// (an older layout) fails provisioning naming the queue to delete.
func TestProvisionOlderLayout(t *testing.T) { brokertest.Each(t, testProvisionOlderLayout) }

func testProvisionOlderLayout(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	ctx := context.Background()
	host := e.hostID("old")
	if _, err := e.admin.EnsureVhost(ctx, e.vhost); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeclareQueue(ctx, e.vhost, ControlQueue(host), map[string]any{"x-max-length": 5}); err != nil {
		t.Fatal(err)
	}
	e.b.Cleanup(t, nil, []string{BrokerUser(host)})
	_, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: host, Password: "pw-123456789", Key: make(ed25519.PublicKey, ed25519.PublicKeySize)})
	if err == nil || !strings.Contains(err.Error(), "queue "+ControlQueue(host)) || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("older layout: %v", err)
	}
}

// testImpostorRefused (issue 27 item 2): a second manager with beta's host
// id and another key is refused provisioning, names both keys and
// --take-over-host, and changes nothing: the real beta keeps its password
// and reconnects after a connection blip. With TakeOver it succeeds and
// the real beta's password no longer works; the real beta re-provisioning
// itself is then refused in turn, naming the new key.
func testImpostorRefused(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	beta := e.newHost("beta", hostOpts{})
	realKey := identity.PublicKey(beta.key)
	impKey, _, err := identity.LoadOrCreateKey(t.TempDir() + "/federation.key")
	if err != nil {
		t.Fatal(err)
	}
	impPub := identity.PublicKey(impKey)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := e.admin.GetUser(ctx, BrokerUser(beta.id))
	if err != nil {
		t.Fatal(err)
	}
	if k, ok, err := RegisteredKey(u.Tags); err != nil || !ok || !k.Equal(realKey) {
		t.Fatalf("beta's broker user tags %q: key %v, %v, %v", u.Tags, k, ok, err)
	}

	_, err = Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: "impostor-password-1", Key: impPub})
	var conflict *KeyConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("impostor provisioning: %v", err)
	}
	for _, want := range []string{identity.FormatPublicKey(realKey), identity.FormatPublicKey(impPub), "--take-over-host", "[federation] host"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
	// Nothing changed: the impostor's password is refused, beta's works,
	// and beta comes back after a blip.
	if _, err := amqpDial(b, beta.id, "impostor-password-1", e.vhost); err == nil {
		t.Fatal("the impostor's password was set on beta's broker user")
	}
	beta.net.kill()
	wait.For(t, 10*time.Second, "beta sees its connection lost", wait.Bool(func() bool { return !beta.fed.Status().Connected }))
	beta.net.revive()
	wait.For(t, 20*time.Second, "beta reconnected after the blip", wait.Bool(func() bool { return beta.fed.Status().Connected }))

	// Take-over: allowed when asked for, and the old key's password is
	// then refused by the broker.
	p, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: "impostor-password-1", Key: impPub, TakeOver: true})
	if err != nil {
		t.Fatalf("take-over: %v", err)
	}
	if !p.Replaced.Equal(realKey) {
		t.Fatalf("take-over reports replaced key %v", p.Replaced)
	}
	if _, err := amqpDial(b, beta.id, beta.password, e.vhost); err == nil {
		t.Fatal("the old host's password still works after the take-over")
	}
	c, err := amqpDial(b, beta.id, "impostor-password-1", e.vhost)
	if err != nil {
		t.Fatalf("the new host's password: %v", err)
	}
	c.Close()
	// The old host re-provisioning itself is refused in turn, naming the
	// key that took over.
	_, err = Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: beta.password, Key: realKey})
	if !errors.As(err, &conflict) || !conflict.Registered.Equal(impPub) {
		t.Fatalf("old host re-provisioning after the take-over: %v", err)
	}
	// Re-provisioning with the same key is idempotent.
	if _, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: "impostor-password-1", Key: impPub}); err != nil {
		t.Fatalf("same key again: %v", err)
	}
}

// amqpDial connects as host's broker user with password to vhost.
func amqpDial(b *brokertest.Broker, host, password, vhost string) (*amqp.Connection, error) {
	uri, err := broker.VhostURI(b.AMQPURL, BrokerUser(host), password, vhost)
	if err != nil {
		return nil, err
	}
	return amqp.Dial(uri)
}

// testRefusedHostReprovisions (issue 27 item 2): a host whose broker
// password was reset behind its back (as a second manager did before the
// take-over rule) is refused at its next connect, provisions itself again
// (Config.Reprovision) and is back; once another key took the id over,
// its re-provisioning is refused and its status names the other key.
func testRefusedHostReprovisions(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	beta := e.newHost("beta", hostOpts{noStart: true})
	pub := identity.PublicKey(beta.key)
	var calls atomic.Int32
	beta.cfg.Reprovision = func(ctx context.Context) error {
		calls.Add(1)
		_, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: beta.password, Key: pub})
		return err
	}
	beta.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := e.admin.EnsureUser(ctx, BrokerUser(beta.id), "reset-behind-its-back", KeyTag(pub)); err != nil {
		t.Fatal(err)
	}
	blip := func() {
		beta.net.kill()
		wait.For(t, 10*time.Second, "beta sees its connection lost", wait.Bool(func() bool { return !beta.fed.Status().Connected }))
		beta.net.revive()
	}
	blip()
	wait.For(t, 20*time.Second, "beta reconnected after provisioning itself again", wait.Bool(func() bool { return beta.fed.Status().Connected }))
	if n := calls.Load(); n != 1 {
		t.Fatalf("reprovisioned %d times", n)
	}

	other, _, err := identity.LoadOrCreateKey(t.TempDir() + "/federation.key")
	if err != nil {
		t.Fatal(err)
	}
	otherPub := identity.PublicKey(other)
	if _, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: beta.id, Password: "taken-over-password", Key: otherPub, TakeOver: true}); err != nil {
		t.Fatal(err)
	}
	blip()
	wait.For(t, 20*time.Second, "beta says another key took its id", func() (bool, string) {
		st := beta.fed.Status()
		return !st.Connected && strings.Contains(st.LastError, identity.FormatPublicKey(otherPub)) &&
			strings.Contains(st.LastError, "--take-over-host"), st.LastError
	})
}
