package proxy

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// upstreamSet is fleetmgr's upstream per fleet (upstream.go), where each
// running fleetd serves, and the dialer every connection to a fleetd goes
// through (dial).
type upstreamSet struct {
	mgr    *lifecycle.Manager // nil only in tests of the dialer alone
	log    *slog.Logger
	client *mcp.Client // opens the SDK sessions
	checks listenerChecks

	mu      sync.Mutex
	ups     map[string]*upstream // guarded by mu: fleet → its upstream
	running map[string]endpoint  // guarded by mu: fleet → where its running fleetd was started, as the last refresh saw
}

// endpoint is where a fleet's fleetd serves MCP.
type endpoint struct {
	port int
	path string
}

// newUpstreamSet returns an empty set whose sessions client opens.
func newUpstreamSet(mgr *lifecycle.Manager, log *slog.Logger, client *mcp.Client) *upstreamSet {
	s := &upstreamSet{mgr: mgr, log: log, client: client, ups: map[string]*upstream{}}
	if mgr != nil {
		s.checks.verify = mgr.VerifyListenerOn
	}
	return s
}

// get returns (creating if needed) the upstream of fleet name: at the
// endpoint its running fleetd was started with (the last refresh saw it),
// else at the one the config gives. A fleet removed from the config while
// it runs is still reached (lifecycle.Manager.Fleet). An upstream whose
// endpoint moved is replaced and closed.
func (s *upstreamSet) get(name string) (*upstream, error) {
	f, err := s.mgr.Fleet(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.running[name]
	if !ok {
		ep = endpoint{f.Port, f.MCPPath}
	}
	u := s.ups[name]
	if u == nil || u.endpoint != endpointURL(ep.port, ep.path) {
		if u != nil {
			go u.close()
		}
		u = newUpstream(name, ep.port, ep.path, s.client, s.dial) // one mcpwire.Pool per fleetd
		u.log = s.log
		s.ups[name] = u
	}
	return u, nil
}

// track records where the running fleets serve (running) and closes, in
// the background, the upstreams of fleets no longer in known (removed
// from the config and stopped).
func (s *upstreamSet) track(running map[string]endpoint, known map[string]string) {
	s.mu.Lock()
	s.running = running
	var gone []*upstream
	for name, u := range s.ups {
		if _, ok := known[name]; !ok {
			gone = append(gone, u)
			delete(s.ups, name)
		}
	}
	s.mu.Unlock()
	for _, u := range gone {
		go u.close()
	}
}

// connected reports whether fleet name's upstream holds an open session.
func (s *upstreamSet) connected(name string) bool {
	s.mu.Lock()
	u := s.ups[name]
	s.mu.Unlock()
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cs != nil
}

// closeAll closes and forgets every upstream.
func (s *upstreamSet) closeAll() {
	s.mu.Lock()
	ups := s.ups
	s.ups = map[string]*upstream{}
	s.mu.Unlock()
	for _, u := range ups {
		u.close()
	}
}

// dial opens a TCP connection to a fleetd: every connection of the
// upstream sessions and of the hot path goes through it. When addr is the
// loopback port of a configured (or still running) fleet, the process
// listening there must be the fleetd fleetmgr started for it
// (lifecycle.Manager.VerifyListener) before the connection is handed out,
// so nothing is ever written to an impostor that took a dead fleetd's port
// (docs/ARCHITECTURE.md "The merged catalogue"), not even on a session
// opened while the real fleetd still held it. The check costs a socket lookup and a /proc scan (about
// 2 ms) per new connection, shared by the dials of a burst
// (listenerChecks); kept-alive connections are not checked again.
func (s *upstreamSet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil || s.mgr == nil {
		return c, err
	}
	if name, port := s.fleetAt(addr); name != "" {
		if err := s.checks.check(ctx, name, port, time.Now()); err != nil {
			c.Close()
			s.log.Warn("refused to forward to an unverified listener", "fleet", name, "addr", addr, "err", err)
			return nil, err
		}
	}
	return c, nil
}

// fleetAt names the fleet whose fleetd listens (or would listen) on addr
// (a loopback host:port) and returns the port: the one a running fleetd
// was started on (a reload may have changed the configured one since), or
// a fleet's configured port. "" when addr is no fleet's.
func (s *upstreamSet) fleetAt(addr string) (string, int) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil || !(host == "127.0.0.1" || host == "localhost" || host == "::1") {
		return "", 0
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0
	}
	// Where a fleetd runs first: a fleet removed from the file may still
	// run on a port the file now gives another fleet.
	s.mu.Lock()
	for name, ep := range s.running {
		if ep.port == port {
			s.mu.Unlock()
			return name, port
		}
	}
	s.mu.Unlock()
	cfg := s.mgr.Config()
	for _, name := range cfg.Names() {
		if f, err := cfg.Fleet(name); err == nil && f.Port == port {
			return name, port
		}
	}
	return "", 0
}

// listenerChecks runs the listener checks of the dials to fleetd ports,
// sharing one check among the dials it covers.
type listenerChecks struct {
	// verify checks fleet name's listener on port
	// (lifecycle.Manager.VerifyListenerOn; tests count checks through it).
	verify func(ctx context.Context, name string, port int) error

	mu sync.Mutex
	m  map[string]*listenerCheck // guarded by mu: fleet + ":" + port → its latest check
}

// listenerCheck is one verify of a fleet's listener, shared by the dials
// whose connection was established before it began.
type listenerCheck struct {
	began time.Time
	done  chan struct{} // closed once err is set
	err   error
}

// check verifies fleet name's listener on port for a connection
// established at connected. A check that began after that instant saw the
// listener as it was once the connection existed, which is what checking
// this connection on its own would see, so dials share checks: one check
// per connection made a burst of first calls cost one /proc/net/tcp read
// and fd scan each, slower the more sockets are open (80 concurrent first
// calls: 2 s on 2 cores). One check per fleet runs at a time; a dial
// established after the running one began waits for it to end and then
// joins (or starts) the next, so a burst costs two or three checks.
func (lc *listenerChecks) check(ctx context.Context, name string, port int, connected time.Time) error {
	key := name + ":" + strconv.Itoa(port)
	for {
		lc.mu.Lock()
		ch := lc.m[key]
		switch {
		case ch != nil && ch.began.After(connected):
			lc.mu.Unlock()
			select {
			case <-ch.done:
				return ch.err
			case <-ctx.Done():
				return ctx.Err()
			}
		case ch != nil && !ch.finished():
			lc.mu.Unlock()
			select {
			case <-ch.done: // then the next check, begun after connected
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch = &listenerCheck{began: time.Now(), done: make(chan struct{})}
		if lc.m == nil {
			lc.m = map[string]*listenerCheck{}
		}
		lc.m[key] = ch
		lc.mu.Unlock()
		// Not bound to this dial's context: other dials wait for it.
		ch.err = lc.verify(context.WithoutCancel(ctx), name, port)
		close(ch.done)
		return ch.err
	}
}

// finished reports whether the check has ended.
func (c *listenerCheck) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
