package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Calls to remote fleets (docs/ARCHITECTURE.md "Remote fleets"). route
// hands a call whose fleet is NAME@HOST to routeRemote, which makes it a
// federation call to HOST: the arguments without "fleet", the caller's
// _meta minus its identity keys, expiry = the call timeout, progress
// relayed to the caller's token, the caller's cancellation sent on as a
// signed cancel. HOST's manager forwards it to its fleetd as primary
// (callhandler.go). The call is delivered at most once; when no answer
// can come the caller gets a tool error saying why and what to do.

// errHostLost ends a remote call whose host left the online state while
// the call was out.
var errHostLost = errors.New("the host stopped answering")

// remoteTimeout is the call timeout of fleet on host: the call_timeout of
// a [fleets.NAME] table naming that fleet with host = HOST, else
// [manager] call_timeout.
func (p *Proxy) remoteTimeout(fleet, host string) time.Duration {
	timeout := p.opt.Manager.Config().Manager.CallTimeout.Duration
	if f, err := p.opt.Manager.Fleet(fleet); err == nil && f.Host == host && f.CallTimeout.Duration > 0 {
		timeout = f.CallTimeout.Duration
	}
	return min(timeout, wire.MaxLifetime)
}

// routeRemote forwards one call of tool c.name to fleet on host (the enum
// name is fleet@host): args are the arguments without "fleet", onProgress
// (nil: none asked) receives the remote fleet's progress notifications in
// order before the result.
func (p *Proxy) routeRemote(ctx context.Context, c *toolCall, fleet, host string, args json.RawMessage,
	onProgress func(*mcp.ProgressNotificationParams)) callResult {
	name := peerview.RemoteName(fleet, host)
	rs := p.remote
	if rs == nil {
		return callResult{fleet: name, outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("fleet %s is on host %s, and this manager has no [federation] table", name, host)}}
	}
	peer, down := rs.Host(host)
	state, lastSeen := peer.State, peer.LastSeen
	if st := p.opt.Remote.Status(); !st.Connected && state != federation.HostNeverSeen {
		// This host's own broker is gone: every peer heard from in this
		// run looks silent, but saying "host beta stopped answering"
		// would blame beta. (A peer not heard from since this manager
		// started — still connecting at start — is said so below.)
		r := callResult{fleet: name, outcome: OutcomeError, result: toolError("fleet %s: %s, so %s was not sent. "+
			"Call it again once this host is connected again (`fleetmgr check` tells why it is not).", name, brokerLost(p.opt.Remote.Host(), host, st), c.name)}
		p.opt.Metrics.observeRemote(host, r.outcome, 0, false)
		return r
	}
	if state != federation.HostOnline {
		r := callResult{fleet: name, outcome: OutcomeHostDown, result: toolError("fleet %s: %s, so %s cannot be called; its tools are listed from the catalogue cached when %s was last seen. "+
			"Call it again once %s's `fleetmgr serve` runs and is connected to the broker (`fleetmgr list` shows each host's state).",
			name, hostAway(host, state, lastSeen), c.name, host, host)}
		p.opt.Metrics.observeRemote(host, r.outcome, 0, false)
		return r
	}
	timeout := p.remoteTimeout(fleet, host)
	o := federation.CallOptions{Timeout: timeout}
	if m := forwardMeta(c.meta); len(m) > 0 {
		b, err := json.Marshal(m)
		if err != nil {
			return callResult{fleet: name, outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "_meta: " + err.Error()}}
		}
		o.Meta = b
	}
	if onProgress != nil {
		o.Progress = func(params json.RawMessage) {
			var np mcp.ProgressNotificationParams
			if err := json.Unmarshal(params, &np); err != nil {
				p.log.Debug("remote progress does not decode", "fleet", name, "err", err)
				return
			}
			onProgress(&np)
		}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cctx, cancelT := context.WithTimeout(cctx, timeout)
	defer cancelT()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the host's expiry or clean stop ends the wait at once
		select {
		case <-down:
			cancel(errHostLost)
		case <-stop:
		}
	}()
	sent := time.Now()
	raw, err := p.opt.Remote.Call(cctx, host, fleet, c.name, args, o)
	rtt := time.Since(sent)
	r := p.remoteResult(ctx, cctx, c.name, name, host, timeout, raw, err)
	answered := err == nil || isRPCError(err)
	p.remoteCalls.Observe(host, sent, rtt, answered)
	p.opt.Metrics.observeRemote(host, r.outcome, rtt, answered)
	return r
}

