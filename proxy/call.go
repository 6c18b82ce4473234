package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// The call path. A tools/call of a fleet tool arrives at one of three
// entry points: the go-sdk server's tool handler (forward, for calls the
// SDK reads: on either mount before the fast path takes over, and every
// call the fast path passes on), the HTTP fast path (fastpath.go) and the
// unix socket's fast path (socketfast.go). Each turns it into a toolCall
// and hands it to forwardCall, which alone mints the upstream progress
// token, applies call_timeout, routes the call to its fleet and records
// the call's metrics; the entry points only read the call and write the
// answer.

// toolCall is one tools/call of an exposed tool, as an entry point
// received it.
type toolCall struct {
	name string
	args json.RawMessage // the caller's arguments, fleet included
	meta mcp.Meta        // the caller's _meta, as received
	// progressToken is the caller's progress token (nil: the caller asked
	// for none); progress then delivers each progress notification for
	// the call to the caller (its token already set), in order, and
	// progressLinger is how long after the answer progress that comes out
	// of band is still delivered (see progressRelay.close).
	progressToken  any
	progress       func(*mcp.ProgressNotificationParams)
	progressLinger time.Duration
	// decode asks for the result decoded (callResult.result, the SDK
	// handler's form) rather than raw (callResult.raw, the fast paths').
	decode bool
	// peer, when set, is the host a federation peer's call came from
	// (callhandler.go): fleet names the local fleet and args hold no
	// "fleet".
	peer  string
	fleet string
	// later, if set, takes clean-up that can wait until the caller has
	// its answer (reading the rest of the upstream's response so the
	// connection can be reused; releasing the buffer raw points into);
	// nil runs it before forwardCall returns.
	later func(func())
}

// callResult is what forwardCall answers a call with: exactly one of raw
// (the upstream's result, undecoded), result (the upstream's result
// decoded, or a tool error of fleetmgr's own: fleet down, timeout,
// upstream failure) and err (a *jsonrpc.Error: invalid params, or an
// error the upstream answered; or the caller's context error when it
// cancelled) is set.
type callResult struct {
	raw     json.RawMessage
	result  *mcp.CallToolResult
	err     error
	fleet   string // the fleet called, once the arguments named a valid one
	outcome string // the fleetmgr_tool_calls_total outcome
	// indeterminate: the call may or may not have run (sent, then cut
	// before its answer; indeterminate.go).
	indeterminate bool
}

// forwardCall runs one call of an exposed tool: it gives the call an
// upstream progress token of its own when the caller asked for progress
// (progressRelay), routes it (route), and records its outcome and
// latency in the metrics.
func (p *Proxy) forwardCall(ctx context.Context, c *toolCall) callResult {
	t0 := time.Now()
	var token string
	var onProgress func(*mcp.ProgressNotificationParams)
	var pt *progressTarget
	if c.progressToken != nil && c.progress != nil {
		pt = p.relay.open(c.progressToken, c.progress)
		token = pt.token
		onProgress = func(np *mcp.ProgressNotificationParams) { pt.relay(np, true) }
	}
	r := p.route(ctx, c, token, onProgress)
	if c.decode && r.raw != nil {
		res := &mcp.CallToolResult{}
		if err := json.Unmarshal(r.raw, res); err != nil {
			r.outcome = OutcomeError
			res = toolError("fleet %s: %s answered with a result fleetmgr cannot read: %v", r.fleet, c.name, err)
		}
		r.raw, r.result = nil, res
	}
	if pt != nil {
		// Progress on its way reaches the caller before the result.
		p.relay.close(pt, c.progressLinger)
	}
	fleet := r.fleet
	if fleet == "" {
		fleet = "-" // no valid fleet named: one series, never the caller's text
	}
	d := time.Since(t0)
	p.opt.Metrics.observe(fleet, c.name, r.outcome, d)
	if p.opt.OnCall != nil {
		size := len(r.raw)
		if r.result != nil {
			if b, err := json.Marshal(r.result); err == nil {
				size = len(b)
			}
		}
		p.opt.OnCall(ctx, CallRecord{Fleet: fleet, Tool: c.name, Outcome: r.outcome, Duration: d, ResultBytes: size, Peer: c.peer, Args: c.args,
			Indeterminate: r.indeterminate})
	}
	return r
}

