package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// The HTTP fast path for forwarded tools/call.
//
// Profiling (docs/ARCHITECTURE.md "Overhead") put most of fleetmgr's CPU
// per forwarded call in the go-sdk server: a jsonrpc2 connection per
// session, goroutines and a 32 KiB decoder per JSON message, the result
// decoded from the upstream and encoded again. For a tools/call of a fleet
// tool on an established streamable-HTTP session, HTTPHandler therefore
// answers itself: the caller's raw arguments go upstream (fleet removed),
// the upstream's raw result comes back undecoded, progress (when the
// caller asked for it) is streamed as SSE events before the result, and
// the caller's notifications/cancelled for such a call is honoured here.
// Everything else — initialize, tools/list, the manager's own tools, the
// GET stream with tools/list_changed, DELETE, unknown sessions (the SDK
// answers 404), batches — goes to the SDK handler unchanged. The unix
// socket mount has the same fast path (socketfast.go). What goes over the
// wire, both ways, is package mcpwire's: an upstream's result is read into
// one buffer and written to the caller from it, behind the caller's id.

// maxFastBody bounds a request body the fast path reads (larger ones go to
// the SDK, which applies its own limits).
const maxFastBody = 4 << 20

// fastCalls are the calls the fast path is answering, for
// notifications/cancelled: session id + "\x00" + request id → cancel. A
// client that reuses an id while the first call runs (a JSON-RPC error of
// its own) cancels the newer one; each call removes only its own entry.
type fastCalls struct {
	mu sync.Mutex
	m  map[string]*fastCall // guarded by mu
}

// fastCall is one entry of fastCalls.
type fastCall struct{ cancel context.CancelFunc }

// add registers cancel under key and returns the entry, for remove.
func (f *fastCalls) add(key string, cancel context.CancelFunc) *fastCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]*fastCall{}
	}
	e := &fastCall{cancel: cancel}
	f.m[key] = e
	return e
}

// remove drops key if it is still e's.
func (f *fastCalls) remove(key string, e *fastCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[key] == e {
		delete(f.m, key)
	}
}

func (f *fastCalls) cancel(key string) bool {
	f.mu.Lock()
	e, ok := f.m[key]
	f.mu.Unlock()
	if ok {
		e.cancel()
	}
	return ok
}

// fastMessage is the part of an incoming JSON-RPC message the fast path
// looks at, decoded in one pass: Params holds the fields of both messages
// it answers (tools/call and notifications/cancelled). A message whose
// params do not fit (a type error anywhere) goes to the SDK unchanged.
type fastMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  fastCallParams  `json:"params"`
}

// fastCallParams are the params of a tools/call (Name, Arguments, Meta) or
// of a notifications/cancelled (RequestID).
type fastCallParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Meta      mcp.Meta        `json:"_meta,omitempty"`
	RequestID json.RawMessage `json:"requestId,omitempty"`
}

// HTTPHandler is the MCP streamable-HTTP handler for p.Server(): the
// go-sdk's (made with opts), with the fast path for forwarded tools/call
// described above in front of it when fast is true. Mount it behind the
// guard.
//
// Calls answered by the fast path are not seen by the SDK handler, so they
// do not count as session activity: with a SessionTimeout, a session used
// only for fleet calls would be closed under its client. The fast path is
// therefore not put in front of a handler whose opts.SessionTimeout is set
// (a warning is logged): fleetmgr never sets one (sessions never idle
// out), and nothing relies on it staying so.
func (p *Proxy) HTTPHandler(opts mcp.StreamableHTTPOptions, fast bool) http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.server }, &opts)
	if !fast {
		return sdk
	}
	if opts.SessionTimeout > 0 {
		p.log.Warn("MCP fast path off: the SDK handler has a session timeout, which calls it does not see would not reset",
			"session_timeout", opts.SessionTimeout)
		return sdk
	}
	return p.fastHandler(sdk)
}

// fastHandler is the fast path in front of sdk.
func (p *Proxy) fastHandler(sdk http.Handler) http.Handler {
	versions := p.versions
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get("Mcp-Session-Id")
		if r.Method != http.MethodPost || sid == "" || r.ContentLength > maxFastBody || !fastHeaders(r.Header, versions) {
			sdk.ServeHTTP(w, r)
			return
		}
		var buf bytes.Buffer
		if r.ContentLength > 0 {
			buf.Grow(int(r.ContentLength) + 1) // +1: ReadFrom then sees EOF without growing
		}
		_, err := buf.ReadFrom(io.LimitReader(r.Body, maxFastBody+1))
		r.Body.Close()
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		body := buf.Bytes()
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg fastMessage
		if len(body) > maxFastBody || decodeMessage(body, &msg) != nil || msg.JSONRPC != "2.0" {
			sdk.ServeHTTP(w, r) // batches, junk, huge, params of another shape: the SDK's answer
			return
		}
		switch msg.Method {
		case "tools/call":
			if !validID(msg.ID) || p.cat.current().Tools[msg.Params.Name] == nil || perRequestMeta(msg.Params.Meta) ||
				p.sessions.ready(sid) == nil {
				sdk.ServeHTTP(w, r)
				return
			}
			p.fastCall(w, r, sid, msg.ID, &msg.Params)
		case "notifications/cancelled":
			if p.fast.cancel(sid + "\x00" + compactID(msg.Params.RequestID)) {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			sdk.ServeHTTP(w, r)
		default:
			sdk.ServeHTTP(w, r)
		}
	})
}

