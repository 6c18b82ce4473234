package nsrelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// These tests run both halves in this process, without a namespace: Inner
// listens on 127.0.0.2 (another loopback address) and Outer dials the
// upstream on 127.0.0.1, at the same port number, as they would on two
// sides of a namespace.

// upstream is a TCP server on 127.0.0.1 that reads a whole request (to the
// client's half-close) and answers its bytes reversed, then closes; or,
// with hold, keeps connections open until closed.
type upstream struct {
	l     net.Listener
	port  int
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	hold  bool
}

func startUpstream(t *testing.T, hold bool) *upstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{l: l, port: l.Addr().(*net.TCPAddr).Port, hold: hold}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				if u.hold {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				b, err := io.ReadAll(c)
				if err != nil {
					return
				}
				for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
					b[i], b[j] = b[j], b[i]
				}
				_, _ = c.Write(b)
			}()
		}
	}()
	t.Cleanup(u.close)
	return u
}

func (u *upstream) close() {
	u.l.Close()
	u.mu.Lock()
	for _, c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// pair runs Outer allowing allow and Inner listening on listen (on
// 127.0.0.2) until the test ends; it returns the socket and both logs.
type pair struct {
	socket  string
	log     *syncbuf.Buffer
	stop    func() // cancels both and waits for Run to return
	stopped chan struct{}
	runErrs []error
	errMu   sync.Mutex
}

func startPair(t testing.TB, allow, listen []int, maxConns int) *pair {
	t.Helper()
	dir, err := os.MkdirTemp("", "fmrlt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &pair{socket: filepath.Join(dir, "r.sock"), log: &syncbuf.Buffer{}, stopped: make(chan struct{})}
	lg := log.New(p.log, "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	outer := &Outer{Socket: p.socket, Allow: allow, Log: lg, MaxConns: maxConns}
	inner := &Inner{Socket: p.socket, Listen: listen, Host: "127.0.0.2", Log: lg, MaxConns: maxConns}
	ready := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, r := range []func(context.Context, func()) error{outer.Run, inner.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r(ctx, func() { ready <- struct{}{} }); err != nil {
				p.errMu.Lock()
				p.runErrs = append(p.runErrs, err)
				p.errMu.Unlock()
				ready <- struct{}{}
			}
		}()
		<-ready
	}
	go func() { wg.Wait(); close(p.stopped) }()
	p.stop = func() {
		cancel()
		select {
		case <-p.stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10 s of its context ending")
		}
	}
	t.Cleanup(p.stop)
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if len(p.runErrs) > 0 {
		t.Fatalf("Run: %v", p.runErrs)
	}
	return p
}

func dialInner(t *testing.T, port int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends body, half-closes, and returns the answer read to EOF.
func roundTrip(t *testing.T, c net.Conn, body []byte) []byte {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(body)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return got
}

func reversed(b []byte) []byte {
	r := bytes.Clone(b)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return r
}

// waitRelayed waits up to 5 s for the log to show n connections relayed by Outer.
func waitRelayed(t *testing.T, p *pair, n int) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("%d connections relayed", n), func() (bool, string) {
		log := p.log.String()
		return strings.Count(log, "outer: conn port") >= n, log
	})
}

// waitLog waits up to 5 s for the log to contain s.
func waitLog(t *testing.T, p *pair, s string) {
	t.Helper()
	wait.LogLine(t, 5*time.Second, p.log.String, s)
}

// TestRelaySizes: bytes arrive intact both ways at sizes around the copy
// buffer, and each half-close is passed on (the upstream answers only
// after it sees EOF, the client reads the answer to EOF).
func TestRelaySizes(t *testing.T) {
	up := startUpstream(t, false)
	p := startPair(t, []int{up.port}, []int{up.port}, 0)
	for _, n := range []int{0, 1, HeaderSize, BufSize - 1, BufSize, BufSize + 1, 3*BufSize + 7, 4 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			body := make([]byte, n)
			_, _ = rand.Read(body)
			got := roundTrip(t, dialInner(t, up.port), body)
			if !bytes.Equal(got, reversed(body)) {
				t.Fatalf("%d bytes sent, %d back, not the same reversed", n, len(got))
			}
		})
	}
	if got, want := strings.Count(p.log.String(), "outer: conn port="), 8; got != want {
		t.Errorf("outer logged %d connections, want %d:\n%s", got, want, p.log.String())
	}
}

