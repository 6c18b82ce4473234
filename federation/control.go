package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Sentinel errors of Control (match with errors.Is on a *ControlError).
var (
	// ErrRefused: the target verified the request and refused it (e.g.
	// not-authorised); it was not executed.
	ErrRefused = errors.New("refused")
	// ErrFailed: the verb ran on the target and failed.
	ErrFailed = errors.New("failed")
	// ErrTimeout: no reply within the control timeout. The target may or
	// may not have executed the request (at most once).
	ErrTimeout = errors.New("no reply")
	// ErrNoRoute: the broker has no control queue for the target host.
	ErrNoRoute = errors.New("no such host on the broker")
	// ErrNotConnected: this manager is not connected to the broker.
	ErrNotConnected = errors.New("not connected to the federation broker")
	// ErrConnectionLost: the connection dropped while waiting; the
	// target may or may not have executed the request.
	ErrConnectionLost = errors.New("broker connection lost while waiting for the reply")
	// ErrStopped: the federation stopped while waiting.
	ErrStopped = errors.New("federation stopped")
	// ErrHostGone: the target host left the online state (expired or
	// announced going offline) while a control request to it was out;
	// the request may or may not have run there (ControlError.MayHaveRun).
	ErrHostGone = errors.New("the host went away while the request was out")
	// ErrClockSkew: the target's clock, measured from its presence, is
	// further from this host's than requests allow (Config.ClockSkew):
	// it would refuse the request, so it was not sent. Msg says by how
	// much (SkewWords).
	ErrClockSkew = errors.New("the clocks are too far apart")
)

// ControlError is a control request that did not succeed.
type ControlError struct {
	// Host, Verb and Fleet are the request's.
	Host, Verb, Fleet string
	// Err is one of the sentinels above.
	Err error
	// Reason is the target's wire.Reason for a refusal.
	Reason wire.Reason
	// Msg is the target's message, or what to do.
	Msg string
	// MayHaveRun: the request left this host (the broker took it) and
	// no answer came — a timeout, the target going away, this host's
	// broker connection lost, this manager stopping — so whether it ran
	// on Host cannot be known here (issue 27 item 8). It is never
	// retried; for a lifecycle verb Error says to look before trying
	// again (MayHaveRunWords). False for a request that provably never
	// left (not connected, no route, refused by the broker, clock skew,
	// the deadline passed before sending).
	MayHaveRun bool
}

// Error says what failed, on which host, and why; for a lifecycle verb
// that may have run, what to look at before trying again.
func (e *ControlError) Error() string {
	s := fmt.Sprintf("%s %s@%s: %v", e.Verb, e.Fleet, e.Host, e.Err)
	if e.Reason != "" {
		s += " (" + string(e.Reason) + ")"
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.MayHaveRun && isLifecycleVerb(e.Verb) {
		s += "; " + MayHaveRunWords(e.Fleet, e.Host)
	}
	return s
}

// MayHaveRunWords is what a lifecycle request (start, stop, restart of
// fleet on host) that was sent and got no answer says: it may have run,
// and where to look before trying again — never an invitation to retry
// blindly (issue 27 item 8).
func MayHaveRunWords(fleet, host string) string {
	name := fleet + "@" + host
	return fmt.Sprintf("it may have run on %s: check `fleetmgr status %s` before trying again (it was not retried)", host, name)
}

// IsIndeterminate reports whether err is a control request that may have
// run on its host (a *ControlError with MayHaveRun).
func IsIndeterminate(err error) bool {
	var ce *ControlError
	return errors.As(err, &ce) && ce.MayHaveRun
}

func isLifecycleVerb(verb string) bool {
	return verb == wire.VerbStart || verb == wire.VerbStop || verb == wire.VerbRestart
}

// Unwrap returns the sentinel.
func (e *ControlError) Unwrap() error { return e.Err }

// capabilityOf returns what a verb needs of the peer.
func capabilityOf(verb string) identity.Capabilities {
	switch verb {
	case wire.VerbStart, wire.VerbStop, wire.VerbRestart:
		return identity.CapControl
	}
	return identity.CapRead
}

// controlRoute is what control.<host> takes: requests to this host by
// fleet.control with this host as routing key.
func (f *Federation) controlRoute() wire.Route {
	return wire.Route{Kinds: []wire.Kind{wire.KindControlRequest, wire.KindCallRequest, wire.KindCancel, wire.KindCatalogueRequest},
		Self: f.cfg.Host, Exchange: ExchangeControl, RoutingKey: func(e *wire.Envelope) string { return e.To }}
}

// replyRoute is what this process's reply queue takes.
func (f *Federation) replyRoute(instance string) wire.Route {
	return wire.Route{Kinds: []wire.Kind{wire.KindControlReply, wire.KindCallProgress, wire.KindCallReply, wire.KindCatalogueReply},
		Self: f.cfg.Host, Exchange: ReplyExchange(f.cfg.Host), RoutingKey: func(*wire.Envelope) string { return instance }}
}

// controlLoop serves control.<host>. Each delivery is verified (the
// verification records its id in the durable seen-set), then either
// dead-lettered with its reason or acknowledged and executed: ack comes
// before execution, so a crash can lose a request but never run it twice.
//
// Deliveries are taken by controlTakers goroutines, so the durable
// seen-set's fsyncs of concurrent requests are shared (group commit)
// instead of one after the other; each delivery is still verified,
// recorded and acknowledged before it is executed.
func (f *Federation) controlLoop(s *session, ds <-chan amqp.Delivery) {
	var wg sync.WaitGroup
	for range controlTakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ds {
				f.handleControl(s, &d)
			}
		}()
	}
	wg.Wait()
}