// route sends one call to the fleet its arguments name, within that
// fleet's call_timeout, with token (if not "") as the upstream progress
// token and onProgress receiving the progress read inline. Failures
// become a tool error of fleetmgr's own (fleet down, timeout, upstream
// failure) or a JSON-RPC error (invalid params, the upstream's own
// error); the caller's cancellation is its context's error.
func (p *Proxy) route(ctx context.Context, c *toolCall, token string, onProgress func(*mcp.ProgressNotificationParams)) callResult {
	name := c.name
	cat := p.cat.current()
	mt := cat.Tools[name]
	// hidden answers a call of a tool the policy hides or fleetmgr
	// excludes on fleet with why, never a bare "unknown tool".
	hidden := func(fleet string) (callResult, bool) {
		why := hiddenReason(cat, name, fleet)
		if why == "" {
			return callResult{}, false
		}
		return callResult{fleet: metricFleet(cat, fleet), outcome: OutcomeHidden, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: why}}, true
	}
	if mt == nil {
		fleet := c.fleet
		if c.peer == "" {
			fleet = callFleetName(c.args)
		}
		if r, ok := hidden(fleet); ok {
			return r
		}
		r := callResult{outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}}
		if c.peer != "" {
			r.fleet = c.fleet
			r.err = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("fleet %s on host %s offers no tool %q", c.fleet, p.hostName(), name)}
		}
		return r
	}
	var fleet string
	var args json.RawMessage
	if c.peer != "" {
		// A peer's call (callhandler.go): to a fleet of this host's only.
		fleet, args = c.fleet, c.args
		if strings.Contains(fleet, "@") || !slices.Contains(mt.Fleets, fleet) {
			if r, ok := hidden(fleet); ok && !strings.Contains(fleet, "@") {
				return r
			}
			return callResult{outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: fmt.Sprintf("fleet %s on host %s offers no tool %q", fleet, p.hostName(), name)}}
		}
	} else {
		var err error
		fleet, args, err = SplitFleet(c.args, mt.Fleets)
		if err != nil {
			if f := callFleetName(c.args); f != "" {
				if r, ok := hidden(f); ok {
					return r
				}
			}
			return callResult{outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}}
		}
		if rf, host, ok := peerview.SplitRemote(fleet); ok {
			return p.routeRemote(ctx, c, rf, host, args, onProgress)
		}
	}
	params := &mcp.CallToolParams{Name: name, Arguments: args, Meta: forwardMeta(c.meta)}
	if token != "" {
		params.SetProgressToken(token)
	}
	u, err := p.ups.get(fleet)
	if err != nil {
		return callResult{fleet: fleet, outcome: OutcomeInvalidParams, err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}}
	}
	timeout := p.opt.Manager.Config().Manager.CallTimeout.Duration
	if f, err := p.opt.Manager.Fleet(fleet); err == nil && f.CallTimeout.Duration > 0 {
		timeout = f.CallTimeout.Duration
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := u.callRaw(cctx, params, onProgress, c.later)
	if err == nil {
		r := callResult{fleet: fleet, outcome: OutcomeOK, raw: raw}
		var flag struct {
			IsError bool `json:"isError"`
		}
		if bytes.Contains(raw, []byte(`"isError"`)) && json.Unmarshal(raw, &flag) == nil && flag.IsError {
			r.outcome = OutcomeToolError
		}
		return r
	}
	var ue *upstreamError
	switch {
	case ctx.Err() != nil:
		return callResult{fleet: fleet, outcome: OutcomeCancelled, err: ctx.Err()} // the caller cancelled
	case cctx.Err() != nil:
		r := callResult{fleet: fleet, outcome: OutcomeTimeout,
			result: toolError("fleet %s: %s did not answer within %s (call_timeout); the fleet itself is not marked down", fleet, name, timeout)}
		if mayHaveReached(err) {
			r.indeterminate = true
			r.result = indeterminate("fleet %s: %s did not answer within %s (call_timeout); it may have run (or still run): check before calling it again (it was not retried); the fleet itself is not marked down",
				p.callName(c, fleet), name, timeout)
		}
		return r
	case errors.As(err, &ue):
		// fleetd answered with a JSON-RPC error (e.g. its own invalid
		// params): pass it on as it is.
		outcome := OutcomeInvalidParams
		if ue.rpc.Code != jsonrpc.CodeInvalidParams {
			outcome = OutcomeError
		}
		return callResult{fleet: fleet, outcome: outcome, err: ue.rpc}
	}
	if errors.Is(err, lifecycle.ErrUnverifiedListener) {
		// Someone else holds the fleet's port (upstreamSet.dial): name it.
		return callResult{fleet: fleet, outcome: OutcomeFleetDown, result: toolError("%v", err)}
	}
	sent := mayHaveReached(err)
	if st, serr := p.opt.Manager.State(fleet); serr == nil && st.Shown.Phase != lifecycle.PhaseRunning {
		r := callResult{fleet: fleet, outcome: OutcomeFleetDown}
		if sent {
			// It reached fleetd, which went away under it (a restart, a
			// crash): it may have run. Never "call it again".
			why := "fleet " + fleet + " is " + string(st.Shown.Phase)
			if when := st.PendingRestart(time.Now()); when != "" {
				why = "fleet " + fleet + " is " + when
			}
			r.indeterminate, r.result = true, p.cutWords(c, fleet, why)
			return r
		}
		if when := st.PendingRestart(time.Now()); when != "" {
			// The supervisor brings it back by itself: say when, not "start it".
			r.result = toolError("fleet %s is %s, so %s cannot be called now; call it again once the fleet is running (fleetmgr_status shows it)", fleet, when, name)
		} else {
			r.result = toolError("fleet %s is %s, so %s cannot be called; start it with `fleetmgr start %s` (or the fleetmgr_start tool)%s", fleet, st.Shown.Phase, name, fleet, lastErr(st))
		}
		return r
	}
	if sent {
		return callResult{fleet: fleet, outcome: OutcomeError, indeterminate: true, result: p.cutWords(c, fleet, err.Error())}
	}
	return callResult{fleet: fleet, outcome: OutcomeError, result: toolError("fleet %s: %s failed: %v", fleet, name, err)}
}

