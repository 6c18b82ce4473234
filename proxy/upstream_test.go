package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// restartable is an MCP server behind one URL whose whole state can be
// replaced, like a fleetd that restarted on the same port: sessions of the
// old one are unknown (HTTP 404) to the new one.
type restartable struct {
	h     atomic.Pointer[http.Handler]
	calls atomic.Int32
	gen   atomic.Int32
}

func (r *restartable) restart() {
	gen := r.gen.Add(1)
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-fleetd", Version: "0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_whoami"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]any, error) {
		r.calls.Add(1)
		return nil, map[string]any{"gen": gen}, nil
	})
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	r.h.Store(&h)
}

func (r *restartable) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	(*r.h.Load()).ServeHTTP(w, req)
}

// TestUpstreamReinitializesAfterRestart: a call on a session the upstream
// no longer knows (404) is retried once on a fresh session and succeeds;
// the call is delivered exactly once.
func TestUpstreamReinitializesAfterRestart(t *testing.T) {
	r := &restartable{}
	r.restart()
	srv := httptest.NewUnstartedServer(r)
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	port, _ := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil)
	// Every connection to the fleetd, the SDK session's and the calls',
	// goes through the upstream's one pool (its dial hook sees them all).
	var dials atomic.Int32
	u := newUpstream("kb", port, "/mcp", client, func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
	defer u.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	call := func() string {
		t.Helper()
		res, err := u.call(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := call(); got != `{"gen":1}` {
		t.Fatalf("first call: %s", got)
	}
	first := u.cs
	r.restart()
	if got := call(); got != `{"gen":2}` {
		t.Fatalf("call after restart: %s", got)
	}
	if u.cs == first {
		t.Fatal("the session was not replaced")
	}
	if n := r.calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (each call exactly once)", n)
	}
	// The server saw no connection the pool did not dial: the SDK
	// session has no client of its own.
	if d, s := dials.Load(), conns.Load(); d == 0 || s != d {
		t.Fatalf("the pool dialled %d connections, the fleetd accepted %d: some went around the pool", d, s)
	}
}
