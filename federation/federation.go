// Package federation connects this host's fleetmgr to the other hosts'
// over a shared broker vhost (docs/FEDERATION.md): it announces the local
// fleets as signed presence and keeps the union view of everyone's,
// serves signed control requests from trusted peers through an injected
// Executor, and sends control requests to peers. The broker is the only
// transport; every message is signed (federation/wire) and verified in a
// fixed order; refused requests are dead-lettered with their reason.
//
// Wiring (what `fleetmgr serve` does): identity.LoadOrCreateKey for the
// key, identity.ParseTrust for the trust list, HostPassword and Provision
// with the administrator's broker.Admin for the host's broker user, then
// New with a Source (local fleet summaries) and an Executor (lifecycle
// verbs), Start, and Stop on a clean shutdown (which announces offline).
// Register Metrics().Collectors() on /metrics; View() feeds list and
// status; Control() carries `fleetmgr start NAME@HOST` and friends.
package federation

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Defaults of Config.
const (
	DefaultHeartbeat      = 2 * time.Second
	DefaultControlTimeout = 15 * time.Second
	// DefaultClockSkew is allowed at both ends of a message's validity:
	// hosts' clocks differ by this much at most (NTP keeps them within
	// milliseconds; 30 s covers a host that has just booted).
	DefaultClockSkew = 30 * time.Second
	// DefaultWorkers bounds the requests executed at once.
	DefaultWorkers = 4
	// SeenFile is the control seen-set's file in the state directory.
	SeenFile = "federation-seen"
)

