package mcpwire

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Pool is fleetmgr's one HTTP/1.1 client to one MCP server (one fleetd):
// kept-alive connections, each carrying one request at a time, written and
// read on the calling goroutine. It serves both kinds of traffic to that
// server: the hot path's tools/call (Post), and, as the http.RoundTripper
// of the go-sdk's StreamableClientTransport (RoundTrip), the SDK session's
// own requests (initialize, tools/list, the GET event stream, DELETE).
// net/http's Transport hands every request to two goroutines of its own
// (write loop, read loop); on a busy 2-core machine those hand-offs were a
// visible share of a forwarded call.
//
// What a Transport does that Pool does not: redirects, retries of a request
// whose reused connection failed (an idle connection is checked before use
// instead, see get), decompression, proxies, TLS and HTTP/2. None is asked
// for by a loopback MCP server.
type Pool struct {
	// Addr is the server's host:port; Host is the Host header (Addr if
	// empty).
	Addr, Host string
	// Dial opens a new connection (nil: a plain net.Dialer). fleetmgr's
	// checks the listener is the fleet's own fleetd (proxy upstreamSet.dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	idle []*poolConn // guarded by mu: connections ready for a request, newest last
}

type poolConn struct {
	c  net.Conn
	rr *ResponseReader
}

// MaxIdle bounds the idle connections a Pool keeps.
const MaxIdle = 64

// DrainTimeout bounds how long a detached Body waits for the rest of a
// response (normally the last chunk, microseconds behind the answer).
const DrainTimeout = 5 * time.Second

// MaxDrain bounds what is read of a response after its answer; a longer
// rest drops the connection instead.
const MaxDrain = 64 << 10

// get returns an idle connection that is still open, or dials one.
func (p *Pool) get(ctx context.Context) (*poolConn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		hc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if hc.alive() {
			return hc, nil
		}
		hc.c.Close()
	}
	dial := p.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", p.Addr)
	if err != nil {
		return nil, err
	}
	return &poolConn{c: c, rr: NewResponseReader(c, 16<<10)}, nil
}

// alive reports whether an idle connection is still open: nothing may
// arrive on an idle connection, so a non-blocking peek (one recv with
// MSG_PEEK|MSG_DONTWAIT, no waiting) must find no data and no EOF. A peer
// that closed it (fleetd restarted, an idle timeout) is seen here, before
// a request is written into a dead connection.
func (hc *poolConn) alive() bool {
	if hc.rr.Buffered() > 0 {
		return false
	}
	sc, ok := hc.c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK)
		return true // never wait
	}); err != nil {
		return false
	}
	return open
}

func (p *Pool) put(hc *poolConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= MaxIdle {
		hc.c.Close()
		return
	}
	p.idle = append(p.idle, hc)
}

// IdleConns is how many connections wait in the pool for a request.
func (p *Pool) IdleConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// CloseIdleConnections closes the idle connections (http.Client calls it
// through its Transport; connections in use close when their body does).
func (p *Pool) CloseIdleConnections() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, hc := range idle {
		hc.c.Close()
	}
}

// Body is the body of a response from a Pool: it returns its connection to
// the pool once read to the end (or closes it otherwise). While the
// request's context holds it (until Detach or Close), that context ending
// interrupts its reads, as net/http's does.
type Body struct {
	rc       io.ReadCloser
	pool     *Pool
	hc       *poolConn
	stop     func() bool // ends the call context's hold (AfterFunc); nil once detached
	poisoned bool        // the call's context fired: the connection's deadline is in the past
	reuse    bool
	eof      bool
	settled  bool
}

// Detach ends the call context's hold on the connection: from now on a
// cancelled call no longer interrupts it (DrainAndClose bounds the wait by
// DrainTimeout instead).
func (b *Body) Detach() {
	if b.stop != nil && !b.stop() {
		b.poisoned = true
	}
	b.stop = nil
}

