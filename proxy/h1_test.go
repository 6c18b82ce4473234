package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestH1PoolReusesAndNoticesClosed: kept-alive connections are reused, and
// one the server closed while idle is noticed before a request is written
// into it.
func TestH1PoolReusesAndNoticesClosed(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
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
	p := &h1pool{addr: addr, host: addr}
	defer p.closeIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	do := func(body string) string {
		t.Helper()
		resp, err := p.do(ctx, "/mcp", http.Header{"Content-Type": {"application/json"}}, []byte(body))
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
	time.Sleep(50 * time.Millisecond) // the FIN arrives
	if got := do(`"after"`); got != `{"echo":"after"}` {
		t.Fatalf("after the server closed the idle connection: %s", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("connections after the close: %d, want 2", n)
	}
	// A cancelled request interrupts the I/O and does not poison the pool.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := p.do(cctx, "/mcp", nil, []byte(`1`)); err == nil {
		t.Fatal("a request on a cancelled context succeeded")
	}
	if got := do(`2`); got != `{"echo":2}` {
		t.Fatalf("after a cancelled request: %s", got)
	}
}