// controlTakers is how many deliveries of control.<host> are verified at
// once.
const controlTakers = 8

func (f *Federation) handleControl(s *session, d *amqp.Delivery) {
	v, rej := f.verifier.Verify(delivery(d), f.controlRoute(), f.seen)
	if rej != nil {
		f.explainSkew(rej)
		f.deadLetter(s, d, rej)
		return
	}
	var req wire.ControlRequest
	switch v.Kind {
	case wire.KindControlRequest:
		if err := json.Unmarshal(v.Body, &req); err != nil {
			f.deadLetter(s, d, &wire.Rejection{Reason: wire.ReasonMalformed, Detail: "control request body: " + err.Error(), Env: &v.Envelope})
			return
		}
		if err := req.Check(); err != nil {
			f.deadLetter(s, d, &wire.Rejection{Reason: wire.ReasonMalformed, Detail: "control request: " + err.Error(), Env: &v.Envelope})
			return
		}
	case wire.KindCallRequest:
		f.handleCall(s, d, v)
		return
	case wire.KindCancel:
		f.handleCancel(d, v)
		return
	case wire.KindCatalogueRequest:
		f.handleCatalogue(s, d, v)
		return
	}
	if !wire.KnownVerb(req.Verb) {
		rej := &wire.Rejection{Reason: wire.ReasonUnknownVerb, Detail: fmt.Sprintf("verb %q (this manager knows %v)", req.Verb, wire.Verbs), Env: &v.Envelope}
		f.deadLetter(s, d, rej)
		f.m.ControlRequests.WithLabelValues("in", "other", "refused").Inc()
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	if need := capabilityOf(req.Verb); !v.Peer.Caps.Has(need) {
		rej := &wire.Rejection{Reason: wire.ReasonNotAuthorised, Env: &v.Envelope,
			Detail: fmt.Sprintf("host %s may %s; %s needs %s", v.From, v.Peer.Caps, req.Verb, need)}
		f.deadLetter(s, d, rej)
		f.m.ControlRequests.WithLabelValues("in", req.Verb, "refused").Inc()
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	if !f.beginExec() {
		// Verified and recorded during Stop: not run, and the sender is
		// told rather than left to time out.
		_ = d.Ack(false)
		f.m.ControlRequests.WithLabelValues("in", req.Verb, "failed").Inc()
		body, _ := json.Marshal(&wire.ControlReply{Status: wire.StatusFailed, Error: "host " + f.cfg.Host + " is stopping its manager; the request was not run"})
		f.sendAnswer(s, v, wire.KindControlReply, 0, req.Reply, body, true)
		return
	}
	if err := d.Ack(false); err != nil {
		// The id is in the seen-set: a redelivery is refused as replayed.
		f.execWG.Done()
		f.log.Warn("federation: ack failed; the request is not executed", "id", v.ID, "err", err)
		return
	}
	f.log.Info("federation: control request", "from", v.From, "verb", req.Verb, "fleet", req.Fleet, "id", v.ID)
	// Bounded concurrency: a full pool holds this taker, and the prefetch
	// bound holds the broker.
	select {
	case f.execSem <- struct{}{}:
	case <-s.ctx.Done():
		f.execWG.Done()
		return
	}
	go func() {
		defer f.execWG.Done()
		defer func() { <-f.execSem }()
		f.execute(s, v, &req)
	}()
}

// execute runs one authorised request and sends the signed reply.
func (f *Federation) execute(s *session, v *wire.Verified, req *wire.ControlRequest) {
	ctx, cancel := context.WithDeadline(f.baseCtx, v.Expires.Add(f.cfg.ClockSkew))
	defer cancel()
	ctx = context.WithValue(ctx, expiryKey{}, v.Expires)
	result, err := f.cfg.Executor.Control(ctx, v.From, req.Verb, req.Fleet, req.Args)
	rep := wire.ControlReply{Status: wire.StatusOK, Result: result}
	outcome := "ok"
	if err == nil && len(result) > 0 && !json.Valid(result) {
		err = errors.New("the executor's result is not JSON")
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		rep, outcome = wire.ControlReply{Status: wire.StatusFailed, Error: msg}, "failed"
	}
	f.m.ControlRequests.WithLabelValues("in", req.Verb, outcome).Inc()
	body, _ := json.Marshal(&rep)
	if len(body) > wire.MaxControlReply {
		body, _ = json.Marshal(&wire.ControlReply{Status: wire.StatusFailed,
			Error: fmt.Sprintf("the result is %d bytes, more than a reply carries (%d)", len(body), wire.MaxControlReply)})
	}
	f.sendAnswer(s, v, wire.KindControlReply, 0, req.Reply, body, true)
}

type expiryKey struct{}

// RequestExpiry returns, inside Executor.Control, the request's expiry as
// its sender set it (issued + the sender's control timeout, on the
// sender's clock): past it the sender has stopped waiting and was told
// that the outcome is unknown (ControlError.MayHaveRun), so an answer
// sent after it reaches nobody. ok is false outside an execution.
func RequestExpiry(ctx context.Context) (t time.Time, ok bool) {
	t, ok = ctx.Value(expiryKey{}).(time.Time)
	return t, ok
}

// refusalReply answers a verified sender's refused request, so it gets
// the reason instead of a timeout. Forged requests never get one: only
// requests that passed verification reach here.
func (f *Federation) refusalReply(s *session, v *wire.Verified, reply string, rej *wire.Rejection) {
	kind := wire.KindControlReply
	var body []byte
	switch v.Kind {
	case wire.KindCallRequest:
		kind = wire.KindCallReply
		body, _ = json.Marshal(&wire.CallReply{Reason: rej.Reason})
	case wire.KindCatalogueRequest:
		kind = wire.KindCatalogueReply
		body, _ = json.Marshal(&wire.CatalogueReply{Reason: rej.Reason, Error: rej.Detail})
	default:
		body, _ = json.Marshal(&wire.ControlReply{Status: wire.StatusRefused, Reason: rej.Reason, Error: rej.Detail})
	}
	f.sendAnswer(s, v, kind, 0, reply, body, true)
}

// sendAnswer publishes a signed answer (reply or progress number seq) to
// the requester's reply exchange; wait: for the broker's confirm (an
// answer's failure is logged).
func (f *Federation) sendAnswer(s *session, v *wire.Verified, kind wire.Kind, seq uint32, instance string, body []byte, wait bool) {
	now := f.cfg.Now()
	env := &wire.Envelope{Kind: kind, ID: f.ids.Next(streamReply(v.From, instance)), Re: v.ID, Seq: seq, From: f.cfg.Host, To: v.From,
		Issued: now, Expires: now.Add(max(f.cfg.ControlTimeout, time.Minute)), Body: body}
	ctx, cancel := context.WithTimeout(f.baseCtx, 10*time.Second)
	defer cancel()
	cur := f.current()
	if cur == nil {
		cur = s
	}
	if err := f.publish(ctx, cur, ReplyExchange(v.From), instance, env, publishOpts{wait: wait}); err != nil {
		f.log.Warn("federation: reply not sent", "to", v.From, "re", v.ID, "err", err)
	}
}

// deadLetterV dead-letters a verified request for reason and returns the
// rejection (for a refusal reply).
func (f *Federation) deadLetterV(s *session, d *amqp.Delivery, v *wire.Verified, reason wire.Reason, detail string) *wire.Rejection {
	rej := &wire.Rejection{Reason: reason, Detail: detail, Env: &v.Envelope}
	f.deadLetter(s, d, rej)
	return rej
}

// deadLetter refuses a request: it publishes the message, unchanged but
// for the x-fleetmgr-reject-* and x-fleetmgr-original-* headers, to
// fleet.dlx (so fleet.dlq shows why), waits for the broker's confirm and
// acknowledges the original. basic.reject cannot add a header, so the
// queue's own dead-lettering (reject with requeue=false) is the fallback
// when that publish fails: the message still lands in fleet.dlq, with the
// broker's x-death header but without the reason. Either way it is never
// executed and never requeued.
func (f *Federation) deadLetter(s *session, d *amqp.Delivery, rej *wire.Rejection) {
	f.m.Rejections.WithLabelValues(string(rej.Reason)).Inc()
	f.logRejection(ControlQueue(f.cfg.Host), rej)
	h := maps.Clone(d.Headers)
	if h == nil {
		h = amqp.Table{}
	}
	h[wire.HdrRejectReason] = string(rej.Reason)
	h[wire.HdrRejectDetail] = rej.Detail
	h[wire.HdrRejectedBy] = f.cfg.Host
	h[wire.HdrOrigExchange] = d.Exchange
	h[wire.HdrOrigRoutingKey] = d.RoutingKey
	p := amqp.Publishing{Headers: h, ContentType: d.ContentType, MessageId: d.MessageId, Type: d.Type,
		Timestamp: d.Timestamp, DeliveryMode: amqp.Persistent, Body: d.Body}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	err := func() error {
		dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, ExchangeDLX, d.RoutingKey, false, false, p)
		if err != nil {
			return err
		}
		ok, err := dc.WaitContext(ctx)
		if err == nil && !ok {
			err = errors.New("nack")
		}
		return err
	}()
	if err != nil {
		f.log.Warn("federation: dead-letter publish failed; rejecting to the queue's dead-letter exchange without the reason", "err", err)
		_ = d.Reject(false)
		return
	}
	_ = d.Ack(false)
}

// pending is a request waiting for its answer.
type pending struct {
	id   string
	host string    // the target: the only host whose reply is taken
	kind wire.Kind // the answer's kind
	sess *session
	ch   chan answer // buffered 1: the first answer or failure wins
	// progress receives call-progress messages (nil: none taken); a
	// full buffer drops the newest (counted).
	progress chan *wire.Verified
}

// answer is what ends a pending request.
type answer struct {
	v   *wire.Verified
	err error
}

func (f *Federation) current() *session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sess
}