// DrainAndClose reads the rest of a detached body, bounded by DrainTimeout
// and MaxDrain, then settles the connection (Close): back to the pool when
// the body ended, else closed.
func (b *Body) DrainAndClose() {
	if !b.settled && !b.poisoned && !b.eof {
		_ = b.hc.c.SetReadDeadline(time.Now().Add(DrainTimeout))
		_, _ = io.Copy(io.Discard, io.LimitReader(b, MaxDrain))
		if b.eof {
			_ = b.hc.c.SetReadDeadline(time.Time{})
		}
	}
	b.Close()
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close returns the connection to the pool when the body was read to its
// end (and the call's context never fired), else closes the connection.
// The body is never read here: net/http's Close of a body http.ReadResponse
// made reads it to its end, however long, which would undo MaxDrain.
func (b *Body) Close() error {
	if b.settled {
		return nil
	}
	b.settled = true
	b.Detach() // the context fired: the deadline trick poisoned the connection
	if b.reuse && b.eof && !b.poisoned {
		err := b.rc.Close() // at EOF: reads nothing
		b.pool.put(b.hc)
		return err
	}
	return b.hc.c.Close()
}

// Post sends one MCP POST of body (a JSON-RPC message) to path on session
// sid (Mcp-Session-Id; version, if not empty, is sent as
// Mcp-Protocol-Version) and returns the response; its Body (a *Body) must
// be closed. When ctx ends, the connection's I/O is interrupted (and the
// connection discarded). This is the hot path's request: one write of a
// head built by hand, no http.Request.
func (p *Pool) Post(ctx context.Context, path, sid, version string, body []byte) (*http.Response, error) {
	return p.roundTrip(ctx, nil, func(w io.Writer) error {
		var b bytes.Buffer
		b.Grow(len(body) + 256)
		for _, s := range []string{"POST ", path, " HTTP/1.1\r\nHost: ", p.host(),
			"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: ", sid} {
			b.WriteString(s)
		}
		if version != "" {
			b.WriteString("\r\nMcp-Protocol-Version: ")
			b.WriteString(version)
		}
		b.WriteString("\r\nContent-Length: ")
		b.WriteString(strconv.Itoa(len(body)))
		b.WriteString("\r\n\r\n")
		b.Write(body)
		_, err := w.Write(b.Bytes())
		return err
	})
}

// RoundTrip implements http.RoundTripper for requests to the pool's
// server (plain http, URL host Addr): the request is written with
// http.Request.Write on a pooled connection and its response read there.
// The response's Body is a *Body.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host != p.Addr {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("mcpwire.Pool for %s cannot carry a request to %v", p.Addr, req.URL)
	}
	return p.roundTrip(req.Context(), req, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 4<<10)
		if err := req.Write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

func (p *Pool) host() string {
	if p.Host != "" {
		return p.Host
	}
	return p.Addr
}

// roundTrip writes one request with write on a pooled connection and
// reads its response (for req, which may be nil for a POST).
func (p *Pool) roundTrip(ctx context.Context, req *http.Request, write func(io.Writer) error) (*http.Response, error) {
	// A call already cancelled is never sent: AfterFunc on a done context
	// fires in another goroutine and could lose the race with the write.
	if err := ctx.Err(); err != nil {
		if req != nil && req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	hc, err := p.get(ctx)
	if err != nil {
		if req != nil && req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = hc.c.SetDeadline(time.Unix(1, 0)) })
	if err := write(hc.c); err != nil {
		stop()
		hc.c.Close()
		return nil, ctxErr(ctx, err)
	}
	resp, err := hc.rr.readResponse(req) // interim 1xx answers skipped, as net/http does
	if err != nil {
		stop()
		hc.c.Close()
		return nil, ctxErr(ctx, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Close = true // the connection is no longer HTTP: never reused
	}
	resp.Body = &Body{rc: resp.Body, pool: p, hc: hc, stop: stop, reuse: !resp.Close}
	return resp, nil
}

// ctxErr prefers the context's error over the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

var _ http.RoundTripper = (*Pool)(nil)