// Executor runs a control verb on a local fleet for a verified, authorised
// peer. ctx ends at the request's expiry (the sender has given up then)
// or when the federation stops; a verb that must finish regardless (a
// start half done) detaches from it. The result is any JSON value (at
// most about 4 MiB); an error is sent back as the failure's message, so
// it must not hold secrets.
type Executor interface {
	Control(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error)

// Control calls f.
func (f ExecutorFunc) Control(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
	return f(ctx, from, verb, fleet, args)
}

// Config is what a Federation needs. Host, Key, Trust, URI and StateDir
// are required; Source and Executor are required unless ClientOnly.
type Config struct {
	// Host is this manager's host id (identity.HostPattern).
	Host string
	// Key is this host's private key (identity.LoadOrCreateKey).
	Key ed25519.PrivateKey
	// Trust is the trust list; this host's own key is added to it.
	Trust *identity.Trust
	// URI is amqp[s]://BrokerUser(Host):password@host:port/<vhost>
	// (broker.VhostURI with HostPassword).
	URI string
	// Dial, when set, opens the TCP connection to the broker (a relay, a
	// test's wrapper); default: net.Dialer with a 5 s timeout.
	Dial func(network, addr string) (net.Conn, error)
	// StateDir holds the control seen-set (SeenFile).
	StateDir string
	// Heartbeat is the presence interval (DefaultHeartbeat when 0;
	// wire.MinHeartbeat to wire.MaxHeartbeat).
	Heartbeat time.Duration
	// ControlTimeout bounds a control request sent from here: its expiry
	// and how long Control waits for the reply (DefaultControlTimeout
	// when 0).
	ControlTimeout time.Duration
	// ClockSkew is allowed at both ends of a message's validity
	// (DefaultClockSkew when 0).
	ClockSkew time.Duration
	// Workers bounds concurrent executions (DefaultWorkers when 0).
	Workers int
	// SeenMax and SeenPerHost bound the seen-sets (control requests,
	// presence, replies): the ids held in all, and for one sending host
	// (wire.DefaultSeenMax, wire.DefaultSeenPerHost when 0). A host over
	// its bound has its own messages refused (seen-set-failed), nobody
	// else's.
	SeenMax, SeenPerHost int
	// Source gives the local fleets for presence.
	Source Source
	// Executor runs verbs asked by peers.
	Executor Executor
	// Calls serves tool calls and catalogues asked by peers;
	// nil refuses them (unknown-verb).
	Calls CallHandler
	// CallWorkers bounds the calls served at once (DefaultCallWorkers
	// when 0).
	CallWorkers int
	// ClientOnly: send requests only (no presence, no roster, no control
	// queue consumer) — for a short-lived process that is not serve.
	ClientOnly bool
	// Metrics receives the counters; nil makes private ones.
	Metrics *Metrics
	// Reprovision, when set, is called when the broker refuses this
	// host's user at connect (ACCESS_REFUSED: its password or
	// permissions were changed, e.g. by a second manager with this host
	// id before the take-over rule): serve provisions the host again
	// (Provision, which refuses with a *KeyConflictError naming both keys
	// when another key has taken the id over), and the runtime retries at
	// once. It is called at most once per run of refusals.
	Reprovision func(ctx context.Context) error
	// OnRefused, if set, is told of refused messages as they are logged
	// (at most one per queue and reason per 10 s, NotLogged counting
	// those since the last): a forged, unsigned, untrusted, replayed,
	// expired or skewed message, or a verified one refused (not
	// authorised, unknown verb) — refusals before any executor runs
	// (serve journals them). It runs on the receiving goroutine, so it
	// must not block. Stale presence (reordering) is not reported.
	OnRefused func(Refused)
	// Log receives the log lines; nil discards them.
	Log *slog.Logger
	// Now is the clock of message times; nil means time.Now.
	Now func() time.Time
}

// Federation is one host's membership of the federation. Its methods are
// safe for concurrent use.
type Federation struct {
	cfg        Config
	verifier   *wire.Verifier
	seen       *wire.FileSeen
	rosterSeen *wire.MemorySeen
	replySeen  *wire.MemorySeen
	view       *view
	m          *Metrics
	log        *slog.Logger
	warn       *limiter
	started    time.Time
	changes    chan struct{}
	execSem    chan struct{}
	calls      *calls
	ids        wire.Sequencer // sequenced message ids, one stream per receiving queue

	mu       sync.Mutex
	sess     *session
	pending  map[string]*pending
	lastErr  error
	stopping bool
	running  bool

	baseCtx    context.Context // cancelled at the end of Stop
	baseCancel context.CancelFunc
	runCancel  context.CancelFunc
	runDone    chan struct{}
	execWG     sync.WaitGroup
	execMu     sync.Mutex // guards execClosed and execWG.Add against Stop's Wait
	execClosed bool
}

// beginExec counts one more request being run, unless Stop has begun
// waiting for them (then false: the request is not run).
func (f *Federation) beginExec() bool {
	f.execMu.Lock()
	defer f.execMu.Unlock()
	if f.execClosed {
		return false
	}
	f.execWG.Add(1)
	return true
}

// New checks cfg, opens the control seen-set and returns a Federation
// that is not connected yet (Start).
func New(cfg Config) (*Federation, error) {
	if err := identity.CheckHost(cfg.Host); err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("federation: no ed25519 key")
	}
	if cfg.Trust == nil {
		t, _ := identity.ParseTrust(nil)
		cfg.Trust = t
	}
	trust, err := cfg.Trust.WithSelf(cfg.Host, identity.PublicKey(cfg.Key))
	if err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	if cfg.URI == "" || cfg.StateDir == "" {
		return nil, errors.New("federation: URI and StateDir are required")
	}
	if !cfg.ClientOnly && (cfg.Source == nil || cfg.Executor == nil) {
		return nil, errors.New("federation: Source and Executor are required (or ClientOnly)")
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat < wire.MinHeartbeat || cfg.Heartbeat > wire.MaxHeartbeat {
		return nil, fmt.Errorf("federation: heartbeat %s is outside %s-%s", cfg.Heartbeat, wire.MinHeartbeat, wire.MaxHeartbeat)
	}
	if cfg.ControlTimeout == 0 {
		cfg.ControlTimeout = DefaultControlTimeout
	}
	if cfg.ControlTimeout < 0 || cfg.ControlTimeout > wire.MaxLifetime {
		return nil, fmt.Errorf("federation: control timeout %s is outside 0-%s", cfg.ControlTimeout, wire.MaxLifetime)
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = DefaultClockSkew
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.CallWorkers <= 0 {
		cfg.CallWorkers = DefaultCallWorkers
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	f := &Federation{
		cfg:        cfg,
		verifier:   &wire.Verifier{Trust: trust, Skew: cfg.ClockSkew, Now: cfg.Now},
		rosterSeen: &wire.MemorySeen{Max: cfg.SeenMax, PerHost: cfg.SeenPerHost, Now: cfg.Now},
		replySeen:  &wire.MemorySeen{Max: cfg.SeenMax, PerHost: cfg.SeenPerHost, Now: cfg.Now},
		view:       newView(cfg.Host, cfg.Trust.Hosts(), time.Now, cfg.ClockSkew),
		m:          cfg.Metrics,
		log:        cfg.Log,
		warn:       newLimiter(10 * time.Second),
		changes:    make(chan struct{}, 1),
		execSem:    make(chan struct{}, cfg.Workers),
		pending:    map[string]*pending{},
		calls:      &calls{run: map[string]*running{}, early: map[string]earlyCancel{}, sem: make(chan struct{}, cfg.CallWorkers)},
	}
	if !cfg.ClientOnly {
		s, err := wire.OpenFileSeen(filepath.Join(cfg.StateDir, SeenFile), cfg.SeenMax, cfg.SeenPerHost, cfg.Now)
		if err != nil {
			return nil, fmt.Errorf("federation: %w", err)
		}
		f.seen = s
	}
	return f, nil
}

// Metrics returns the collectors to register.
func (f *Federation) Metrics() *Metrics { return f.m }

// Host returns this manager's host id.
func (f *Federation) Host() string { return f.cfg.Host }

// TrustLine returns this host's own trust line, "HOST ed25519:KEY", for
// peers to paste.
func (f *Federation) TrustLine() string {
	return identity.FormatTrustLine(f.cfg.Host, identity.PublicKey(f.cfg.Key), identity.CapAll)
}

// Changes returns a channel that receives (coalesced) when the view
// changes: a host appears, expires, goes offline, or its fleets change.
func (f *Federation) Changes() <-chan struct{} { return f.changes }

func (f *Federation) notify() {
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

// View returns the union view: every peer heard from and every trusted
// peer, sorted by host, this host excluded.
func (f *Federation) View() []HostView { return f.view.snapshot() }

// Status is the connection's state for status and check.
type Status struct {
	// Connected is true while the broker connection is up.
	Connected bool
	// LastError is the last connection failure, "" when none.
	LastError string
	// Instance is the current reply queue's instance id.
	Instance string
}

// Status returns the connection's state.
func (f *Federation) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Status{Connected: f.sess != nil}
	if f.lastErr != nil {
		st.LastError = f.lastErr.Error()
	}
	if f.sess != nil {
		st.Instance = f.sess.instance
	}
	return st
}

// Start connects in the background and keeps reconnecting (backoff 0.5 s
// doubling to one heartbeat at most) until Stop. It returns at once; WaitConnected waits
// for the first connection. The context bounds nothing but Start itself.
func (f *Federation) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running || f.stopping {
		return errors.New("federation: already started")
	}
	f.running = true
	f.started = time.Now()
	f.baseCtx, f.baseCancel = context.WithCancel(context.WithoutCancel(ctx))
	runCtx, cancel := context.WithCancel(f.baseCtx)
	f.runCancel, f.runDone = cancel, make(chan struct{})
	go f.run(runCtx)
	return nil
}

// WaitConnected waits until the broker connection is up (or ctx ends,
// returning the last connection error).
func (f *Federation) WaitConnected(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		f.mu.Lock()
		up, err := f.sess != nil, f.lastErr
		f.mu.Unlock()
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("federation not connected: %w", err)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Stop leaves the federation cleanly: it stops taking requests, announces
// this host offline (so peers show it at once), waits for requests being
// executed (bounded by ctx), closes the connection and the seen-set, and
// fails requests still waiting for replies. Safe to call more than once.
func (f *Federation) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.stopping || !f.running {
		f.mu.Unlock()
		if f.seen != nil && !f.running {
			return f.seen.Close()
		}
		return nil
	}
	f.stopping = true
	s := f.sess
	f.mu.Unlock()

	if s != nil {
		s.stopIntake()
		if !f.cfg.ClientOnly {
			s.stopHeartbeat()
			octx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := f.publishOffline(octx, s); err != nil {
				f.log.Warn("federation: offline announcement not sent", "err", err)
			}
			cancel()
		}
	}
	f.execMu.Lock()
	f.execClosed = true
	f.execMu.Unlock()
	done := make(chan struct{})
	go func() { f.execWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		f.log.Warn("federation: stopping with requests still executing", "err", ctx.Err())
	}
	f.failAllPending(ErrStopped)
	f.runCancel()
	<-f.runDone
	f.baseCancel()
	if f.seen != nil {
		return f.seen.Close()
	}
	return nil
}

// session is one broker connection and what runs on it.
type session struct {
	conn     *amqp.Connection
	pub      *amqp.Channel // confirm mode: presence, requests, replies, dead letters
	control  *amqp.Channel // nil when ClientOnly
	instance string
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   chan *amqp.Error
	intake   sync.Once
	hbCtx    context.Context // the heartbeat's: ends with the session or stopHeartbeat
	hbCancel context.CancelFunc
	hbDone   chan struct{} // closed when the heartbeat loop has returned
}

// controlTag is the consumer tag of the control queue's consumer.
const controlTag = "fleetmgr-control"

// stopIntake cancels the control consumer: deliveries not yet taken stay
// in control.<host> for the next manager.
func (s *session) stopIntake() {
	s.intake.Do(func() {
		if s.control != nil {
			_ = s.control.Cancel(controlTag, false)
		}
	})
}

// run keeps a session up until ctx ends.
func (f *Federation) run(ctx context.Context) {
	defer close(f.runDone)
	var sweeper sync.WaitGroup
	sweeper.Add(1)
	go func() { defer sweeper.Done(); f.sweep(ctx) }()
	defer sweeper.Wait()
	// The retry interval doubles from 0.5 s but never past one heartbeat
	// (nor 30 s): once the broker answers again, this host is connected
	// within a beat and its presence (sent at once on connecting) is back
	// within two (issue 27 item 4; it was 30 s, so presence came back on
	// the backoff's time, not the broker's).
	maxBackoff := min(f.cfg.Heartbeat, 30*time.Second)
	first := min(500*time.Millisecond, maxBackoff)
	backoff := first
	var lastLogged string
	reprovisioned := false
	for ctx.Err() == nil {
		s, err := f.connect(ctx)
		if err != nil && f.cfg.Reprovision != nil && !reprovisioned && errors.Is(err, errAccessRefused) {
			reprovisioned = true
			perr := f.cfg.Reprovision(ctx)
			if perr == nil {
				f.log.Warn("federation: the broker refused this host's user; provisioned it again", "host", f.cfg.Host, "err", err)
				continue
			}
			err = fmt.Errorf("%w; provisioning it again failed: %w", err, perr)
		}
		if err != nil {
			f.mu.Lock()
			f.lastErr = err
			f.mu.Unlock()
			if err.Error() != lastLogged {
				f.log.Warn("federation: cannot connect to the broker; retrying", "err", err, "retry_in", backoff)
				lastLogged = err.Error()
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		lastLogged, reprovisioned = "", false
		began := time.Now()
		f.mu.Lock()
		f.sess, f.lastErr = s, nil
		f.mu.Unlock()
		f.m.Connected.Set(1)
		f.log.Info("federation: connected", "host", f.cfg.Host, "instance", s.instance)
		f.startSession(s)
		var cerr *amqp.Error
		select {
		case cerr = <-s.closed:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.sess = nil
		if cerr != nil {
			f.lastErr = fmt.Errorf("broker connection lost: %w", cerr)
		}
		f.mu.Unlock()
		f.m.Connected.Set(0)
		s.cancel()
		_ = s.conn.Close()
		s.wg.Wait()
		f.failSessionPending(s, ErrConnectionLost)
		if cerr != nil {
			f.log.Warn("federation: broker connection lost; reconnecting", "err", cerr)
		}
		if time.Since(began) > 30*time.Second {
			backoff = first
		}
	}
}

// dial opens the AMQP connection.
func (f *Federation) dial() (*amqp.Connection, error) {
	dial := f.cfg.Dial
	if dial == nil {
		dial = func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 5*time.Second)
			if err != nil {
				return nil, err
			}
			// Bound the handshake; amqp091 clears the deadline once open.
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			return c, nil
		}
	}
	// Acknowledge at once what the broker sends: requests and replies are
	// small messages one after another, which a broker with Nagle's
	// algorithm on (LavinMQ by default) would otherwise hold for the
	// delayed-ACK timer each (broker.QuickAck).
	quick := func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return broker.QuickAck(c), nil
	}
	return amqp.DialConfig(f.cfg.URI, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Dial: quick,
		Properties: amqp.Table{"connection_name": "fleetmgr federation " + f.cfg.Host}})
}

// errAccessRefused ends connect's error when the broker refused this
// host's user: its message says what to do.
var errAccessRefused = errors.New("restart serve to provision this host again (if another manager took this host id over, that provisioning is refused and names both keys: docs/FEDERATION.md \"Identity\")")

// connect opens a session: the connection, the publishing channel, this
// process's reply queue, and (unless ClientOnly) the roster queue and the
// control consumer. Errors say what to do.
func (f *Federation) connect(ctx context.Context) (*session, error) {
	conn, err := f.dial()
	if err != nil {
		if isCode(err, amqp.AccessRefused) {
			return nil, fmt.Errorf("the broker refused user %s on the federation vhost (%v): %w", BrokerUser(f.cfg.Host), err, errAccessRefused)
		}
		return nil, fmt.Errorf("AMQP connection: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &session{conn: conn, instance: newInstance(), ctx: sctx, cancel: cancel, hbDone: make(chan struct{})}
	s.hbCtx, s.hbCancel = context.WithCancel(sctx)
	fail := func(err error) (*session, error) {
		cancel()
		conn.Close()
		return nil, err
	}
	s.closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	if s.pub, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := s.pub.Confirm(false); err != nil {
		return fail(fmt.Errorf("publisher confirms: %w", err))
	}
	rq := ReplyQueue(f.cfg.Host, s.instance)
	rch, err := conn.Channel()
	if err != nil {
		return fail(err)
	}
	if _, err := rch.QueueDeclare(rq, false, true, true, false, nil); err != nil {
		return fail(fmt.Errorf("declare reply queue %s: %w", rq, err))
	}
	if err := rch.QueueBind(rq, s.instance, ReplyExchange(f.cfg.Host), false, nil); err != nil {
		return fail(fmt.Errorf("bind reply queue %s to %s: %w (is this host provisioned?)", rq, ReplyExchange(f.cfg.Host), err))
	}
	// Answers are verified and handed over at once; the bound keeps a
	// flood of large junk from piling up in memory.
	_ = rch.Qos(16, 0, false)
	replies, err := rch.Consume(rq, "", false, true, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consume %s: %w", rq, err))
	}
	returns := s.pub.NotifyReturn(make(chan amqp.Return, 16))
	s.wg.Add(2)
	go func() { defer s.wg.Done(); f.replyLoop(s, replies) }()
	go func() { defer s.wg.Done(); f.returnLoop(returns) }()
	if f.cfg.ClientOnly {
		return s, nil
	}

	roster, err := conn.Channel()
	if err != nil {
		return fail(err)
	}
	q := RosterQueue(f.cfg.Host)
	if _, err := roster.QueueDeclare(q, false, true, true, false, amqp.Table{"x-max-length": int64(RosterMaxLength)}); err != nil {
		if isCode(err, amqp.ResourceLocked) {
			return fail(fmt.Errorf("another manager is connected as host %q (it holds the roster queue %s): host ids must be unique; stop it or give this one another [federation] host", f.cfg.Host, q))
		}
		return fail(fmt.Errorf("declare roster queue %s: %w", q, err))
	}
	if err := roster.QueueBind(q, "roster.#", ExchangeRoster, false, nil); err != nil {
		return fail(fmt.Errorf("bind %s to %s: %w (is this host provisioned?)", q, ExchangeRoster, err))
	}
	_ = roster.Qos(256, 0, false)
	presence, err := roster.Consume(q, "", false, true, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consume %s: %w", q, err))
	}

	if s.control, err = conn.Channel(); err != nil {
		return fail(err)
	}
	cq := ControlQueue(f.cfg.Host)
	if _, err := s.control.QueueDeclarePassive(cq, true, false, false, false, nil); err != nil {
		if isCode(err, amqp.NotFound) {
			return fail(fmt.Errorf("the control queue %s does not exist: this host is not provisioned on the federation vhost", cq))
		}
		return fail(fmt.Errorf("control queue %s: %w", cq, err))
	}
	// Requests are acknowledged once verified (before they run), so the
	// prefetch only bounds those being verified: two per taker.
	_ = s.control.Qos(2*controlTakers, 0, false)
	requests, err := s.control.Consume(cq, controlTag, false, true, false, false, nil)
	if err != nil {
		if isCode(err, amqp.AccessRefused) {
			return fail(fmt.Errorf("control queue %s is in exclusive use by another manager with host id %q: host ids must be unique", cq, f.cfg.Host))
		}
		return fail(fmt.Errorf("consume %s: %w", cq, err))
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); f.rosterLoop(s, presence) }()
	go func() { defer s.wg.Done(); f.controlLoop(s, requests) }()
	return s, nil
}

// startSession starts what runs while a session is up besides its
// consumers: the heartbeat.
func (f *Federation) startSession(s *session) {
	if f.cfg.ClientOnly {
		return
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); defer close(s.hbDone); f.heartbeatLoop(s) }()
}

// stopHeartbeat ends the heartbeat and waits until no beat is being
// published, so nothing the host says comes after its offline.
func (s *session) stopHeartbeat() {
	s.hbCancel()
	<-s.hbDone
}

// isCode reports whether err is an AMQP error with code.
func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

// hostLabel bounds a host label: a trusted host's id, else "other".
func (f *Federation) hostLabel(h string) string {
	for _, t := range f.view.trusted {
		if t == h {
			return h
		}
	}
	if h == f.cfg.Host {
		return h
	}
	return "other"
}

// Names of this process's id streams (wire.Sequencer): one per queue
// that receives them, so each receiver's replay window sees its stream's
// numbers densely.
const streamRoster = "roster"

func streamControl(host string) string         { return "control " + host }
func streamReply(host, instance string) string { return "reply " + host + " " + instance }

// newInstance returns a reply instance id: 16 hex digits.
func newInstance() string { return wire.NewID()[:16] }

// publishOpts are the AMQP properties of one publish.
type publishOpts struct {
	mandatory  bool          // return it when no queue takes it
	persistent bool          // delivery mode 2
	ttl        time.Duration // broker-side expiry (0: none)
	wait       bool          // wait for the broker's confirm
}

// publish seals env and publishes it on s.
func (f *Federation) publish(ctx context.Context, s *session, exchange, key string, env *wire.Envelope, o publishOpts) error {
	dc, err := f.publishAsync(ctx, s, exchange, key, env, o)
	if err != nil || !o.wait {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the broker did not accept the message (nack)")
	}
	return nil
}

// publishAsync seals env, publishes it on s and returns the broker's
// deferred confirmation.
func (f *Federation) publishAsync(ctx context.Context, s *session, exchange, key string, env *wire.Envelope, o publishOpts) (*amqp.DeferredConfirmation, error) {
	h, err := wire.Seal(env, f.cfg.Key)
	if err != nil {
		return nil, err
	}
	p := amqp.Publishing{Headers: amqp.Table(h), ContentType: "application/json", MessageId: env.ID, Type: string(env.Kind),
		Timestamp: env.Issued, Body: env.Body}
	if o.persistent {
		p.DeliveryMode = amqp.Persistent
	}
	if o.ttl > 0 {
		p.Expiration = strconv.FormatInt(max(o.ttl.Milliseconds(), 1), 10)
	}
	return s.pub.PublishWithDeferredConfirmWithContext(ctx, exchange, key, o.mandatory, false, p)
}

// delivery converts an AMQP delivery for the verifier.
func delivery(d *amqp.Delivery) wire.Delivery {
	return wire.Delivery{Exchange: d.Exchange, RoutingKey: d.RoutingKey, Headers: d.Headers, Body: d.Body}
}

// logRejection logs a refused message at WARN, at most once per 10 s per
// queue and reason (with the count of those not logged).
func (f *Federation) logRejection(queue string, rej *wire.Rejection, extra ...any) {
	ok, suppressed := f.warn.allow(queue + "/" + string(rej.Reason))
	if !ok {
		return
	}
	if f.cfg.OnRefused != nil && rej.Reason != wire.ReasonStale {
		r := Refused{Queue: queue, Reason: rej.Reason, Detail: rej.Detail, NotLogged: suppressed}
		if rej.Env != nil {
			r.ClaimedFrom, r.ID, r.Kind = rej.Env.From, rej.Env.ID, rej.Env.Kind
		}
		f.cfg.OnRefused(r)
	}
	args := []any{"queue", queue, "reason", string(rej.Reason), "detail", rej.Detail}
	if rej.Env != nil {
		args = append(args, "claimed_from", rej.Env.From, "id", rej.Env.ID, "kind", string(rej.Env.Kind))
	}
	if suppressed > 0 {
		args = append(args, "not_logged_since_last", suppressed)
	}
	f.log.Warn("federation: message refused", append(args, extra...)...)
}

// Refused is a refused message as Config.OnRefused is told of it.
type Refused struct {
	// Queue is the queue it came by (control.<host>, the reply queue, the
	// roster queue).
	Queue string
	// Reason is why (wire.Reason); Detail says more.
	Reason wire.Reason
	Detail string
	// ClaimedFrom, ID and Kind are the envelope's as far as it parsed:
	// unverified unless the refusal came after the signature check.
	ClaimedFrom, ID string
	Kind            wire.Kind
	// NotLogged counts the refusals of this queue and reason since the
	// last one reported (rate limit).
	NotLogged int
}

// limiter lets one event per key through per interval.
type limiter struct {
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

func newLimiter(every time.Duration) *limiter {
	return &limiter{every: every, last: map[string]time.Time{}, count: map[string]int{}}
}

func (l *limiter) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		l.count[key]++
		return false, 0
	}
	n := l.count[key]
	l.last[key], l.count[key] = now, 0
	return true, n
}