func (p *pending) finish(a answer) {
	select {
	case p.ch <- a:
	default:
	}
}

func (f *Federation) failSessionPending(s *session, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pending {
		if p.sess == s {
			p.finish(answer{err: err})
		}
	}
}

func (f *Federation) failAllPending(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pending {
		p.finish(answer{err: err})
	}
}

// replyLoop consumes this process's reply queue.
func (f *Federation) replyLoop(s *session, ds <-chan amqp.Delivery) {
	for d := range ds {
		f.handleReply(s, &d)
		_ = d.Ack(false)
	}
}

func (f *Federation) handleReply(s *session, d *amqp.Delivery) {
	v, rej := f.verifier.Verify(delivery(d), f.replyRoute(s.instance), f.replySeen)
	if rej == nil {
		f.mu.Lock()
		p := f.pending[v.Re]
		f.mu.Unlock()
		switch {
		case p == nil:
			f.m.RepliesDropped.WithLabelValues("late").Inc()
			if ok, n := f.warn.allow("late-reply"); ok {
				f.log.Info("federation: reply dropped: nobody waits for it (late, or not for this process)", "from", v.From, "re", v.Re, "not_logged_since_last", n)
			}
			return
		case v.From != p.host:
			// A trusted host answering a request sent to another: a reply
			// forged for another caller.
			rej = &wire.Rejection{Reason: wire.ReasonFromMismatch, Detail: fmt.Sprintf("reply to a request for %s came from %s", p.host, v.From), Env: &v.Envelope}
		case v.Kind == wire.KindCallProgress && p.progress != nil:
			select {
			case p.progress <- v:
			default:
				f.m.RepliesDropped.WithLabelValues("progress-overflow").Inc()
			}
			return
		case v.Kind != p.kind:
			rej = &wire.Rejection{Reason: wire.ReasonMalformed, Detail: fmt.Sprintf("a %s answering a request that wants %s", v.Kind, p.kind), Env: &v.Envelope}
		default:
			p.finish(answer{v: v})
			return
		}
	}
	f.m.RepliesDropped.WithLabelValues(string(rej.Reason)).Inc()
	f.logRejection(ReplyQueue(f.cfg.Host, s.instance), rej)
}