// TestRelayRefusals: a port Outer does not allow, a header that is not
// one, and an allowed port with nothing listening are closed without a
// byte, each logged with its reason; a port Inner does not listen on
// refuses the connection.
func TestRelayRefusals(t *testing.T) {
	up := startUpstream(t, false)
	other := startUpstream(t, false)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := dead.Addr().(*net.TCPAddr).Port
	dead.Close()
	// Inner also listens on other's port, which Outer does not allow.
	p := startPair(t, []int{up.port, deadPort}, []int{up.port, other.port, deadPort}, 0)

	expectEOF := func(t *testing.T, c net.Conn) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if len(b) != 0 || (err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset")) {
			t.Fatalf("got %q, %v; want the connection closed without a byte", b, err)
		}
	}
	t.Run("port not allowed", func(t *testing.T) {
		c := dialInner(t, other.port)
		_, _ = c.Write([]byte("hello"))
		expectEOF(t, c)
		waitLog(t, p, fmt.Sprintf("outer: refused: port %d is not allowed", other.port))
	})
	t.Run("DialVia a port not allowed", func(t *testing.T) {
		c, err := DialVia(context.Background(), p.socket, other.port)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		expectEOF(t, c)
	})
	t.Run("bad header", func(t *testing.T) {
		c, err := net.Dial("unix", p.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\n"))
		expectEOF(t, c)
		waitLog(t, p, `outer: refused: nsrelay: bad header "GET "`)
	})
	t.Run("header asks for port 0", func(t *testing.T) {
		c, err := net.Dial("unix", p.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(Header(0))
		expectEOF(t, c)
		waitLog(t, p, "outer: refused: nsrelay: header asks for port 0")
	})
	t.Run("nothing listening upstream", func(t *testing.T) {
		c := dialInner(t, deadPort)
		expectEOF(t, c)
		waitLog(t, p, fmt.Sprintf("outer: port %d: dial tcp 127.0.0.1:%d: connect: connection refused", deadPort, deadPort))
	})
	t.Run("port inner does not listen on", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		free := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", free), time.Second); err == nil {
			c.Close()
			t.Fatalf("127.0.0.2:%d accepted a connection", free)
		}
	})
	// The allowed port still works after all that.
	if got := roundTrip(t, dialInner(t, up.port), []byte("abc")); string(got) != "cba" {
		t.Fatalf("after the refusals: %q", got)
	}
}

// TestRelayCap: with MaxConns 2, a third connection while two are open is
// closed at once by Inner (logged), and accepted again once one closes.
func TestRelayCap(t *testing.T) {
	up := startUpstream(t, true)
	p := startPair(t, []int{up.port}, []int{up.port}, 2)
	a, b := dialInner(t, up.port), dialInner(t, up.port)
	for _, c := range []net.Conn{a, b} {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, p, "inner: conn port")
	waitRelayed(t, p, 2)
	third := dialInner(t, up.port)
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := third.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("third connection over the cap: read %d, %v; want EOF", n, err)
	}
	waitLog(t, p, "inner: refused: 2 connections already relayed (the cap)")
	a.Close()
	// The slot frees once a's relay has ended; retry until then.
	wait.For(t, 5*time.Second, "a slot after closing one of two", func() (bool, string) {
		c := dialInner(t, up.port)
		_, _ = c.Write([]byte("y"))
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() { // held open: relayed
			return true, ""
		}
		c.Close()
		return false, fmt.Sprintf("read %v\n%s", err, p.log.String())
	})
}

// TestRelayStop: ending Run's context with connections open closes them
// (the client reads EOF or a reset), removes the socket, and leaves no
// goroutine behind.
func TestRelayStop(t *testing.T) {
	base := runtime.NumGoroutine()
	up := startUpstream(t, true)
	p := startPair(t, []int{up.port}, []int{up.port}, 0)
	var cs []net.Conn
	for range 5 {
		c := dialInner(t, up.port)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	waitRelayed(t, p, 5)
	t0 := time.Now()
	p.stop()
	t.Logf("Run returned %v after its context ended, 5 connections open", time.Since(t0).Round(time.Microsecond))
	for i, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("connection %d still open after stop", i)
		} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d not closed by stop (read timed out)", i)
		}
		c.Close()
	}
	if _, err := os.Lstat(p.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", up.port), time.Second); err == nil {
		t.Error("inner still listens after stop")
	}
	up.close()
	if err := wait.Until(context.Background(), 5*time.Second, wait.Bool(func() bool { return runtime.NumGoroutine() <= base })); err != nil {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after stop, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
}

// TestOuterSocketFile: a socket file left by a killed relay is replaced;
// any other file at the path is an error, left alone.
func TestOuterSocketFile(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- (&Outer{Socket: stale, Allow: []int{1}}).Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run over a stale socket: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = (&Outer{Socket: plain, Allow: []int{1}}).Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("Run over a plain file: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatal("the plain file was touched")
	}
	for _, bad := range []*Outer{{Socket: plain}, {Socket: plain, Allow: []int{0}}, {Socket: plain, Allow: []int{70000}}} {
		if err := bad.Run(context.Background(), nil); err == nil {
			t.Errorf("Outer%+v ran", *bad)
		}
	}
	if err := (&Inner{Socket: plain}).Run(context.Background(), nil); err == nil {
		t.Error("Inner with no port ran")
	}
}

// TestInnerListenError: a port Inner cannot listen on fails Run at once,
// with the ports already opened closed again.
func TestInnerListenError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	free := l.Addr().(*net.TCPAddr).Port
	l.Close()
	err = (&Inner{Socket: "/nonexistent", Host: "127.0.0.2", Listen: []int{free, busy.Addr().(*net.TCPAddr).Port}}).Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run with a busy port: %v", err)
	}
	c, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", free))
	if err != nil {
		t.Fatalf("the first port was left open: %v", err)
	}
	c.Close()
}

// FuzzHeader: every header Header makes parses back to its port; any
// other input of header size either parses to a port 1–65535 or errs.
func FuzzHeader(f *testing.F) {
	f.Add([]byte("nr\x16\x28"))
	f.Add([]byte("nr\x00\x00"))
	f.Add([]byte("GET "))
	f.Add([]byte("nr"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseHeader(b)
		if err != nil {
			return
		}
		if p < 1 || p > 65535 || len(b) != HeaderSize {
			t.Fatalf("ParseHeader(%q) = %d", b, p)
		}
		if !bytes.Equal(Header(p), b) {
			t.Fatalf("Header(%d) = %q, parsed from %q", p, Header(p), b)
		}
	})
}