// callName is fleet as the caller of c names it: NAME@HOST for a peer's
// call, NAME otherwise.
func (p *Proxy) callName(c *toolCall, fleet string) string {
	if c.peer != "" {
		return peerview.RemoteName(fleet, p.hostName())
	}
	return fleet
}

// forward returns the go-sdk server's handler of exposed tool name: the
// SDK entry point of the call path.
func (p *Proxy) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := toolCall{name: name, args: req.Params.Arguments, meta: req.Params.Meta, decode: true}
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			// On the caller's request context: the go-sdk routes a
			// notification sent with it onto that request's response
			// stream, which every client reads.
			ss := req.Session
			c.progressToken = tok
			c.progress = func(np *mcp.ProgressNotificationParams) {
				if err := ss.NotifyProgress(ctx, np); err != nil {
					p.log.Debug("relay progress", "err", err)
				}
			}
		}
		r := p.forwardCall(ctx, &c)
		return r.result, r.err
	}
}

func lastErr(st *lifecycle.State) string {
	if st.Shown.LastError != "" {
		return "; last error: " + st.Shown.LastError
	}
	return ""
}

// SplitFleet takes a call's raw arguments, removes the "fleet" argument and
// returns it with the remaining arguments as raw JSON. valid lists the
// fleets offering the tool; a missing, non-string or unknown fleet is an
// error that lists them.
func SplitFleet(raw json.RawMessage, valid []string) (string, json.RawMessage, error) {
	args := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", nil, fmt.Errorf("arguments must be a JSON object: %v", err)
		}
	}
	fv, ok := args[FleetArg]
	if !ok {
		return "", nil, fmt.Errorf("missing required argument %q; one of: %s", FleetArg, strings.Join(valid, ", "))
	}
	var fleet string
	if err := json.Unmarshal(fv, &fleet); err != nil || string(bytes.TrimSpace(fv)) == "null" {
		return "", nil, fmt.Errorf("argument %q must be a string naming a fleet; one of: %s", FleetArg, strings.Join(valid, ", "))
	}
	if !slices.Contains(valid, fleet) {
		return "", nil, fmt.Errorf("unknown fleet %q for this tool; valid fleets: %s", fleet, strings.Join(valid, ", "))
	}
	delete(args, FleetArg)
	out, err := json.Marshal(args)
	if err != nil {
		return "", nil, err
	}
	return fleet, out, nil
}

// forwardMeta copies the caller's _meta minus the keys that describe the
// caller's own protocol session (the upstream session has its own) and
// the caller's progress token (the call gets one of fleetmgr's own).
func forwardMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		switch k {
		case mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, "progressToken":
			continue
		}
		out[k] = v
	}
	return out
}

func toolError(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}
