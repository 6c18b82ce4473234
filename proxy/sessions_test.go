package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSessionTableFollowsTheSDK: a session enters the table through the
// SDK's receiving middleware when its client initializes, is ready (the
// SDK takes calls on it), and leaves when the SDK ends it (the client's
// DELETE); an unknown id is neither known nor ready; none is left once
// the client closed.
func TestSessionTableFollowsTheSDK(t *testing.T) {
	var tab sessionTable
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "0"}, nil)
	s.AddReceivingMiddleware(tab.middleware)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Closed before srv (deferred later, runs first) on every path: an
	// open session holds its standalone SSE stream, which srv.Close waits
	// for.
	defer cs.Close()
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The client's session; the go-sdk client's server/discover probe
	// before initialize may have made a second, short-lived one, which the
	// SDK ends on its own (the wait for an empty table below covers it).
	if tab.ready(cs.ID()) == nil || tab.get(cs.ID()).ID() != cs.ID() || tab.len() > 2 {
		ss := tab.get(cs.ID())
		var init any
		if ss != nil {
			init = ss.InitializeParams()
		}
		t.Fatalf("after initialize: %d sessions, get(%q) = %v (initialize params %v)", tab.len(), cs.ID(), ss, init)
	}
	if tab.ready("no-such-session") != nil || tab.get("no-such-session") != nil {
		t.Fatal("an unknown session id is known")
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	for tab.len() != 0 { // the SDK ends the session on DELETE; Wait returns then
		select {
		case <-ctx.Done():
			t.Fatalf("the session the client closed is still in the table")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if tab.ready(cs.ID()) != nil {
		t.Fatal("a closed session is still ready")
	}
}
