package federation

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// The broker tests are functions of the broker under test (fedEnv is made
// from a *brokertest.Broker), so a matrix over RabbitMQ and LavinMQ only
// has to call them once per broker.

// fedEnv is one test's federation: a vhost of its own on the broker and
// the hosts in it.
type fedEnv struct {
	t     testing.TB
	b     *brokertest.Broker
	admin *broker.Admin
	vhost string
	tag   string // makes host ids (and so broker users) unique to the test
	prot  Protections
}

func newFedEnv(t testing.TB, b *brokertest.Broker) *fedEnv {
	t.Helper()
	e := &fedEnv{t: t, b: b, admin: b.Admin(t), vhost: brokertest.Unique("fmfed")}
	e.tag = e.vhost[len(e.vhost)-6:]
	b.Cleanup(t, []string{e.vhost}, nil)
	return e
}

// hostID returns the test's id for a short name ("alpha" → "alpha-1a2b3c").
func (e *fedEnv) hostID(name string) string { return name + "-" + e.tag }

// testHost is one simulated manager.
type testHost struct {
	id       string
	key      ed25519.PrivateKey
	stateDir string
	password string
	src      *fakeSource
	exec     *recordingExec
	net      *killSwitch
	fed      *Federation
	cfg      Config
}

// hostOpts tune a test host.
type hostOpts struct {
	heartbeat      time.Duration
	controlTimeout time.Duration
	trust          []string // extra trust lines; nil: none
	noStart        bool
}

// newHost makes a key, provisions the host's broker user and builds (and
// unless noStart, starts) its Federation. The trust list is set by trust()
// before start or given in opts.
func (e *fedEnv) newHost(name string, o hostOpts) *testHost {
	t := e.t
	t.Helper()
	h := &testHost{id: e.hostID(name), stateDir: t.TempDir(), src: &fakeSource{}, exec: &recordingExec{}, net: &killSwitch{}}
	var err error
	if h.key, _, err = identity.LoadOrCreateKey(h.stateDir + "/federation.key"); err != nil {
		t.Fatal(err)
	}
	if h.password, err = HostPassword(h.stateDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prot, err := Provision(ctx, e.admin, ProvisionOptions{Vhost: e.vhost, Host: h.id, Password: h.password, Key: identity.PublicKey(h.key)})
	if err != nil {
		t.Fatal(err)
	}
	e.prot = prot
	e.b.Cleanup(t, nil, []string{BrokerUser(h.id)})
	uri, err := broker.VhostURI(e.b.AMQPURL, BrokerUser(h.id), h.password, e.vhost)
	if err != nil {
		t.Fatal(err)
	}
	if o.heartbeat == 0 {
		o.heartbeat = time.Second
	}
	if o.controlTimeout == 0 {
		o.controlTimeout = 10 * time.Second
	}
	tr, err := identity.ParseTrust(o.trust)
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = Config{Host: h.id, Key: h.key, Trust: tr, URI: uri, Dial: h.net.dial, StateDir: h.stateDir,
		Heartbeat: o.heartbeat, ControlTimeout: o.controlTimeout, Source: h.src, Executor: h.exec,
		Log: testLogger(t, h.id)}
	if !o.noStart {
		h.start(t)
	}
	return h
}

// line returns h's trust line with caps.
func (h *testHost) line(caps identity.Capabilities) string {
	return identity.FormatTrustLine(h.id, identity.PublicKey(h.key), caps)
}

// start builds a fresh Federation from h.cfg (same key, state dir) and
// waits until it is connected.
func (h *testHost) start(t testing.TB) {
	t.Helper()
	h.net.revive()
	h.cfg.Metrics = NewMetrics()
	f, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.WaitConnected(ctx); err != nil {
		t.Fatalf("%s: %v", h.id, err)
	}
	h.fed = f
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
}

// stop is a clean stop.
func (h *testHost) stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.fed.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// kill closes h's broker connection without a word, as kill -9 would
// (the kernel closes the socket), and keeps it from reconnecting; the
// Federation is then stopped without being able to announce anything.
func (h *testHost) kill(t testing.TB) {
	h.net.kill()
	f := h.fed
	go func() { _ = f.Stop(context.Background()) }()
}

// trust sets both hosts to trust each other with every capability.
func trustEachOther(t testing.TB, hs ...*testHost) {
	t.Helper()
	for _, h := range hs {
		var lines []string
		for _, o := range hs {
			if o != h {
				lines = append(lines, o.line(identity.CapAll))
			}
		}
		tr, err := identity.ParseTrust(lines)
		if err != nil {
			t.Fatal(err)
		}
		h.cfg.Trust = tr
	}
}

// killSwitch is the hosts' dialer: kill closes every connection it made
// and refuses new ones until revive.
type killSwitch struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (k *killSwitch) dial(network, addr string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errors.New("killed")
	}
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killSwitch) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

func (k *killSwitch) revive() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = false
}

