package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Remote tool calls and catalogues (docs/FEDERATION.md "Remote tool
// calls") on the control path: a
// call-request to control.<host> (same verification, seen-set and
// dead-lettering as control), call-progress messages and one call-reply
// back to the caller's reply queue, a cancel that reaches the running
// call. At most once: the request is acknowledged before it is forwarded.

// CallHandler serves tool calls and catalogues peers ask for. The daemon
// implements it with its proxy: a call goes to the local fleetd as primary
// (like any call from fleetmgr), the catalogue is the fleet's cached
// tools/list.
type CallHandler interface {
	// Call forwards one tools/call. args is the arguments object (no
	// "fleet"), meta the caller's _meta minus identity keys (either may be
	// empty). progress, when not nil, relays one upstream
	// notifications/progress params object; it must not be called after
	// Call returns. ctx ends at the call's expiry (the caller's timeout),
	// when the caller cancels, or when the federation stops; the handler
	// then cancels upstream. The result is the tools/call result object;
	// an *RPCError is relayed as a JSON-RPC error, any other error as
	// RPCError{Code: -32603, Message: err.Error()}.
	Call(ctx context.Context, from, fleet, tool string, args, meta json.RawMessage, progress func(params json.RawMessage)) (json.RawMessage, error)
	// Catalogue returns the fleet's tools (the "tools" array of its
	// tools/list) and the SHA-256 (hex) presence announces for it.
	Catalogue(ctx context.Context, from, fleet string) (tools json.RawMessage, hash string, err error)
}

// RPCError is a JSON-RPC error object, as a forwarded call's upstream
// (or the target manager) answered it.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error returns the message with its code.
func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// DefaultCallWorkers bounds the tool calls served at once.
const DefaultCallWorkers = 32

// running is a call being served, by request id.
type running struct {
	from   string
	cancel context.CancelFunc
}

// calls holds the calls being served.
type calls struct {
	mu  sync.Mutex
	run map[string]*running
	sem chan struct{}
	// early holds cancels that came before their call was registered
	// (requests are taken by several goroutines), by call id → sender and
	// until when to remember it.
	early map[string]earlyCancel
}

type earlyCancel struct {
	from  string
	until time.Time
}

// maxEarly bounds calls.early.
const maxEarly = 4096

// handleCall serves a verified call-request: authorised → ack → forward.
func (f *Federation) handleCall(s *session, d *amqp.Delivery, v *wire.Verified) {
	var req wire.CallRequest
	if err := json.Unmarshal(v.Body, &req); err != nil {
		f.deadLetterV(s, d, v, wire.ReasonMalformed, "call request body: "+err.Error())
		return
	}
	if err := checkCall(&req); err != nil {
		f.deadLetterV(s, d, v, wire.ReasonMalformed, "call request: "+err.Error())
		return
	}
	if f.cfg.Calls == nil {
		rej := f.deadLetterV(s, d, v, wire.ReasonUnknownVerb, "tool calls are not served by this manager")
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	if !v.Peer.Caps.Has(identity.CapCalls) {
		rej := f.deadLetterV(s, d, v, wire.ReasonNotAuthorised, fmt.Sprintf("host %s may %s; tool calls need calls", v.From, v.Peer.Caps))
		f.m.Calls.WithLabelValues("in", v.From, "refused").Inc()
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	if !f.beginExec() {
		_ = d.Ack(false)
		b, _ := json.Marshal(&RPCError{Code: -32603, Message: "host " + f.cfg.Host + " is stopping its manager; the call was not forwarded"})
		body, _ := json.Marshal(&wire.CallReply{Error: b})
		f.sendAnswer(s, v, wire.KindCallReply, 1, req.Reply, body, true)
		return
	}
	if err := d.Ack(false); err != nil {
		f.execWG.Done()
		f.log.Warn("federation: ack failed; the call is not forwarded", "id", v.ID, "err", err)
		return
	}
	select {
	case f.calls.sem <- struct{}{}:
	case <-s.ctx.Done():
		f.execWG.Done()
		return
	}
	ctx, cancel := context.WithDeadline(f.baseCtx, v.Expires.Add(f.cfg.ClockSkew))
	f.calls.mu.Lock()
	f.calls.run[v.ID] = &running{from: v.From, cancel: cancel}
	if ec, ok := f.calls.early[v.ID]; ok && ec.from == v.From {
		delete(f.calls.early, v.ID)
		cancel()
	}
	f.calls.mu.Unlock()
	go func() {
		defer f.execWG.Done()
		defer func() { <-f.calls.sem }()
		defer func() {
			cancel()
			f.calls.mu.Lock()
			delete(f.calls.run, v.ID)
			f.calls.mu.Unlock()
		}()
		f.serveCall(ctx, s, v, &req)
	}()
}

// checkCall validates a call request's bounds.
func checkCall(r *wire.CallRequest) error {
	switch {
	case !wire.ValidFleetName(r.Fleet):
		return fmt.Errorf("fleet %q is not a fleet name", r.Fleet)
	case !validTool(r.Tool):
		return fmt.Errorf("tool name %q does not match ^[a-zA-Z0-9_-]{1,64}$", r.Tool)
	case !wire.ValidInstance(r.Reply):
		return fmt.Errorf("reply %q is not a reply instance", r.Reply)
	case len(r.Arguments) > 0 && !isJSONObject(r.Arguments):
		return errors.New("arguments must be a JSON object")
	case len(r.Meta) > 0 && !isJSONObject(r.Meta):
		return errors.New("_meta must be a JSON object")
	}
	return nil
}

func validTool(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isJSONObject(b json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil && m != nil
}

// serveCall runs the handler and sends progress and the reply, in order
// (one goroutine publishes them all, on one channel).
func (f *Federation) serveCall(ctx context.Context, s *session, v *wire.Verified, req *wire.CallRequest) {
	var seq uint32
	var progress func(json.RawMessage)
	if req.Progress {
		progress = func(params json.RawMessage) {
			if ctx.Err() != nil || len(params) == 0 || !json.Valid(params) {
				return
			}
			body, _ := json.Marshal(&wire.CallProgress{Params: params})
			if len(body) > wire.MaxProgressBody {
				return
			}
			seq++
			f.sendAnswer(s, v, wire.KindCallProgress, seq, req.Reply, body, false)
		}
	}
	result, err := f.cfg.Calls.Call(ctx, v.From, req.Fleet, req.Tool, req.Arguments, req.Meta, progress)
	rep := wire.CallReply{Result: result}
	outcome := "ok"
	if err == nil && (len(result) == 0 || !json.Valid(result)) {
		err = errors.New("the fleet's result is not JSON")
	}
	if err != nil {
		var re *RPCError
		if !errors.As(err, &re) {
			re = &RPCError{Code: -32603, Message: err.Error()}
			if ctx.Err() != nil {
				re.Message = "the call was cancelled or timed out on host " + f.cfg.Host + ": " + err.Error()
			}
		}
		b, _ := json.Marshal(re)
		rep, outcome = wire.CallReply{Error: b}, "error"
	}
	f.m.Calls.WithLabelValues("in", v.From, outcome).Inc()
	body, _ := json.Marshal(&rep)
	if len(body) > wire.MaxCallBody {
		b, _ := json.Marshal(&RPCError{Code: -32603, Message: fmt.Sprintf("the result is %d bytes, more than a remote call carries (%d)", len(body), wire.MaxCallBody)})
		body, _ = json.Marshal(&wire.CallReply{Error: b})
	}
	f.sendAnswer(s, v, wire.KindCallReply, seq+1, req.Reply, body, true)
}

// handleCancel cancels the call a verified cancel names, when it runs here
// for the host that sent the cancel. A cancel for a call that has ended
// (or never came) is acknowledged and ignored.
func (f *Federation) handleCancel(d *amqp.Delivery, v *wire.Verified) {
	_ = d.Ack(false)
	f.calls.mu.Lock()
	r := f.calls.run[v.Re]
	if r == nil {
		// Perhaps its call is still being taken: remember the cancel
		// for a minute (a call is registered within milliseconds of arriving).
		now := time.Now()
		if len(f.calls.early) >= maxEarly {
			for id, ec := range f.calls.early {
				if now.After(ec.until) {
					delete(f.calls.early, id)
				}
			}
		}
		if len(f.calls.early) < maxEarly {
			f.calls.early[v.Re] = earlyCancel{from: v.From, until: now.Add(time.Minute)}
		}
	}
	f.calls.mu.Unlock()
	if r == nil || r.from != v.From {
		f.log.Debug("federation: cancel for no running call", "from", v.From, "re", v.Re)
		return
	}
	f.log.Info("federation: call cancelled by its caller", "from", v.From, "id", v.Re)
	r.cancel()
}

// handleCatalogue serves a verified catalogue-request.
func (f *Federation) handleCatalogue(s *session, d *amqp.Delivery, v *wire.Verified) {
	var req wire.CatalogueRequest
	if err := json.Unmarshal(v.Body, &req); err != nil || !wire.ValidFleetName(req.Fleet) || !wire.ValidInstance(req.Reply) {
		f.deadLetterV(s, d, v, wire.ReasonMalformed, "catalogue request body")
		return
	}
	if f.cfg.Calls == nil {
		rej := f.deadLetterV(s, d, v, wire.ReasonUnknownVerb, "catalogues are not served by this manager")
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	if !v.Peer.Caps.Has(identity.CapRead) && !v.Peer.Caps.Has(identity.CapCalls) {
		rej := f.deadLetterV(s, d, v, wire.ReasonNotAuthorised, fmt.Sprintf("host %s may %s; the catalogue needs read or calls", v.From, v.Peer.Caps))
		f.refusalReply(s, v, req.Reply, rej)
		return
	}
	_ = d.Ack(false)
	if !f.beginExec() {
		body, _ := json.Marshal(&wire.CatalogueReply{Error: "host " + f.cfg.Host + " is stopping its manager"})
		f.sendAnswer(s, v, wire.KindCatalogueReply, 0, req.Reply, body, true)
		return
	}
	go func() {
		defer f.execWG.Done()
		ctx, cancel := context.WithDeadline(f.baseCtx, v.Expires.Add(f.cfg.ClockSkew))
		defer cancel()
		tools, hash, err := f.cfg.Calls.Catalogue(ctx, v.From, req.Fleet)
		rep := wire.CatalogueReply{Tools: tools, Hash: hash}
		if err != nil {
			rep = wire.CatalogueReply{Error: err.Error()}
		} else if len(tools) > 0 && !json.Valid(tools) {
			rep = wire.CatalogueReply{Error: "the catalogue is not JSON"}
		}
		body, _ := json.Marshal(&rep)
		if len(body) > wire.MaxCatalogueBody {
			body, _ = json.Marshal(&wire.CatalogueReply{Error: fmt.Sprintf("the catalogue is %d bytes, more than %d", len(body), wire.MaxCatalogueBody)})
		}
		f.sendAnswer(s, v, wire.KindCatalogueReply, 0, req.Reply, body, true)
	}()
}

// CallOptions tune one remote call.
type CallOptions struct {
	// Timeout is the call timeout: the request's expiry and the wait
	// (default: the control timeout; at most wire.MaxLifetime).
	Timeout time.Duration
	// Meta is the caller's _meta minus its identity keys.
	Meta json.RawMessage
	// Progress, when set, receives each progress params object of the
	// call, in order, before Call returns.
	Progress func(params json.RawMessage)
}

// Call forwards one tools/call to fleet on host and returns the result
// object. An error answered by the remote side (its fleetd's JSON-RPC
// error, or the manager's when the call failed there) is an *RPCError, to
// relay as it is; a refusal (not-authorised, tool calls not served) is a
// *ControlError wrapping ErrRefused; no answer is a *ControlError wrapping
// ErrTimeout, ErrNoRoute, ErrNotConnected, ErrConnectionLost or
// ErrStopped. When ctx is cancelled, or the timeout passes, a signed
// cancel is sent so the call stops upstream. At most once: a call that
// timed out may have run, once.
func (f *Federation) Call(ctx context.Context, host, fleet, tool string, args json.RawMessage, o CallOptions) (json.RawMessage, error) {
	if err := identity.CheckHost(host); err != nil {
		return nil, err
	}
	cerr := func(err error, msg string) error {
		f.m.Calls.WithLabelValues("out", f.hostLabel(host), outcomeOf(err)).Inc()
		return &ControlError{Host: host, Verb: "call " + tool, Fleet: fleet, Err: err, Msg: msg}
	}
	s := f.current()
	if s == nil {
		return nil, cerr(ErrNotConnected, f.Status().LastError)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = f.cfg.ControlTimeout
	}
	timeout = min(timeout, wire.MaxLifetime)
	req := wire.CallRequest{Fleet: fleet, Tool: tool, Arguments: args, Meta: o.Meta, Progress: o.Progress != nil, Reply: s.instance}
	if err := checkCall(&req); err != nil {
		return nil, err
	}
	body, err := json.Marshal(&req)
	if err != nil {
		return nil, err
	}
	if len(body) > wire.MaxCallBody {
		return nil, fmt.Errorf("call of %d bytes is larger than the %d a remote call carries", len(body), wire.MaxCallBody)
	}
	var onProgress func(v *wire.Verified)
	if o.Progress != nil {
		onProgress = func(v *wire.Verified) {
			var p wire.CallProgress
			if json.Unmarshal(v.Body, &p) == nil && len(p.Params) > 0 {
				o.Progress(p.Params)
			}
		}
	}
	giveUp := func(id string) { f.sendCancel(s, host, id) }
	v, err := f.roundTrip(ctx, s, host, wire.KindCallRequest, body, timeout, wire.KindCallReply, onProgress, giveUp)
	if err != nil {
		var rt *roundTripError
		if errors.As(err, &rt) {
			e := cerr(rt.err, rt.msg)
			e.(*ControlError).MayHaveRun = rt.sent
			return nil, e
		}
		f.m.Calls.WithLabelValues("out", f.hostLabel(host), "cancelled").Inc()
		return nil, err
	}
	var rep wire.CallReply
	if err := json.Unmarshal(v.Body, &rep); err != nil {
		return nil, cerr(ErrFailed, "the reply does not decode")
	}
	switch {
	case rep.Reason != "":
		e := &ControlError{Host: host, Verb: "call " + tool, Fleet: fleet, Err: ErrRefused, Reason: rep.Reason}
		f.m.Calls.WithLabelValues("out", f.hostLabel(host), "refused").Inc()
		return nil, e
	case len(rep.Error) > 0:
		var re RPCError
		if err := json.Unmarshal(rep.Error, &re); err != nil {
			return nil, cerr(ErrFailed, "the reply's error does not decode")
		}
		f.m.Calls.WithLabelValues("out", f.hostLabel(host), "error").Inc()
		return nil, &re
	case len(rep.Result) == 0:
		return nil, cerr(ErrFailed, "the reply has neither result nor error")
	}
	f.m.Calls.WithLabelValues("out", f.hostLabel(host), "ok").Inc()
	return rep.Result, nil
}

// MayStillRun ended the message of a request that timed out until
// ControlError.MayHaveRun and MayHaveRunWords replaced it; no message
// carries it now (a caller that trims it finds nothing to trim).
const MayStillRun = "; the request may still run there once"

// sendCancel tells host to stop call id (best effort, bounded).
func (f *Federation) sendCancel(s *session, host, id string) {
	body, _ := json.Marshal(&wire.Cancel{Reason: "the caller gave up"})
	now := f.cfg.Now()
	env := &wire.Envelope{Kind: wire.KindCancel, ID: f.ids.Next(streamControl(host)), Re: id, From: f.cfg.Host, To: host, Issued: now, Expires: now.Add(time.Minute), Body: body}
	ctx, cancel := context.WithTimeout(f.baseCtx, 2*time.Second)
	defer cancel()
	if err := f.publish(ctx, s, ExchangeControl, host, env, publishOpts{persistent: true, ttl: time.Minute, wait: true}); err != nil {
		f.log.Warn("federation: cancel not sent", "to", host, "call", id, "err", err)
	}
}

// Catalogue fetches fleet's tool catalogue from host: the tools array and
// its SHA-256. Errors as Call's (a failure on the remote side is a
// *ControlError wrapping ErrFailed).
func (f *Federation) Catalogue(ctx context.Context, host, fleet string) (json.RawMessage, string, error) {
	if err := identity.CheckHost(host); err != nil {
		return nil, "", err
	}
	if !wire.ValidFleetName(fleet) {
		return nil, "", fmt.Errorf("fleet %q is not a fleet name", fleet)
	}
	cerr := func(err error, msg string, reason wire.Reason) error {
		return &ControlError{Host: host, Verb: "catalogue", Fleet: fleet, Err: err, Msg: msg, Reason: reason}
	}
	s := f.current()
	if s == nil {
		return nil, "", cerr(ErrNotConnected, f.Status().LastError, "")
	}
	body, _ := json.Marshal(&wire.CatalogueRequest{Fleet: fleet, Reply: s.instance})
	v, err := f.roundTrip(ctx, s, host, wire.KindCatalogueRequest, body, f.cfg.ControlTimeout, wire.KindCatalogueReply, nil)
	if err != nil {
		var rt *roundTripError
		if errors.As(err, &rt) {
			return nil, "", cerr(rt.err, rt.msg, "")
		}
		return nil, "", err
	}
	var rep wire.CatalogueReply
	if err := json.Unmarshal(v.Body, &rep); err != nil {
		return nil, "", cerr(ErrFailed, "the reply does not decode", "")
	}
	switch {
	case rep.Reason != "":
		return nil, "", cerr(ErrRefused, rep.Error, rep.Reason)
	case rep.Error != "":
		return nil, "", cerr(ErrFailed, rep.Error, "")
	}
	return rep.Tools, rep.Hash, nil
}

// outcomeOf names a sentinel for the calls counter.
func outcomeOf(err error) string {
	switch {
	case errors.Is(err, ErrRefused):
		return "refused"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrFailed):
		return "failed"
	}
	return "error"
}
