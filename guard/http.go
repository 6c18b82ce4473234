package guard

import (
	"context"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/fleetmgr/fleetmgr/procfs"
)

type connKey struct{}

// connPeer carries one connection's addresses and, once resolved, its
// decision: the guard runs once per connection, never per request.
type connPeer struct {
	conn net.Conn
	once sync.Once
	d    Decision
}

// ConnContext is an http.Server.ConnContext hook: it attaches the
// connection so Middleware can resolve the peer once. It does no I/O itself
// (it runs on the accept loop).
func (g *Guard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connPeer{conn: c})
}

// PeerOf resolves the process on the other end of c: loopback TCP through
// /proc/net/tcp{,6} (procfs.TCPPeerPID), a unix socket through SO_PEERCRED.
// Identity always comes from the kernel, never from anything the client sent.
func PeerOf(c net.Conn) (pid, uid int, err error) {
	switch cc := c.(type) {
	case *net.UnixConn:
		return procfs.UnixPeerCred(cc)
	default:
		ra, err1 := netip.ParseAddrPort(c.RemoteAddr().String())
		la, err2 := netip.ParseAddrPort(c.LocalAddr().String())
		if err1 != nil || err2 != nil {
			return 0, -1, &net.AddrError{Err: "not a TCP connection", Addr: c.RemoteAddr().String()}
		}
		return procfs.TCPPeerPID(ra, la)
	}
}

// CheckConn resolves the peer of c and decides.
func (g *Guard) CheckConn(ctx context.Context, c net.Conn) Decision {
	pid, uid, err := PeerOf(c)
	if err != nil {
		return g.Record(Decision{PID: pid, UID: uid, Rule: RuleUnresolved,
			Reason: "cannot find the process behind connection from " + c.RemoteAddr().String() + ": " + err.Error()})
	}
	return g.Check(ctx, pid, uid)
}

// HTTPPolicy says who may reach the HTTP mount beyond the peer rules.
type HTTPPolicy struct {
	// RemoteToken, when non-empty, admits peers that are not on loopback if
	// they present "Authorization: Bearer <RemoteToken>" (fleetmgr serve
	// --allow-remote --token-file). Loopback peers are still checked by
	// every guard rule, token or not. Empty: loopback only, and the Host and
	// Origin headers must name localhost (DNS rebinding).
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
		if pol.RemoteToken == "" {
			if bad := badHostOrigin(r); bad != "" {
				d := g.Record(Decision{PID: -1, UID: -1, Rule: RuleHost, Reason: bad})
				http.Error(w, d.Error(), http.StatusForbidden)
				return
			}
		}
		cp.once.Do(func() { cp.d = g.CheckConn(context.WithoutCancel(r.Context()), cp.conn) })
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
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || !isLocalHost(u.Hostname()) {
			return "Origin header " + o + " is not localhost"
		}
	}
	return ""
}
