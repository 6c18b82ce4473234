package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// upstream is fleetmgr's MCP client session to one fleet's fleetd
// (docs/ARCHITECTURE.md "Words"). The session is opened lazily and re-opened when
// fleetd restarted (the old session is then unknown to it).
type upstream struct {
	name     string
	endpoint string
	client   *mcp.Client
	// pool is the one HTTP/1.1 client to this fleetd: the hot path's
	// tools/call go over it (Post), and so does the SDK session (httpc's
	// Transport is pool).
	pool  *mcpwire.Pool
	httpc *http.Client

	path string
	log  *slog.Logger // nil: no log

	mu  sync.Mutex
	cs  *mcp.ClientSession // guarded by mu: the open session, nil until opened and once it ended
	seq atomic.Uint64      // raw tools/call ids
}

// endpointURL is the MCP endpoint of a fleetd on port: loopback only
// (fleetd binds loopback, docs/fleetd.md).
func endpointURL(port int, path string) string {
	return "http://" + upstreamAddr(port) + path
}

func upstreamAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// newUpstream returns the upstream of fleet name at port and path, whose
// connections dial opens (nil: a plain dial), and whose session client
// opens.
func newUpstream(name string, port int, path string, client *mcp.Client, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *upstream {
	pool := &mcpwire.Pool{Addr: upstreamAddr(port), Dial: dial}
	return &upstream{
		name:     name,
		endpoint: endpointURL(port, path),
		path:     path,
		pool:     pool,
		httpc:    &http.Client{Transport: pool},
		client:   client,
	}
}

// session returns the open session, connecting first if there is none.
func (u *upstream) session(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cs != nil {
		return u.cs, nil
	}
	// The SDK keeps the Connect context's values for the session's whole
	// life (and routes notifications by them), so the session must not
	// inherit whichever request happened to open it: only its deadline.
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	cs, err := u.client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: u.endpoint, HTTPClient: u.httpc, MaxRetries: -1,
		MaxEventSize: maxAnswer}, nil)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: cannot open an MCP session at %s: %w", u.name, u.endpoint, err)
	}
	u.cs = cs
	// The session's owner: when it ends (fleetd gone, stream broken), forget
	// it so the next call opens a fresh one instead of failing.
	go func() {
		err := cs.Wait()
		if err != nil && eventTooLarge(err) && u.log != nil {
			// The go-sdk client's MaxEventSize: a message on the session's
			// own event stream (progress from a fleetd answering in JSON,
			// a list change) over the cap breaks that stream.
			u.log.Warn("fleet session closed: a message on its event stream is larger than the cap",
				"fleet", u.name, "cap", mcpwire.FormatSize(maxAnswer), "err", err)
		}
		u.drop(cs)
	}()
	return cs, nil
}

// eventTooLarge reports whether err is the go-sdk client's refusal of an
// SSE event over its MaxEventSize ("SSE event exceeded …" in go-sdk
// mcp/event.go). The SDK does not export a sentinel, so its text is
// matched; "exceeded N retries" (the stream gave up reconnecting, as when
// fleetd stops) is not this.
func eventTooLarge(err error) bool {
	return strings.Contains(err.Error(), "SSE event exceeded")
}

// drop forgets cs (if it is still the current session) and closes it.
func (u *upstream) drop(cs *mcp.ClientSession) {
	u.mu.Lock()
	if u.cs == cs {
		u.cs = nil
	}
	u.mu.Unlock()
	if cs != nil {
		go cs.Close()
	}
}

func (u *upstream) close() {
	u.mu.Lock()
	cs := u.cs
	u.cs = nil
	u.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	u.pool.CloseIdleConnections()
}

// sessionGone reports whether err means the session (not the call) is dead:
// fleetd restarted and answers 404 for the old session id, or the
// connection closed. Such a call was never handled and may be retried.
func sessionGone(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed)
}

// listTools reads the fleet's whole tool list (following pagination),
// re-initializing once if fleetd no longer knows the session.
func (u *upstream) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	tools, err := u.listOnce(ctx)
	if err != nil && errors.Is(err, mcp.ErrSessionMissing) {
		tools, err = u.listOnce(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet %s: tools/list: %w", u.name, err)
	}
	return tools, nil
}

func (u *upstream) listOnce(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := u.session(ctx)
	if err != nil {
		return nil, err
	}
	var tools []*mcp.Tool
	var cursor string
	for {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			if sessionGone(err) {
				u.drop(cs)
			}
			return nil, err
		}
		tools = append(tools, res.Tools...)
		if res.NextCursor == "" {
			return tools, nil
		}
		cursor = res.NextCursor
	}
}

// call forwards one tools/call (see rawcall.go) and decodes its result
// (fleetmgr's own calls, such as the roster for status). A session that
// fleetd no longer knows (HTTP 404: it restarted) means the call was never
// handled, so the session is re-initialized once and the call retried. A
// session that had already ended before the call is replaced by session()
// before anything is sent.
func (u *upstream) call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	raw, err := u.callRaw(ctx, params, nil, nil)
	if err != nil {
		return nil, err
	}
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("fleet %s: tools/call: bad result: %w", u.name, err)
	}
	return res, nil
}

// callRaw is call returning the upstream's result as raw JSON (for the
// call path, which passes it through undecoded). op (may be nil) receives
// the upstream's progress notifications for this call, in order, before
// the result. later, if not nil, takes the clean-up of the upstream
// response (see rawCall) to run once the caller has its answer.
func (u *upstream) callRaw(ctx context.Context, params *mcp.CallToolParams, op func(*mcp.ProgressNotificationParams), later func(func())) (json.RawMessage, error) {
	for attempt := 0; ; attempt++ {
		cs, err := u.session(ctx)
		if err != nil {
			return nil, notSent(err) // no session: the call was not sent
		}
		res, err := u.rawCall(ctx, cs, callID(u.seq.Add(1)), params, op, later)
		if err == nil {
			return res, nil
		}
		var ue *upstreamError
		var tl *mcpwire.TooLargeError
		switch {
		case errors.As(err, &tl):
			// A message over the cap: the call fails, the session is fine
			// (the connection that carried it is not reused).
			return nil, err
		case errors.Is(err, errSessionGone):
			u.drop(cs)
			if attempt == 0 && ctx.Err() == nil {
				continue
			}
			return nil, notSent(fmt.Errorf("fleet %s: %w: %w", u.name, mcp.ErrSessionMissing, err)) // fleetd did not take it
		case ctx.Err() != nil, errors.As(err, &ue):
			// The caller gave up, or fleetd answered with an error: the
			// session is fine.
		default:
			// Transport failure (fleetd gone, connection reset): the next
			// call opens a fresh session rather than reuse this one.
			u.drop(cs)
		}
		return nil, err
	}
}