// returnLoop fails requests the broker returned as unroutable (mandatory
// publish to a host without a control queue).
func (f *Federation) returnLoop(rs <-chan amqp.Return) {
	for r := range rs {
		f.mu.Lock()
		p := f.pending[r.MessageId]
		f.mu.Unlock()
		if p != nil {
			p.finish(answer{err: ErrNoRoute})
		}
	}
}

// Control asks host to run verb on its fleet and returns the result (the
// JSON value the target's Executor returned). It waits at most the
// control timeout (or ctx's deadline when sooner). Failures are
// *ControlError wrapping ErrRefused (with the target's Reason),
// ErrFailed (the verb's error), ErrTimeout, ErrNoRoute, ErrNotConnected,
// ErrConnectionLost or ErrStopped; invalid arguments are plain errors.
// A request is executed at most once; after ErrTimeout, ErrHostGone,
// ErrConnectionLost or ErrStopped it may have been (MayHaveRun: the
// request had left; its message says to look before trying again), and
// Control returns as soon as the host goes away (ErrHostGone) rather
// than at the timeout.
func (f *Federation) Control(ctx context.Context, host, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
	if err := identity.CheckHost(host); err != nil {
		return nil, err
	}
	if !wire.KnownVerb(verb) {
		return nil, fmt.Errorf("unknown verb %q (want one of %v)", verb, wire.Verbs)
	}
	cerr := func(err error, msg string) *ControlError {
		return &ControlError{Host: host, Verb: verb, Fleet: fleet, Err: err, Msg: msg}
	}
	s := f.current()
	if s == nil {
		return nil, f.outcome(verb, cerr(ErrNotConnected, f.Status().LastError))
	}
	req := wire.ControlRequest{Verb: verb, Fleet: fleet, Args: args, Reply: s.instance}
	if err := req.Check(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(&req)
	if err != nil {
		return nil, err
	}
	if len(body) > wire.MaxRequestBody {
		return nil, fmt.Errorf("request of %d bytes is larger than the %d a control request carries", len(body), wire.MaxRequestBody)
	}
	v, err := f.roundTrip(ctx, s, host, wire.KindControlRequest, body, f.cfg.ControlTimeout, wire.KindControlReply, nil)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			f.m.ControlRequests.WithLabelValues("out", verb, "cancelled").Inc()
			return nil, err
		}
		var rt *roundTripError
		if errors.As(err, &rt) {
			e := cerr(rt.err, rt.msg)
			e.MayHaveRun = rt.sent
			return nil, f.outcome(verb, e)
		}
		return nil, err
	}
	var rep wire.ControlReply
	if err := json.Unmarshal(v.Body, &rep); err != nil || rep.Check() != nil {
		return nil, f.outcome(verb, cerr(ErrFailed, "the reply does not decode"))
	}
	switch rep.Status {
	case wire.StatusOK:
		f.m.ControlRequests.WithLabelValues("out", verb, "ok").Inc()
		return rep.Result, nil
	case wire.StatusRefused:
		e := cerr(ErrRefused, rep.Error)
		e.Reason = rep.Reason
		return nil, f.outcome(verb, e)
	default:
		return nil, f.outcome(verb, cerr(ErrFailed, rep.Error))
	}
}

