package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/mcpwire"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// rawFleetd is a TCP server standing in for a misbehaving fleetd: for each
// request it writes the SSE answer to the request's JSON-RPC id (a chunked
// text/event-stream body) and then runs after(w), which may write more
// chunks, hold the stream open or end it.
type rawFleetd struct {
	ln      net.Listener
	written atomic.Int64 // bytes of chunk data after the answer the kernel accepted
	conns   atomic.Int32
}

func startRawFleetd(t *testing.T, after func(f *rawFleetd, c net.Conn)) *rawFleetd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &rawFleetd{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					var b strings.Builder
					_, _ = bufio.NewReader(req.Body).WriteTo(&b)
					req.Body.Close()
					id := between(b.String(), `"id":`, `,`)
					ev := fmt.Sprintf("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[]}}\n\n", id)
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev); err != nil {
						return
					}
					after(f, c)
				}
			}()
		}
	}()
	return f
}

func between(s, a, b string) string {
	i := strings.Index(s, a)
	if i < 0 {
		return ""
	}
	s = s[i+len(a):]
	if j := strings.Index(s, b); j >= 0 {
		return s[:j]
	}
	return s
}

// giantRest writes up to total bytes of SSE comment chunks after the answer,
// counting what the kernel accepted, then ends the body properly.
func giantRest(total int64) func(f *rawFleetd, c net.Conn) {
	return func(f *rawFleetd, c net.Conn) {
		chunk := []byte(": " + strings.Repeat("x", 64<<10-3) + "\n")
		frame := append(fmt.Appendf(nil, "%x\r\n", len(chunk)), chunk...)
		frame = append(frame, "\r\n"...)
		_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for f.written.Load() < total {
			n, err := c.Write(frame)
			f.written.Add(int64(n))
			if err != nil {
				return
			}
		}
		_, _ = c.Write([]byte("0\r\n\r\n"))
	}
}

// TestRedteamH1DrainIsBounded: a fleetd that follows its answer with a
// giant rest of body (here 256 MiB) gets at most maxDrain of it read, on
// both clean-up paths (after the caller's answer, and the synchronous
// one of the SDK path), then the connection is dropped: the rest is never
// read. Before the fix the body's Close handed the body to net/http's body
// Close, which reads a response body to its end whatever its size.
func TestRedteamH1DrainIsBounded(t *testing.T) {
	const total = 256 << 20
	for _, path := range []string{"detached", "sync"} {
		t.Run(path, func(t *testing.T) {
			f := startRawFleetd(t, giantRest(total))
			addr := f.ln.Addr().String()
			p := &mcpwire.Pool{Addr: addr}
			defer p.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := p.Post(ctx, "/mcp", "sid", "", []byte(`{"jsonrpc":"2.0","id":"fleetmgr-call-1","method":"tools/call"}`))
			if err != nil {
				t.Fatal(err)
			}
			m, err := readAnswer(resp, "fleetmgr-call-1", nil)
			if err != nil || m == nil {
				t.Fatalf("answer: %v %+v", err, m)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if path == "detached" {
					hb := resp.Body.(*mcpwire.Body)
					hb.Detach()
					hb.DrainAndClose()
				} else {
					drainAndClose(resp.Body)
				}
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("the clean-up did not return within 15 s")
			}
			// Let the writer notice the close (or finish, if everything was
			// read): until its count holds still for 100 ms (a sleep: the
			// writer gives no sign it has stopped but not writing).
			deadline := time.Now().Add(5 * time.Second)
			last := int64(-1)
			for time.Now().Before(deadline) {
				n := f.written.Load()
				if n == last {
					break
				}
				last = n
				time.Sleep(100 * time.Millisecond)
			}
			// Socket buffers on loopback hold a few MiB; what was read by
			// the client must stay near maxDrain, never the whole rest.
			if n := f.written.Load(); n >= 32<<20 {
				t.Fatalf("the fleetd could write %d MiB after the answer: the drain is not bounded by maxDrain (%d KiB)", n>>20, mcpwire.MaxDrain>>10)
			}
			if p.IdleConns() != 0 {
				t.Fatal("a connection whose rest was not read went back to the pool")
			}
		})
	}
}

// TestRedteamH1SyncCleanupDoesNotWaitForAnOpenStream: a fleetd that sends
// the answer and then keeps the event stream open (no end of body) must
// not hold the SDK path's caller until the call's context ends: the
// synchronous clean-up hands the wait to the background, bounded by
// drainTimeout, and the connection is not reused.
func TestRedteamH1SyncCleanupDoesNotWaitForAnOpenStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := startRawFleetd(t, func(_ *rawFleetd, c net.Conn) {
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	})
	addr := f.ln.Addr().String()
	p := &mcpwire.Pool{Addr: addr}
	defer p.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := p.Post(ctx, "/mcp", "sid", "", []byte(`{"jsonrpc":"2.0","id":"fleetmgr-call-2","method":"tools/call"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := readAnswer(resp, "fleetmgr-call-2", nil); err != nil || m == nil {
		t.Fatalf("answer: %v %+v", err, m)
	}
	t0 := time.Now()
	drainAndClose(resp.Body)
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("the synchronous clean-up waited %v for a stream the fleetd keeps open", d)
	}
	wait.Never(t, mcpwire.DrainTimeout+time.Second, "a connection whose stream never ended back in the pool", wait.Bool(func() bool {
		return p.IdleConns() != 0
	}))
}
