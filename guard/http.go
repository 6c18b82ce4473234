package guard

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fleetmgr/fleetmgr/procfs"
)

type connKey struct{}

// connPeer carries one connection's addresses and, once resolved, its
// decision: the guard runs once per connection, never per request.
type connPeer struct {
	conn net.Conn
	once sync.Once
	d    Decision
	done atomic.Bool // d is set
}

// DecisionOf returns the decision Middleware made for the HTTP connection
// ctx (a request's context) came in on; false before it made one or
// outside a connection ConnContext attached.
func DecisionOf(ctx context.Context) (Decision, bool) {
	cp, _ := ctx.Value(connKey{}).(*connPeer)
	if cp == nil || !cp.done.Load() {
		return Decision{}, false
	}
	return cp.d, true
}

// ConnContext is an http.Server.ConnContext hook: it attaches the
// connection so Middleware can resolve the peer once. It does no I/O itself
// (it runs on the accept loop).
func (g *Guard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connPeer{conn: c})
}

// PeerOf resolves the processes on the other end of c: for loopback TCP,
// every process holding the client's socket (sock_diag or
// /proc/net/tcp{,6}, then /proc/*/fd); for a unix socket, the connecting
// process (SO_PEERCRED). Identity always comes from the kernel, never from
// anything the client sent.
func PeerOf(c net.Conn) (pids []int, uid int, err error) {
	switch cc := c.(type) {
	case *net.UnixConn:
		pid, uid, err := procfs.UnixPeerCred(cc)
		return []int{pid}, uid, err
	default:
		ra, err1 := netip.ParseAddrPort(c.RemoteAddr().String())
		la, err2 := netip.ParseAddrPort(c.LocalAddr().String())
		if err1 != nil || err2 != nil {
			return nil, -1, &net.AddrError{Err: "not a TCP connection", Addr: c.RemoteAddr().String()}
		}
		return procfs.TCPPeerPIDs(ra, la)
	}
}

// CheckConn resolves the peer of c and decides. When several processes hold
// the client's socket (inherited, or passed on), each is judged and any
// refusal refuses the connection.
func (g *Guard) CheckConn(ctx context.Context, c net.Conn) Decision {
	// The peer processes existed by now (the connection is made, and they
	// are found holding it): a process started later under one of their
	// pids is not the peer.
	before, _ := procfs.SinceBoot()
	pids, uid, err := PeerOf(c)
	if err != nil || len(pids) == 0 {
		d := Decision{PID: -1, UID: uid, Rule: RuleUnresolved,
			Reason: "cannot find the process behind connection from " + c.RemoteAddr().String()}
		if err != nil {
			d.Reason += ": " + err.Error()
		}
		return g.Record(d)
	}
	var first Decision
	for i, pid := range pids {
		d := g.decide(ctx, pid, uid, before)
		if !d.Allowed {
			if len(pids) > 1 {
				d.Reason += fmt.Sprintf(" (one of %d processes holding the connection: %v)", len(pids), pids)
			}
			return g.Record(d)
		}
		if i == 0 {
			first = d
		}
	}
	return g.Record(first)
}

// HTTPPolicy says who may reach the HTTP mount beyond the peer rules.
type HTTPPolicy struct {
	// RemoteToken, when non-empty, admits peers that are not on loopback if
	// they present "Authorization: Bearer <RemoteToken>" (fleetmgr serve
	// --allow-remote --token-file). Loopback peers are still checked by
	// every guard rule, token or not. Empty: loopback only, and the Host and
	// Origin headers must name localhost (DNS rebinding). Loopback peers
	// must send localhost Host/Origin headers in both cases.
	RemoteToken string
}

// Middleware refuses, with HTTP 403 and before any MCP message is read,
// every request whose connection's peer the guard refuses, and every request
// whose Host or Origin is not localhost (DNS rebinding). A server using it
// must set ConnContext to g.ConnContext.
func (g *Guard) Middleware(next http.Handler, pol HTTPPolicy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp, _ := r.Context().Value(connKey{}).(*connPeer)
		if cp == nil {
			d := g.Record(Decision{PID: -1, UID: -1, Rule: RuleUnresolved, Reason: "connection has no peer record (server misconfigured: ConnContext not set)"})
			http.Error(w, d.Error(), http.StatusForbidden)
			return
		}
		if pol.RemoteToken != "" && !isLoopbackConn(cp.conn) {
			// A peer on another host: no pid to inspect, the token decides.
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(pol.RemoteToken)) != 1 {
				d := g.Record(Decision{PID: -1, UID: -1, Rule: RuleToken, Reason: "remote peer " + cp.conn.RemoteAddr().String() + " sent no valid bearer token"})
				http.Error(w, d.Error(), http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		// Loopback peers: Host and Origin must be localhost, with or without
		// --allow-remote (a browser page on this host is a loopback peer).
		if bad := badHostOrigin(r); bad != "" {
			d := g.Record(Decision{PID: -1, UID: -1, Rule: RuleHost, Reason: bad})
			http.Error(w, d.Error(), http.StatusForbidden)
			return
		}
		cp.once.Do(func() { cp.d = g.CheckConn(context.WithoutCancel(r.Context()), cp.conn); cp.done.Store(true) })
		if !cp.d.Allowed {
			http.Error(w, cp.d.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isLoopbackConn(c net.Conn) bool {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// isLocalHost reports whether host (no port) names this machine's loopback.
func isLocalHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func badHostOrigin(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !isLocalHost(host) {
		return "Host header " + r.Host + " is not localhost"
	}
	// An opaque origin ("null": sandboxed frames, file: pages) is a
	// browser context too, and is refused like any non-local origin.
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !isLocalHost(u.Hostname()) {
			return "Origin header " + o + " is not localhost"
		}
	}
	return ""
}
