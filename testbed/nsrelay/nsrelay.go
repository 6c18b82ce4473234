// Package nsrelay is test equipment: a relay that carries a few TCP ports
// of the host's loopback (the brokers' AMQP and management ports) into a
// network namespace over one unix socket, so that a simulated host reaches
// the broker and nothing else. Nothing in the product imports it.
//
// It has two halves, each a process of testbed/cmd/nsrelay:
//
//   - Outer, in the host's namespace, listens on the unix socket. Each
//     connection starts with a header naming the port wanted (Header);
//     Outer dials Host:port if the port is one it allows, and copies bytes
//     both ways. Any other port is refused (the connection closed).
//   - Inner, inside the namespace, listens on 127.0.0.1:PORT of the
//     namespace's own loopback for each port (the same numbers as outside,
//     so the broker URLs read the same on both sides) and carries each
//     accepted connection to the unix socket with that header.
//
// Unix sockets on the file system are reachable from every network
// namespace, so the socket is the only way out of the namespace, and it
// leads only to the allowed ports.
//
// Each relayed connection costs two goroutines and two buffers of BufSize
// (the kernel may splice instead of using them); at most MaxConns are
// relayed at once per half, more are closed at accept. Run returns once
// every connection is closed and every goroutine has ended.
package nsrelay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
)

// Wire format: Header bytes at the start of each unix-socket connection,
// Magic then the wanted port as a big-endian uint16.
const (
	Magic      = "nr"
	HeaderSize = len(Magic) + 2
)

// Defaults.
const (
	// BufSize is the copy buffer per direction of a relayed connection.
	BufSize = 32 << 10
	// DefaultMaxConns bounds the connections one half relays at once.
	DefaultMaxConns = 256
	// headerTimeout bounds how long Outer waits for a header, and
	// dialTimeout how long either half waits to connect onward.
	headerTimeout = 10 * time.Second
	dialTimeout   = 5 * time.Second
)

// Header returns the header asking for port.
func Header(port int) []byte {
	b := make([]byte, HeaderSize)
	copy(b, Magic)
	binary.BigEndian.PutUint16(b[len(Magic):], uint16(port))
	return b
}

// ParseHeader returns the port a header asks for, or an error for a
// header that is not one.
func ParseHeader(b []byte) (int, error) {
	if len(b) != HeaderSize || string(b[:len(Magic)]) != Magic {
		return 0, fmt.Errorf("nsrelay: bad header %q", b)
	}
	p := int(binary.BigEndian.Uint16(b[len(Magic):]))
	if p == 0 {
		return 0, errors.New("nsrelay: header asks for port 0")
	}
	return p, nil
}

// DialVia opens a connection to port through the Outer half listening on
// socket: a unix-socket connection that has sent its header. Outer may
// still close it (a port it does not allow, or nothing listening there):
// the caller then reads EOF.
func DialVia(ctx context.Context, socket string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("nsrelay: port %d out of range", port)
	}
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := c.Write(Header(port)); err != nil {
		c.Close()
		return nil, fmt.Errorf("nsrelay: header to %s: %w", socket, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// Outer is the half in the host's namespace.
type Outer struct {
	// Socket is the unix socket to listen on. A socket file left there
	// (by a killed relay) is replaced; any other file is an error. It is
	// removed when Run returns.
	Socket string
	// Host is where allowed ports are dialled; "" is 127.0.0.1.
	Host string
	// Allow lists the only ports a connection may ask for.
	Allow []int
	// MaxConns bounds connections relayed at once (0: DefaultMaxConns).
	MaxConns int
	// Log gets one line per connection and refusal; nil discards.
	Log *log.Logger
}

// Inner is the half inside the namespace.
type Inner struct {
	// Socket is Outer's unix socket.
	Socket string
	// Listen lists the ports to listen on.
	Listen []int
	// Host is the address listened on; "" is 127.0.0.1.
	Host string
	// MaxConns bounds connections relayed at once (0: DefaultMaxConns).
	MaxConns int
	// Log gets one line per connection; nil discards.
	Log *log.Logger
}

// Run listens, calls ready (if not nil) once listening, and relays until
// ctx ends; then it closes the listener and every connection and returns
// nil once every goroutine has ended. A listen error is returned at once.
func (o *Outer) Run(ctx context.Context, ready func()) error {
	if len(o.Allow) == 0 {
		return errors.New("nsrelay outer: no port allowed")
	}
	allow := map[int]bool{}
	for _, p := range o.Allow {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("nsrelay outer: port %d out of range", p)
		}
		allow[p] = true
	}
	if err := removeStaleSocket(o.Socket); err != nil {
		return err
	}
	l, err := net.Listen("unix", o.Socket)
	if err != nil {
		return fmt.Errorf("nsrelay outer: %w", err)
	}
	host := orLoopback(o.Host)
	g := newGroup("outer", o.MaxConns, o.Log)
	if ready != nil {
		ready()
	}
	g.serve(ctx, []net.Listener{l}, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
		h := make([]byte, HeaderSize)
		if _, err := io.ReadFull(c, h); err != nil {
			g.logf("refused: no header: %v", err)
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		port, err := ParseHeader(h)
		if err != nil {
			g.logf("refused: %v", err)
			return
		}
		if !allow[port] {
			g.logf("refused: port %d is not allowed", port)
			return
		}
		up, err := g.dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			g.logf("port %d: %v", port, err)
			return
		}
		g.logf("conn port=%d", port)
		g.pipe(c, up)
	})
	_ = os.Remove(o.Socket)
	return nil
}

