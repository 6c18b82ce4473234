package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// The raw tools/call path.
//
// Profiling the daemon (docs/ARCHITECTURE.md "Overhead") showed the go-sdk
// client's per-call machinery (jsonrpc2 connection, a goroutine and a
// 32 KiB decoder per JSON message, asynchronous notification dispatch) as
// a quarter of fleetmgr's CPU per forwarded call. tools/call is therefore
// sent as one plain HTTP POST on the upstream session the SDK opened
// (same Mcp-Session-Id, negotiated protocol version, kept-alive
// connections): arguments go out as the caller's raw JSON, the answer is
// read as application/json or as an SSE stream whose progress
// notifications are relayed in order, before the result. Everything else
// (initialize, tools/list, the GET stream with tools/list_changed) stays
// with the SDK session.

// errSessionGone marks an upstream answer of HTTP 404 to a request on an
// existing session: fleetd restarted and no longer knows it, so the request
// was never handled.
var errSessionGone = errors.New("upstream session not found (HTTP 404)")

// upstreamError is a JSON-RPC error the upstream answered a call with
// (as opposed to a transport failure, which the SDK also reports as a
// *jsonrpc.Error).
type upstreamError struct{ rpc *jsonrpc.Error }

// Error implements error.
func (e *upstreamError) Error() string { return e.rpc.Error() }

// Unwrap returns the JSON-RPC error.
func (e *upstreamError) Unwrap() error { return e.rpc }

// encodeCall is the JSON-RPC tools/call request we send:
// {"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":…,
// "arguments":args,"_meta":meta}}, arguments and _meta left out when
// empty. args must be valid JSON (SplitFleet's output, or json.Marshal's);
// it is spliced in as it is.
func encodeCall(id, name string, args json.RawMessage, meta map[string]any) ([]byte, error) {
	qid, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	qname, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	var qmeta []byte
	if len(meta) > 0 {
		if qmeta, err = json.Marshal(meta); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, 96+len(qid)+len(qname)+len(args)+len(qmeta))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, qid...)
	b = append(b, `,"method":"tools/call","params":{"name":`...)
	b = append(b, qname...)
	if len(args) > 0 {
		b = append(b, `,"arguments":`...)
		b = append(b, args...)
	}
	if len(qmeta) > 0 {
		b = append(b, `,"_meta":`...)
		b = append(b, qmeta...)
	}
	return append(b, "}}"...), nil
}

