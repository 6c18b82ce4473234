package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// h1pool is the hot path's HTTP/1.1 client to one fleetd: kept-alive
// connections, each carrying one request at a time, written and read on
// the calling goroutine. net/http's Transport hands every request to two
// goroutines of its own (write loop, read loop); on a busy 2-core machine
// those hand-offs were a visible share of a forwarded call.
type h1pool struct {
	addr string // host:port
	host string // Host header
	// dial opens a new connection (nil: a plain net.Dialer). The proxy's
	// checks the listener is the fleet's own fleetd (upstreamSet.dial).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	idle []*h1conn // guarded by mu: connections ready for a request, newest last
}

type h1conn struct {
	c  net.Conn
	rr *mcpwire.ResponseReader
}

// maxIdleH1 bounds the idle connections kept per fleet.
const maxIdleH1 = 64

// get returns an idle connection that is still open, or dials one.
func (p *h1pool) get(ctx context.Context) (*h1conn, error) {
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
	dial := p.dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &h1conn{c: c, rr: mcpwire.NewResponseReader(c, 16<<10)}, nil
}

// alive reports whether an idle connection is still open: nothing may
// arrive on an idle connection, so a non-blocking peek (one recv with
// MSG_PEEK|MSG_DONTWAIT, no waiting) must find no data and no EOF. A peer
// that closed it (fleetd restarted, an idle timeout) is seen here, before
// a request is written into a dead connection.
func (hc *h1conn) alive() bool {
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

func (p *h1pool) put(hc *h1conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxIdleH1 {
		hc.c.Close()
		return
	}
	p.idle = append(p.idle, hc)
}

func (p *h1pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, hc := range idle {
		hc.c.Close()
	}
}

// h1Body is a response body that returns its connection to the pool once
// read to the end (or closes it otherwise).
type h1Body struct {
	io.ReadCloser
	pool     *h1pool
	hc       *h1conn
	stop     func() bool // ends the call context's hold (AfterFunc); nil once detached
	poisoned bool        // the call's context fired: the connection's deadline is in the past
	reuse    bool
	eof      bool
	settled  bool
}

// drainTimeout bounds how long a detached body waits for the rest of a
// response (normally the last chunk, microseconds behind the answer).
const drainTimeout = 5 * time.Second

// detach ends the call context's hold on the connection: from now on a
// cancelled call no longer interrupts it (drainAndClose bounds the wait by
// drainTimeout instead).
func (b *h1Body) detach() {
	if b.stop != nil && !b.stop() {
		b.poisoned = true
	}
	b.stop = nil
}

// drainAndClose reads the rest of a detached body, bounded by drainTimeout
// and maxDrain, then settles the connection (Close).
func (b *h1Body) drainAndClose() {
	if !b.settled && !b.poisoned && !b.eof {
		_ = b.hc.c.SetReadDeadline(time.Now().Add(drainTimeout))
		_, _ = io.Copy(io.Discard, io.LimitReader(b, maxDrain))
		if b.eof {
			_ = b.hc.c.SetReadDeadline(time.Time{})
		}
	}
	b.Close()
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close returns the connection to the pool when the body was read to its
// end (and the call's context never fired), else closes the connection.
// The body is never read here: net/http's Close of a body http.ReadResponse
// made reads it to its end, however long, which would undo maxDrain.
func (b *h1Body) Close() error {
	if b.settled {
		return nil
	}
	b.settled = true
	b.detach() // the context fired: the deadline trick poisoned the connection
	if b.reuse && b.eof && !b.poisoned {
		err := b.ReadCloser.Close() // at EOF: reads nothing
		b.pool.put(b.hc)
		return err
	}
	return b.hc.c.Close()
}

// do sends one MCP POST of body (a JSON-RPC message) to path on session sid
// (Mcp-Session-Id; version, if not empty, is sent as Mcp-Protocol-Version)
// and returns the response; its Body must be closed. When ctx ends, the
// connection's I/O is interrupted (and the connection discarded).
func (p *h1pool) do(ctx context.Context, path, sid, version string, body []byte) (*http.Response, error) {
	// A call already cancelled is never sent: AfterFunc on a done context
	// fires in another goroutine and could lose the race with the write.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hc, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = hc.c.SetDeadline(time.Unix(1, 0)) })
	var b bytes.Buffer
	b.Grow(len(body) + 256)
	for _, s := range []string{"POST ", path, " HTTP/1.1\r\nHost: ", p.host,
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
	if _, err := hc.c.Write(b.Bytes()); err != nil {
		stop()
		hc.c.Close()
		return nil, ctxErr(ctx, err)
	}
	resp, err := hc.rr.ReadResponse() // interim 1xx answers skipped, as net/http does
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		// The connection is no longer HTTP: never reused.
		resp.Close = true
	}
	if err != nil {
		stop()
		hc.c.Close()
		return nil, ctxErr(ctx, err)
	}
	resp.Body = &h1Body{ReadCloser: resp.Body, pool: p, hc: hc, stop: stop, reuse: !resp.Close}
	return resp, nil
}

// ctxErr prefers the context's error over the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
