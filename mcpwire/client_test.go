package mcpwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestPoolReusesAndNoticesClosed: kept-alive connections are reused, and
// one the server closed while idle is noticed before a request is written
// into it.
func TestPoolReusesAndNoticesClosed(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Mcp-Session-Id") != "sid-1" || r.Header.Get("Mcp-Protocol-Version") != "2025-06-18" ||
			r.Header.Get("Content-Type") != "application/json" || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			http.Error(w, fmt.Sprintf("headers: %v", r.Header), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"echo":` + string(b) + `}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	p := &Pool{Addr: addr}
	defer p.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	do := func(body string) string {
		t.Helper()
		resp, err := p.Post(ctx, "/mcp", "sid-1", "2025-06-18", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	for i := range 5 {
		if got := do(`[` + string(rune('0'+i)) + `]`); got != `{"echo":[`+string(rune('0'+i))+`]}` {
			t.Fatalf("answer %d: %s", i, got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 sequential requests used %d connections, want 1", n)
	}
	srv.CloseClientConnections()
	// The FIN arrives: the pool's idle connection reads as closed.
	wait.For(t, 5*time.Second, "the idle connection seen closed", wait.Bool(func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, hc := range p.idle {
			if hc.alive() {
				return false
			}
		}
		return true
	}))
	if got := do(`"after"`); got != `{"echo":"after"}` {
		t.Fatalf("after the server closed the idle connection: %s", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("connections after the close: %d, want 2", n)
	}
	// A cancelled request interrupts the I/O and does not poison the pool.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := p.Post(cctx, "/mcp", "sid-1", "2025-06-18", []byte(`1`)); err == nil {
		t.Fatal("a request on a cancelled context succeeded")
	}
	if got := do(`2`); got != `{"echo":2}` {
		t.Fatalf("after a cancelled request: %s", got)
	}
	// A detached body survives its call's context and, drained later,
	// returns the connection to the pool.
	before := conns.Load()
	dctx, dcancel := context.WithCancel(context.Background())
	resp, err := p.Post(dctx, "/mcp", "sid-1", "2025-06-18", []byte(`3`))
	if err != nil {
		t.Fatal(err)
	}
	hb := resp.Body.(*Body)
	hb.Detach()
	dcancel()
	hb.DrainAndClose()
	if got := do(`4`); got != `{"echo":4}` || conns.Load() != before {
		t.Fatalf("after a detached drain: %s, %d connections (want %d)", got, conns.Load(), before)
	}
	// A body whose context fired before it was detached is not reused.
	pctx, pcancel := context.WithCancel(context.Background())
	resp, err = p.Post(pctx, "/mcp", "sid-1", "2025-06-18", []byte(`5`))
	if err != nil {
		t.Fatal(err)
	}
	pcancel()
	// AfterFunc runs. A sleep: its goroutine leaves no sign but the past
	// deadline it sets on the connection, which nothing can read unharmed.
	time.Sleep(20 * time.Millisecond)
	hb = resp.Body.(*Body)
	hb.Detach()
	hb.DrainAndClose()
	if got := do(`6`); got != `{"echo":6}` || conns.Load() != before+1 {
		t.Fatalf("after a poisoned body: %s, %d connections (want %d)", got, conns.Load(), before+1)
	}
}

// TestPoolDialHook: a connection the dial hook refuses carries nothing,
// and the hook's error reaches the caller (upstreamSet.dial refuses a
// listener that is not the fleet's fleetd this way).
func TestPoolDialHook(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	refused := errors.New("not the fleet's fleetd")
	var dials atomic.Int32
	p := &Pool{Addr: addr, Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		c, err := d.DialContext(ctx, network, a)
		if err != nil {
			return nil, err
		}
		c.Close()
		return nil, refused
	}}
	defer p.CloseIdleConnections()
	_, err := p.Post(context.Background(), "/mcp", "sid", "", []byte(`{}`))
	if !errors.Is(err, refused) {
		t.Fatalf("do through a refusing dial hook: %v", err)
	}
	wait.Never(t, 50*time.Millisecond, "another dial, or a request reaching the server", func() (bool, string) {
		return dials.Load() != 1 || requests.Load() != 0, fmt.Sprintf("dials %d (want 1), requests the server saw %d (want 0)", dials.Load(), requests.Load())
	})
}

// TestPoolSkipsInterimResponses: a 1xx before the answer is skipped, as
// net/http's Transport skips it: the request gets the real answer and the
// connection stays in step for the next one.
func TestPoolSkipsInterimResponses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := conns.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					body := fmt.Sprintf(`{"conn":%d}`, n)
					reply := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					if n == 1 {
						reply = "HTTP/1.1 102 Processing\r\n\r\n" + reply
					}
					if _, err := c.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	p := &Pool{Addr: addr}
	defer p.CloseIdleConnections()
	ctx := context.Background()
	for i := range 2 {
		resp, err := p.Post(ctx, "/mcp", "s", "", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != `{"conn":1}` {
			t.Fatalf("request %d got %d %s, want 200 and the answer of the first connection", i+1, resp.StatusCode, b)
		}
	}
}