// explainSkew adds to a request refused for its times what the sender's
// clock offset, measured from its presence, says (issue 27: the reason is
// shown at both ends): "… (beta's clock is 10m0s ahead: its requests are
// refused …)". The signer is only trusted for this when the signature
// verified, which expired and not-yet-valid come after.
func (f *Federation) explainSkew(rej *wire.Rejection) {
	if rej.Env == nil || rej.Reason != wire.ReasonExpired && rej.Reason != wire.ReasonNotYetValid {
		return
	}
	if sk, ok := f.view.skewOf(rej.Env.From); ok {
		if w := SkewWords(rej.Env.From, sk, f.cfg.ClockSkew); w != "" {
			rej.Detail += " (" + w + ")"
		}
	}
}

// roundTripError is a round trip that got no answer: a sentinel and what
// to tell the operator.
type roundTripError struct {
	err error
	msg string
	// sent: the request left this host (the broker may have delivered
	// it), so it may have run.
	sent bool
}

func (e *roundTripError) Error() string { return e.err.Error() + ": " + e.msg }
func (e *roundTripError) Unwrap() error { return e.err }

// roundTrip sends a signed request of kind to host with body (which names
// s's instance as its reply address) and waits for the answer of kind
// want, at most timeout (or ctx's deadline when sooner). Progress
// messages, when onProgress is set, are handed to it in order, before the
// answer. It returns the verified answer; a *roundTripError (ErrTimeout,
// ErrNoRoute, ErrConnectionLost, ErrStopped); or ctx's error when the
// caller cancelled. onTimeout, when the wait ends without an answer
// (deadline or cancellation), is told the request's id (to send a cancel).
func (f *Federation) roundTrip(ctx context.Context, s *session, host string, kind wire.Kind, body []byte, timeout time.Duration,
	want wire.Kind, onProgress func(v *wire.Verified), onGiveUp ...func(id string)) (*wire.Verified, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return nil, &roundTripError{err: ErrTimeout, msg: "the deadline passed before sending"}
	}
	if sk, ok := f.view.skewOf(host); ok && abs(sk) > f.cfg.ClockSkew {
		// host would refuse it (expired or not-yet-valid on its clock),
		// and this host its answer: say so now rather than time out.
		return nil, &roundTripError{err: ErrClockSkew, msg: SkewWords(host, sk, f.cfg.ClockSkew)}
	}
	now := f.cfg.Now()
	env := &wire.Envelope{Kind: kind, ID: f.ids.Next(streamControl(host)), From: f.cfg.Host, To: host, Issued: now, Expires: now.Add(timeout), Body: body}
	p := &pending{id: env.ID, host: host, kind: want, sess: s, ch: make(chan answer, 1)}
	if onProgress != nil {
		p.progress = make(chan *wire.Verified, 256)
	}
	f.mu.Lock()
	f.pending[p.id] = p
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.pending, p.id)
		f.mu.Unlock()
	}()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	// Mandatory: a host with no control queue is an immediate error, not
	// a timeout. The broker's TTL = the timeout: a request waiting for a
	// stopped target expires into fleet.dlq. Transient: a broker restart
	// ends this process's reply queue too, so a request kept across it
	// would run with nobody waiting for its answer. The broker's confirm
	// is awaited alongside the answer, not before it.
	dc, err := f.publishAsync(wctx, s, ExchangeControl, host, env, publishOpts{mandatory: true, ttl: timeout})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A closed channel sent nothing; any other failure may have come
		// after the frames left.
		return nil, &roundTripError{err: ErrConnectionLost, msg: "publishing the request: " + err.Error(), sent: !errors.Is(err, amqp.ErrClosed)}
	}
	confirmed := dc.Done()
	// A control request ends at once when its host goes away (expires or
	// announces going offline) after it was sent to it online; tool calls
	// have the proxy's own watch (proxy.routeRemote).
	var hostWatch <-chan time.Time
	if _, st := f.view.lastSeen(host); kind == wire.KindControlRequest && st == HostOnline {
		t := time.NewTicker(min(max(f.cfg.Heartbeat/4, 50*time.Millisecond), time.Second))
		defer t.Stop()
		hostWatch = t.C
	}
	lastSeq := uint32(0)
	progress := func(v *wire.Verified) {
		if v.Seq > lastSeq { // in order; a duplicate or late one is dropped
			lastSeq = v.Seq
			onProgress(v)
		}
	}
	for {
		select {
		case <-confirmed:
			confirmed = nil
			if !dc.Acked() {
				// Not enqueued: it was not delivered.
				return nil, &roundTripError{err: ErrConnectionLost, msg: "the broker did not take the request (nack)"}
			}
			continue
		case <-hostWatch:
			at, st := f.view.lastSeen(host)
			if st == HostOnline {
				continue
			}
			f.giveUp(p, env.ID, onGiveUp)
			return nil, &roundTripError{err: ErrHostGone, msg: hostGoneWords(host, st, at), sent: true}
		case v := <-p.progress:
			progress(v)
			continue
		case a := <-p.ch:
			if a.err != nil {
				msg, sent := "", true
				switch {
				case errors.Is(a.err, ErrNoRoute):
					// Returned unroutable: it reached no queue.
					msg, sent = fmt.Sprintf("the broker has no control queue for host %q: is it in the federation (provisioned, same vhost)?", host), false
				case kind != wire.KindControlRequest:
					// Tool calls and catalogues: the proxy words these itself.
				case errors.Is(a.err, ErrConnectionLost):
					msg = fmt.Sprintf("this host (%s) has lost the federation broker; nothing comes from %s until it reconnects", f.cfg.Host, host)
				case errors.Is(a.err, ErrStopped):
					msg = fmt.Sprintf("this host's (%s) manager stopped while the request was out", f.cfg.Host)
				}
				return nil, &roundTripError{err: a.err, msg: msg, sent: sent}
			}
			// Progress queued before the answer goes first.
			for drained := false; !drained; {
				select {
				case v := <-p.progress:
					if v.Seq < a.v.Seq {
						progress(v)
					}
				default:
					drained = true
				}
			}
			if kind == wire.KindCallRequest {
				f.m.CallRTT.Observe(time.Since(sent).Seconds())
			} else {
				f.m.ControlRTT.Observe(time.Since(sent).Seconds())
			}
			return a.v, nil
		case <-wctx.Done():
			f.giveUp(p, env.ID, onGiveUp)
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			at, st := f.view.lastSeen(host)
			msg := fmt.Sprintf("within %s; host %s is %s", timeout.Round(time.Millisecond), host, st)
			if !at.IsZero() {
				msg += fmt.Sprintf(" (last seen %s ago)", time.Since(at).Round(time.Second))
			}
			return nil, &roundTripError{err: ErrTimeout, msg: msg, sent: true}
		}
	}
}