// fastHeaders reports whether a POST's headers are ones the SDK accepts for
// a message (MCP "Streamable HTTP": Content-Type application/json, Accept
// listing both application/json and text/event-stream, an
// Mcp-Protocol-Version, if any, among versions); any other request goes to
// the SDK, which answers it with the proper HTTP error.
func fastHeaders(h http.Header, versions []string) bool {
	if mcpwire.MediaType(h.Get("Content-Type")) != "application/json" {
		return false
	}
	if v := h.Get("Mcp-Protocol-Version"); v != "" && (!slices.Contains(versions, v) || v >= sessionlessVersion) {
		return false // the SDK refuses it, or (SEP-2575) answers it on a stateful handler with an error of its own
	}
	var jsonOK, sseOK bool
	for _, v := range h.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			switch mcpwire.MediaType(part) {
			case "application/json":
				jsonOK = true
			case "text/event-stream":
				sseOK = true
			}
		}
	}
	return jsonOK && sseOK
}

// sessionlessVersion is the first MCP version with per-request metadata
// (SEP-2575): a stateful go-sdk handler answers a request of that version,
// by header or by _meta, with an error of its own, so the fast path leaves
// such requests to it.
const sessionlessVersion = "2026-07-28"

// perRequestMeta reports whether a call's _meta carries SEP-2575
// per-request metadata (mcp.MetaKeyProtocolVersion), which the go-sdk
// checks before anything else: the HTTP fast path leaves such calls to it.
func perRequestMeta(m mcp.Meta) bool {
	_, ok := m[mcp.MetaKeyProtocolVersion]
	return ok
}

// socketMetaOK reports whether a call's per-request metadata, if any, is
// one the go-sdk's session over a stream (the unix socket) accepts, so
// the fast path may answer the call: none, or a protocol version before
// sessionlessVersion (the SDK then reads the call as the session's own
// protocol), or a supported version with client capabilities (an object)
// and, if given, client info (an object), as the SDK's check of SEP-2575
// metadata requires (go-sdk mcp/shared.go validateRequestMeta). Anything
// else goes to the SDK, which answers with its error.
func socketMetaOK(m mcp.Meta, versions []string) bool {
	raw, present := m[mcp.MetaKeyProtocolVersion]
	if !present {
		return true
	}
	v, ok := raw.(string)
	if !ok || v < sessionlessVersion {
		return true
	}
	if !slices.Contains(versions, v) {
		return false
	}
	if _, ok := m[mcp.MetaKeyClientCapabilities].(map[string]any); !ok {
		return false
	}
	if ci, present := m[mcp.MetaKeyClientInfo]; present {
		if _, ok := ci.(map[string]any); !ok {
			return false
		}
	}
	return true
}

// decodeMessage decodes one JSON-RPC message into v the way the go-sdk
// reads it (segmentio/encoding, keys matched case-sensitively, the last of
// duplicate keys wins), so the fast path never answers a message the SDK
// would read as something else: encoding/json matches keys without regard
// to case and would take "Method", "PARAMS" or "NAME" for "method",
// "params" or "name". Anything after the message is an error (the SDK then
// answers it).
func decodeMessage(b []byte, v any) error {
	rest, err := sjson.Parse(b, v, sjson.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(rest) > 0 {
		err = errors.New("data after the JSON-RPC message")
	}
	return err
}

// validID reports whether id is a request id the SDK accepts: a string, or
// a number it can read as a float64. Anything else (null, an object, an
// array, a boolean, 1e400) is the SDK's to refuse; the fast path echoes
// the ids it takes as they were sent.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		return true
	case c == '-' || c >= '0' && c <= '9':
		_, err := strconv.ParseFloat(string(id), 64)
		return err == nil
	}
	return false
}