func isRPCError(err error) bool {
	var re *federation.RPCError
	return errors.As(err, &re)
}

// remoteResult turns what Remote.Call returned into the call's result.
// ctx is the caller's, cctx the call's (its cause says whether the host
// was lost).
func (p *Proxy) remoteResult(ctx, cctx context.Context, tool, name, host string, timeout time.Duration, raw json.RawMessage, err error) callResult {
	if err == nil {
		r := callResult{fleet: name, outcome: OutcomeOK, raw: raw}
		var flag struct {
			IsError bool `json:"isError"`
		}
		if bytes.Contains(raw, []byte(`"isError"`)) && json.Unmarshal(raw, &flag) == nil && flag.IsError {
			r.outcome = OutcomeToolError
			// The host says the call was cut there and may have run.
			r.indeterminate = isIndeterminateRaw(raw)
		}
		return r
	}
	r := p.remoteFailure(ctx, cctx, tool, name, host, timeout, err)
	if r.result != nil && r.indeterminate {
		r.result.Meta = mcp.Meta{MetaOutcome: OutcomeIndeterminate}
	}
	return r
}

// remoteFailure is remoteResult of a call that failed; indeterminate set
// when it may have run on host (delivered, no answer).
func (p *Proxy) remoteFailure(ctx, cctx context.Context, tool, name, host string, timeout time.Duration, err error) callResult {
	var re *federation.RPCError
	var ce *federation.ControlError
	switch {
	case ctx.Err() != nil:
		return callResult{fleet: name, outcome: OutcomeCancelled, err: ctx.Err()} // the caller cancelled
	case errors.Is(context.Cause(cctx), errHostLost):
		if st := p.opt.Remote.Status(); !st.Connected {
			return callResult{fleet: name, outcome: OutcomeError, indeterminate: true, result: toolError("fleet %s: during the call of %s, %s; %s",
				name, tool, brokerLost(p.opt.Remote.Host(), host, st), mayHaveRun(tool, host))}
		}
		peer, _ := p.remote.Host(host)
		return callResult{fleet: name, outcome: OutcomeHostDown, indeterminate: true, result: toolError("fleet %s: during the call of %s, %s; %s",
			name, tool, hostAway(host, peer.State, peer.LastSeen), mayHaveRun(tool, host))}
	case errors.As(err, &re):
		// The remote fleet (or its manager) answered with a JSON-RPC
		// error: pass it on as it is, as for a local fleet.
		outcome := OutcomeError
		if re.Code == jsonrpc.CodeInvalidParams {
			outcome = OutcomeInvalidParams
		}
		return callResult{fleet: name, outcome: outcome, err: &jsonrpc.Error{Code: int64(re.Code), Message: re.Message, Data: re.Data}}
	case errors.As(err, &ce):
		return callResult{fleet: name, outcome: remoteOutcome(ce), result: toolError("%s", remoteError(ce, tool, name, host, timeout)),
			indeterminate: errors.Is(ce, federation.ErrTimeout) || errors.Is(ce, federation.ErrConnectionLost) || errors.Is(ce, federation.ErrStopped)}
	}
	return callResult{fleet: name, outcome: OutcomeError, result: toolError("fleet %s: %s failed: %v", name, tool, err)}
}

// remoteOutcome is the fleetmgr_tool_calls_total outcome of a remote call
// that got no answer.
func remoteOutcome(ce *federation.ControlError) string {
	switch {
	case errors.Is(ce, federation.ErrTimeout):
		return OutcomeTimeout
	case errors.Is(ce, federation.ErrRefused):
		return OutcomeRefused
	case errors.Is(ce, federation.ErrNoRoute):
		return OutcomeHostDown
	case errors.Is(ce, federation.ErrClockSkew):
		return OutcomeRefused
	}
	return OutcomeError
}