// Run listens on every port, calls ready (if not nil) once listening, and
// relays until ctx ends; then it closes the listeners and every
// connection and returns nil once every goroutine has ended. A listen
// error is returned at once (nothing left listening).
func (in *Inner) Run(ctx context.Context, ready func()) error {
	if len(in.Listen) == 0 {
		return errors.New("nsrelay inner: no port to listen on")
	}
	host := orLoopback(in.Host)
	var ls []net.Listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	for _, p := range in.Listen {
		if p <= 0 || p > 65535 {
			closeAll()
			return fmt.Errorf("nsrelay inner: port %d out of range", p)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			closeAll()
			return fmt.Errorf("nsrelay inner: %w", err)
		}
		ls = append(ls, l)
	}
	g := newGroup("inner", in.MaxConns, in.Log)
	if ready != nil {
		ready()
	}
	g.serve(ctx, ls, func(c net.Conn) {
		port := c.LocalAddr().(*net.TCPAddr).Port
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		up, err := DialVia(dctx, in.Socket, port)
		cancel()
		if err != nil {
			g.logf("port %d: %v", port, err)
			return
		}
		if !g.track(up) {
			return
		}
		g.logf("conn port=%d", port)
		g.pipe(c, up)
	})
	return nil
}

func orLoopback(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

// removeStaleSocket removes a socket file at path; any other file there
// is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nsrelay outer: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("nsrelay outer: %s exists and is not a socket", path)
	}
	return os.Remove(path)
}

// group owns a half's connections and goroutines.
type group struct {
	name string // "outer" or "inner", starts every log line
	max  int
	log  *log.Logger

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	active atomic.Int64 // accepted connections being handled
	wg     sync.WaitGroup
}

func newGroup(name string, max int, l *log.Logger) *group {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &group{name: name, max: max, log: l, conns: map[net.Conn]struct{}{}}
}

// logf logs "NAME: message".
func (g *group) logf(format string, args ...any) {
	if g.log != nil {
		g.log.Printf(g.name+": "+format, args...)
	}
}

// track registers c to be closed when the group stops; a stopped group
// closes it at once and returns false.
func (g *group) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *group) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	c.Close()
}

// dial connects onward, tracked.
func (g *group) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
	if err != nil {
		return nil, err
	}
	// A simulated host's client would acknowledge the broker at once
	// (broker.QuickAck, as federation connections do); the relay ends its
	// TCP connection in its place, so it must too, or it adds the
	// delayed-ACK stalls a real host would not see.
	c = broker.QuickAck(c)
	if !g.track(c) {
		return nil, errors.New("stopping")
	}
	return c, nil
}

// serve accepts on every listener until ctx ends, handling each
// connection in a goroutine of its own (at most g.max at once), then
// closes the listeners and every tracked connection and waits for every
// goroutine. handle returns when its connection is done; the accepted
// connection is closed after it.
func (g *group) serve(ctx context.Context, ls []net.Listener, handle func(net.Conn)) {
	var accepters sync.WaitGroup
	for _, l := range ls {
		accepters.Add(1)
		go func() {
			defer accepters.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
						g.logf("accept on %s: %v", l.Addr(), err)
						time.Sleep(10 * time.Millisecond) // EMFILE and the like
						continue
					}
					return
				}
				if g.active.Add(1) > int64(g.max) {
					g.active.Add(-1)
					g.logf("refused: %d connections already relayed (the cap)", g.max)
					c.Close()
					continue
				}
				if !g.track(c) {
					g.active.Add(-1)
					return
				}
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					defer g.active.Add(-1)
					defer g.untrack(c)
					handle(c)
				}()
			}
		}()
	}
	<-ctx.Done()
	for _, l := range ls {
		l.Close()
	}
	accepters.Wait()
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// halfCloser is a connection whose write side can be shut alone.
type halfCloser interface{ CloseWrite() error }

// pipe copies a→b and b→a until both directions end, passing each EOF on
// as a half-close, then closes both (b is untracked here; a by its
// handler). An error in either direction closes both at once.
func (g *group) pipe(a, b net.Conn) {
	defer g.untrack(b)
	var once sync.Once
	abort := func() { once.Do(func() { a.Close(); b.Close() }) }
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, BufSize)
		_, err := io.CopyBuffer(dst, src, buf)
		if err != nil {
			abort()
		} else if hc, ok := dst.(halfCloser); ok {
			_ = hc.CloseWrite()
		} else {
			abort()
		}
		done <- struct{}{}
	}
	go cp(b, a)
	cp(a, b)
	<-done
}