// giveUp ends the wait for p: nobody waits from here on, so a reply
// arriving while the cancel is published (onGiveUp) is counted late, and
// one that came in with the give-up is too (issue 27 item 7: one of 19
// late replies was neither delivered nor counted).
func (f *Federation) giveUp(p *pending, id string, onGiveUp []func(id string)) {
	f.mu.Lock()
	delete(f.pending, p.id)
	f.mu.Unlock()
	select {
	case a := <-p.ch:
		if a.v != nil {
			f.m.RepliesDropped.WithLabelValues("late").Inc()
		}
	default:
	}
	for _, g := range onGiveUp {
		g(id)
	}
}

// hostGoneWords says how host left the online state.
func hostGoneWords(host string, st HostState, at time.Time) string {
	s := fmt.Sprintf("host %s stopped answering (no presence for %d heartbeats)", host, ExpiryBeats)
	if st == HostOffline {
		s = "host " + host + "'s manager stopped (it announced going offline)"
	}
	if !at.IsZero() {
		s += fmt.Sprintf(", last seen %s ago", time.Since(at).Round(time.Second))
	}
	return s
}

// outcome counts a failed outgoing request and returns err.
func (f *Federation) outcome(verb string, err *ControlError) error {
	o := "error"
	switch {
	case errors.Is(err, ErrRefused):
		o = "refused"
	case errors.Is(err, ErrFailed):
		o = "failed"
	case errors.Is(err, ErrTimeout):
		o = "timeout"
	}
	f.m.ControlRequests.WithLabelValues("out", verbLabel(verb), o).Inc()
	return err
}