// compactID is a JSON-RPC id as a map key: its JSON without whitespace,
// a number in its shortest form (so a requestId of 1.0 or 1e0 names the
// call with id 1, as the SDK, which reads numeric ids as numbers, would
// match them).
func compactID(id json.RawMessage) string {
	if len(id) > 0 && (id[0] == '-' || id[0] >= '0' && id[0] <= '9') {
		if f, err := strconv.ParseFloat(string(id), 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	if !bytes.ContainsAny(id, " \t\r\n") {
		return string(id)
	}
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// fastCall answers one tools/call of a fleet tool on the HTTP mount: as
// JSON, or as an SSE stream when the caller asked for progress.
func (p *Proxy) fastCall(w http.ResponseWriter, r *http.Request, sid string, id json.RawMessage, params *fastCallParams) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	key := sid + "\x00" + compactID(id)
	defer p.fast.remove(key, p.fast.add(key, cancel))
	var sse *sseAnswer
	var emit func(*mcp.ProgressNotificationParams)
	if params.Meta["progressToken"] != nil {
		sse = &sseAnswer{es: mcpwire.NewEventStream(w, 0)}
		defer sse.es.Close() // nothing is written to w once the handler returns
		emit = func(np *mcp.ProgressNotificationParams) {
			if !sse.sendProgress(np) {
				// The answer is out (progress from a JSON upstream comes on
				// its session's own stream, in no set order with the result):
				// out of band, on the caller's session.
				p.notifyLate(sid, np)
			}
		}
	}
	var after []func()
	defer func() { // once the caller has the answer (below)
		for _, f := range after {
			f()
		}
	}()
	resp, ok := p.answerCall(ctx, id, params, emit, func(f func()) { after = append(after, f) })
	if !ok {
		// Cancelled: no JSON-RPC response is due (MCP "Cancellation");
		// the POST still gets a well-formed answer, an event stream that
		// ends without a message.
		if sse == nil {
			sse = &sseAnswer{es: mcpwire.NewEventStream(w, 0)}
		}
		sse.es.Close()
		return
	}
	if sse != nil {
		sse.sendFrame(&resp)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(resp.Len())}
	h["Mcp-Session-Id"] = []string{sid}
	_, _ = resp.WriteTo(w)
	_ = http.NewResponseController(w).Flush() // the answer leaves now, before the clean-up
}

// notifyLate sends progress for a call already answered to the caller's
// session sid out of band (the go-sdk server puts it on the session's GET
// stream).
func (p *Proxy) notifyLate(sid string, np *mcp.ProgressNotificationParams) {
	if ss := p.sessions.get(sid); ss != nil {
		if err := ss.NotifyProgress(context.Background(), np); err != nil {
			p.log.Debug("relay late progress", "err", err)
		}
	}
}

// answerCall runs one fast-path tools/call through the call path
// (forwardCall) and returns the JSON-RPC response to send, or false when
// the caller cancelled (no response is due). When the caller asked for
// progress, emit receives each progress notification for it (with the
// caller's token), in order: those read on the call's own response stream
// before answerCall returns, those an upstream sends out of band (on its
// session's stream, as a go-sdk server answering in JSON does) whenever
// they come, for up to progressLinger after. later receives clean-up the
// caller must run once it has sent the response (see toolCall.later); the
// response's bytes stay valid until then.
func (p *Proxy) answerCall(ctx context.Context, id json.RawMessage, params *fastCallParams, emit func(*mcp.ProgressNotificationParams), later func(func())) (mcpwire.Frame, bool) {
	c := toolCall{name: params.Name, args: params.Arguments, meta: params.Meta, later: later}
	if tok := params.Meta["progressToken"]; tok != nil && emit != nil {
		c.progressToken, c.progress, c.progressLinger = tok, emit, progressLinger
	}
	r := p.forwardCall(ctx, &c)
	switch {
	case r.outcome == OutcomeCancelled:
		return mcpwire.Frame{}, false
	case r.err != nil:
		je, ok := r.err.(*jsonrpc.Error)
		if !ok {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: r.err.Error()}
		}
		return encodeResponse(id, "error", je), true
	case r.result != nil:
		return encodeResponse(id, "result", r.result), true
	}
	return encodeResponse(id, "result", r.raw), true
}

// encodeResponse is the JSON-RPC response {"jsonrpc":"2.0","id":id,key:v}
// as one line of compact JSON (mcpwire.ResponseFrame): raw JSON (the
// caller's id, an upstream's result, both already decoded once as valid
// JSON) is spliced in as it is, anything else goes through json.Marshal.
// A value that cannot be encoded becomes an internal-error response.
func encodeResponse(id json.RawMessage, key string, v any) mcpwire.Frame {
	raw, ok := v.(json.RawMessage)
	if !ok {
		enc, err := json.Marshal(v)
		if err != nil {
			return encodeResponse(id, "error", &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()})
		}
		raw = enc
	}
	return mcpwire.ResponseFrame(id, key, raw)
}

// sseAnswer streams a fast-path answer as server-sent events, flushing
// each: the progress notifications, then the response, which ends it.
// What goes over the wire is mcpwire.EventStream's.
type sseAnswer struct{ es *mcpwire.EventStream }

// sendProgress writes a progress notification as an event; false once
// the response is out (the stream is closed).
func (s sseAnswer) sendProgress(np *mcp.ProgressNotificationParams) bool {
	b, err := progressMessage(np)
	if err != nil {
		return true // nothing to send
	}
	f := mcpwire.RawFrame(b)
	if errors.Is(s.es.Message(&f), mcpwire.ErrStreamClosed) {
		return false
	}
	_ = s.es.Flush()
	return true
}

// sendFrame writes the response as the stream's last event and closes
// the stream (a lingering progress sink must not keep the response alive).
func (s sseAnswer) sendFrame(f *mcpwire.Frame) {
	if s.es.Message(f) == nil {
		_ = s.es.Flush()
	}
	s.es.Close()
}