// rawCall sends one tools/call on session cs and returns its result as
// the upstream's raw JSON. When later is not nil, the result is the bytes
// the answer was read into, valid until the clean-up handed to later runs
// (the caller must have sent it on by then); otherwise it is a copy.
// onProgress receives each notifications/progress the upstream sends on
// the call's stream, in order. When ctx ends first, the upstream gets
// notifications/cancelled for the call.
//
// After the answer, the rest of the response (the end of the SSE stream:
// a server flushes the answer's event before it ends the body) must be
// read before the connection can carry another call. If later is not nil
// and the call went over the hot path's own connections, that clean-up is
// handed to later, no longer bound to ctx, so the caller's answer does not
// wait for it; otherwise it runs before rawCall returns.
func (u *upstream) rawCall(ctx context.Context, cs *mcp.ClientSession, id string, params *mcp.CallToolParams,
	onProgress func(*mcp.ProgressNotificationParams), later func(func())) (json.RawMessage, error) {
	args, _ := params.Arguments.(json.RawMessage)
	if args == nil && params.Arguments != nil {
		b, err := json.Marshal(params.Arguments)
		if err != nil {
			return nil, err
		}
		args = b
	}
	body, err := encodeCall(id, params.Name, args, params.Meta)
	if err != nil {
		return nil, err
	}
	resp, err := u.postCall(ctx, cs, body)
	if err != nil {
		if ctx.Err() != nil {
			u.cancelUpstream(cs, id, ctx)
		}
		if isDialError(err) {
			return nil, notSent(err) // no connection: fleetd never saw it
		}
		return nil, err
	}
	defer func() {
		// Read what is left (the server ends the stream right after the
		// answer) so the kept-alive connection can carry the next call;
		// closing an unread body would make the transport drop it.
		if hb, ok := resp.Body.(*mcpwire.Body); ok && later != nil {
			hb.Detach()
			later(hb.DrainAndClose)
			return
		}
		drainAndClose(resp.Body)
	}()
	if err := mcpwire.CheckStatus(resp); err != nil {
		if errors.Is(err, mcpwire.ErrSessionNotFound) {
			return nil, errSessionGone // fleetd did not take it (callRaw retries once)
		}
		return nil, fmt.Errorf("fleet %s: tools/call: %w", u.name, err)
	}
	// The body is read on this goroutine; a cancelled ctx closes it (the
	// transport aborts the request), which ends the read.
	msg, err := readAnswer(resp, id, onProgress)
	if err != nil {
		if ctx.Err() != nil {
			u.cancelUpstream(cs, id, ctx)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("fleet %s: tools/call: %w", u.name, err)
	}
	if msg.Error != nil {
		e := *msg.Error
		e.Data = bytes.Clone(e.Data) // it is the message's, released below
		msg.Release()
		return nil, &upstreamError{rpc: &e}
	}
	if len(msg.Result) == 0 {
		msg.Release()
		return nil, fmt.Errorf("fleet %s: tools/call: answer without a result", u.name)
	}
	if later == nil {
		res := bytes.Clone(msg.Result)
		msg.Release()
		return res, nil
	}
	// The result goes out of the buffer it was read into; the buffer is
	// released once the caller has it.
	later(msg.Release)
	return msg.Result, nil
}

// post sends one JSON-RPC message on session cs.
func (u *upstream) post(ctx context.Context, cs *mcp.ClientSession, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	if ir := cs.InitializeResult(); ir != nil && ir.ProtocolVersion != "" {
		req.Header.Set("Mcp-Protocol-Version", ir.ProtocolVersion)
	}
	return u.httpc.Do(req)
}

// postCall sends one call on session cs over the fleetd's pool, by its
// hand-built request (mcpwire.Pool.Post).
func (u *upstream) postCall(ctx context.Context, cs *mcp.ClientSession, body []byte) (*http.Response, error) {
	version := ""
	if ir := cs.InitializeResult(); ir != nil {
		version = ir.ProtocolVersion
	}
	return u.pool.Post(ctx, u.path, cs.ID(), version, body)
}

// drainAndClose reads what is left of body (up to mcpwire.MaxDrain) and
// closes it. A body of a pool's connection is detached from its call and
// drained in the background, bounded by mcpwire.DrainTimeout: a fleetd that keeps
// the stream open after its answer must not hold the caller until the
// call's context ends.
func drainAndClose(body io.ReadCloser) {
	if hb, ok := body.(*mcpwire.Body); ok {
		hb.Detach()
		go hb.DrainAndClose()
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, mcpwire.MaxDrain))
	body.Close()
}

// cancelUpstream tells the upstream the caller gave up on call id
// (notifications/cancelled), in the background, bounded by 5 s.
func (u *upstream) cancelUpstream(cs *mcp.ClientSession, id string, cause context.Context) {
	reason := "the caller cancelled"
	if errors.Is(cause.Err(), context.DeadlineExceeded) {
		reason = "call_timeout elapsed"
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": id, "reason": reason}})
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if resp, err := u.post(ctx, cs, body); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
		}
	}()
}

// maxAnswer bounds one JSON-RPC message read from an upstream (a JSON
// body, or one event of a stream, as mcpwire.Reader counts): 64 MiB, far
// above any tool result, so a fleetd gone wrong cannot grow the daemon
// without limit.
const maxAnswer = 64 << 20

// readAnswer reads the response to call id from an upstream's answer (an
// application/json body or an SSE stream), passing the progress
// notifications met on the way to onProgress, in order. The message
// returned holds its own buffer: release it (mcpwire.Message.Release) once
// its Result has been sent on. A message over maxAnswer is a
// *mcpwire.TooLargeError.
func readAnswer(resp *http.Response, id string, onProgress func(*mcp.ProgressNotificationParams)) (*mcpwire.Message, error) {
	r, err := mcpwire.NewReader(resp, maxAnswer)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for {
		m, err := r.Next()
		if err == io.EOF {
			return nil, errors.New("the answer ended before the call's response")
		}
		if err != nil {
			return nil, err
		}
		if m.IsResponseTo(id) {
			return m, nil
		}
		if m.IsRequest && m.Method == "notifications/progress" && onProgress != nil {
			var p mcp.ProgressNotificationParams
			if json.Unmarshal(m.Params, &p) == nil {
				onProgress(&p)
			}
		}
		m.Release() // another message: not ours, keep reading
	}
}

// callID is the JSON-RPC id of raw call number n: a string
// ("fleetmgr-call-N"), so it never collides with the SDK's own integer ids
// on the same session.
func callID(n uint64) string { return "fleetmgr-call-" + strconv.FormatUint(n, 10) }