// remoteError says why a remote call got no answer, and what to do.
func remoteError(ce *federation.ControlError, tool, name, host string, timeout time.Duration) string {
	detail := ""
	if ce.Msg != "" {
		detail = " (" + ce.Msg + ")"
	}
	switch {
	case errors.Is(ce, federation.ErrTimeout):
		// The federation's message starts with the wait it gave up after,
		// which the sentence already says, and ends with what the
		// sentence says in its own words (mayHaveRun).
		if m := ce.Msg; strings.HasPrefix(m, "within ") {
			if _, rest, ok := strings.Cut(m, "; "); ok {
				detail = "; " + strings.TrimSuffix(rest, federation.MayStillRun)
			}
		}
		return fmt.Sprintf("fleet %s: %s did not answer within %s (call_timeout)%s; %s; the fleet itself is not marked down", name, tool, timeout, detail, mayHaveRun(tool, host))
	case errors.Is(ce, federation.ErrRefused):
		switch ce.Reason {
		case wire.ReasonNotAuthorised:
			return fmt.Sprintf("fleet %s: host %s refused the call of %s (%s): its trust line for this host does not allow tool calls; "+
				"ask %s's operator to add `calls` to it (or leave the capabilities out: all)", name, host, tool, ce.Reason, host)
		case wire.ReasonUnknownVerb:
			return fmt.Sprintf("fleet %s: host %s refused the call of %s (%s): its manager does not serve tool calls (an older fleetmgr?)", name, host, tool, ce.Reason)
		}
		return fmt.Sprintf("fleet %s: host %s refused the call of %s (%s)%s; it was not run", name, host, tool, ce.Reason, detail)
	case errors.Is(ce, federation.ErrNoRoute):
		return fmt.Sprintf("fleet %s: the broker has no control queue for host %s, so %s was not sent; is %s in the federation (its serve provisioned on the same vhost)?", name, host, tool, host)
	case errors.Is(ce, federation.ErrNotConnected):
		return fmt.Sprintf("fleet %s: this manager is not connected to the federation broker%s, so %s was not sent; `fleetmgr check` tells why", name, detail, tool)
	case errors.Is(ce, federation.ErrConnectionLost):
		return fmt.Sprintf("fleet %s: this manager's broker connection was lost while waiting for %s's answer%s; %s", name, host, detail, mayHaveRun(tool, host))
	case errors.Is(ce, federation.ErrClockSkew):
		return fmt.Sprintf("fleet %s: %s was not sent: %s", name, tool, ce.Msg)
	case errors.Is(ce, federation.ErrStopped):
		return fmt.Sprintf("fleet %s: this manager is stopping; %s was not answered", name, tool)
	}
	return fmt.Sprintf("fleet %s: %s failed: %v", name, tool, ce)
}

// mayHaveRun is what a call that was sent but got no answer says (issue
// 27 item 8): whether it ran on host cannot be known here, so the caller
// is told to look before calling again, never invited to retry.
func mayHaveRun(tool, host string) string {
	return fmt.Sprintf("%s was delivered at most once and may have run on %s; check before calling it again (it is not retried)", tool, host)
}

// brokerLost says that this host (self), not host, has lost the
// federation broker (issue 27 item 5).
func brokerLost(self, host string, st federation.Status) string {
	why := ""
	if st.LastError != "" {
		why = " (" + st.LastError + ")"
	}
	return fmt.Sprintf("this host (%s) has lost the federation broker%s: nothing reaches host %s or comes from it until it reconnects, and %s's own state is unknown meanwhile",
		self, why, host, host)
}

// hostAway says why host is not online, with when it was last seen.
func hostAway(host string, state federation.HostState, lastSeen time.Time) string {
	var s string
	switch state {
	case federation.HostOffline:
		s = "host " + host + "'s manager stopped (it announced going offline)"
	case federation.HostExpired:
		s = fmt.Sprintf("host %s stopped answering (no presence for %d heartbeats)", host, federation.ExpiryBeats)
	case federation.HostOnline:
		s = "host " + host + " is online"
	default:
		s = "host " + host + " has not been heard from since this manager started"
	}
	if lastSeen.IsZero() {
		return s + ", never seen"
	}
	return fmt.Sprintf("%s, last seen %s (%s ago)", s, lastSeen.UTC().Format(time.RFC3339), time.Since(lastSeen).Round(time.Second))
}