// fakeSource announces a settable fleet list.
type fakeSource struct {
	mu     sync.Mutex
	fleets []wire.FleetSummary
}

func (s *fakeSource) set(fs ...wire.FleetSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fleets = fs
}

func (s *fakeSource) LocalFleets(context.Context) []wire.FleetSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wire.FleetSummary(nil), s.fleets...)
}

// recordingExec records every execution and answers {"done":VERB,"fleet":F}
// (or the error set for a fleet).
type recordingExec struct {
	mu    sync.Mutex
	calls []execCall
	fail  map[string]string // fleet → error
	big   map[string]int    // fleet → size of a JSON string result
	delay time.Duration
}

type execCall struct {
	From, Verb, Fleet string
	Args              string
}

func (r *recordingExec) Control(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
	r.mu.Lock()
	r.calls = append(r.calls, execCall{from, verb, fleet, string(args)})
	msg, failing := r.fail[fleet]
	size, big := r.big[fleet]
	d := r.delay
	r.mu.Unlock()
	if big {
		return json.Marshal(strings.Repeat("x", size))
	}
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if failing {
		return nil, errors.New(msg)
	}
	return json.Marshal(map[string]string{"done": verb, "fleet": fleet})
}

func (r *recordingExec) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recordingExec) snapshot() []execCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]execCall(nil), r.calls...)
}

// hostIn returns host's entry in f's view.
func hostIn(f *Federation, host string) (HostView, bool) {
	for _, hv := range f.View() {
		if hv.Host == host {
			return hv, true
		}
	}
	return HostView{}, false
}

// adminChannel opens an AMQP channel on the test vhost as the broker
// administrator (who can publish anything anywhere: the "admin publishes
// a forged message" cases).
func (e *fedEnv) adminChannel() *amqp.Channel {
	e.t.Helper()
	uri, err := broker.VhostURI(e.b.AMQPURL, e.b.User, e.b.Password, e.vhost)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Dial(ctx, uri)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// userChannel opens a channel on the test vhost as host h's broker user.
func (e *fedEnv) userChannel(h *testHost) (*amqp.Connection, *amqp.Channel) {
	e.t.Helper()
	uri, err := broker.VhostURI(e.b.AMQPURL, BrokerUser(h.id), h.password, e.vhost)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Dial(ctx, uri)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return conn, ch
}

// publishRaw publishes a message with confirm and fails the test when the
// broker does not take it.
func publishRaw(t testing.TB, ch *amqp.Channel, exchange, key string, headers map[string]any, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false,
		amqp.Publishing{Headers: amqp.Table(headers), Body: body, ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to %s/%s not confirmed: %v %v", exchange, key, ok, err)
	}
}

// sealed returns the headers and body of env signed by key.
func sealed(t testing.TB, env *wire.Envelope, key ed25519.PrivateKey) (map[string]any, []byte) {
	t.Helper()
	h, err := wire.Seal(env, key)
	if err != nil {
		t.Fatal(err)
	}
	return h, env.Body
}

// dlqMessage is one message read from fleet.dlq.
type dlqMessage struct {
	Reason, ID, Detail, By string
	XDeath                 bool
	Headers                amqp.Table
}

// drainDLQ reads everything in fleet.dlq (as the administrator).
func (e *fedEnv) drainDLQ(ch *amqp.Channel) []dlqMessage {
	e.t.Helper()
	var out []dlqMessage
	for {
		d, ok, err := ch.Get(QueueDLQ, true)
		if err != nil {
			e.t.Fatal(err)
		}
		if !ok {
			return out
		}
		m := dlqMessage{Headers: d.Headers}
		m.Reason, _ = d.Headers[wire.HdrRejectReason].(string)
		m.Detail, _ = d.Headers[wire.HdrRejectDetail].(string)
		m.By, _ = d.Headers[wire.HdrRejectedBy].(string)
		m.ID, _ = d.Headers[wire.HdrID].(string)
		_, m.XDeath = d.Headers["x-death"]
		out = append(out, m)
	}
}

// waitDLQ waits until fleet.dlq holds a message for which match holds,
// collecting what it reads into got.
func (e *fedEnv) waitDLQ(ch *amqp.Channel, got *[]dlqMessage, what string, match func(m dlqMessage) bool) dlqMessage {
	e.t.Helper()
	var found dlqMessage
	wait.For(e.t, 15*time.Second, "a fleet.dlq message for "+what, func() (bool, string) {
		for _, m := range *got {
			if match(m) {
				found = m
				return true, ""
			}
		}
		*got = append(*got, e.drainDLQ(ch)...)
		return false, "have " + describeDLQ(*got)
	})
	return found
}

func describeDLQ(ms []dlqMessage) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("{reason=%s id=%s x-death=%v detail=%q}", m.Reason, m.ID, m.XDeath, m.Detail))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// testLogger logs to the test when -v, else discards.
func testLogger(t testing.TB, host string) *slog.Logger {
	if !testing.Verbose() || os.Getenv("FLEETMGR_FED_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("me", host)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
