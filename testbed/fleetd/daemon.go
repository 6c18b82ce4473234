package fleetd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPPath is where the stand-in serves MCP (streamable HTTP). Real fleetd's
// path is not known (docs/fleetd.md); fleetmgr makes it configurable.
const MCPPath = "/mcp"

// HealthPath is the health endpoint: GET answers {"status":"ok","name":NAME}.
const HealthPath = "/healthz"

// Caller roles, as fleetd's fleet_whoami names them.
const (
	RolePrimary = "primary"
	RoleLead    = "lead"
	RoleWorker  = "worker"
)

// herdrTimeout bounds each herdr call the daemon makes.
const herdrTimeout = 3 * time.Second

// shutdownGrace bounds graceful shutdown; long-lived requests (SSE streams,
// slow tool calls) are cancelled after shutdownStreamGrace.
const (
	shutdownGrace       = 5 * time.Second
	shutdownStreamGrace = time.Second
)

// Header names the daemon sets on every /mcp request before the MCP handler
// sees it, carrying the connection's resolved peer. Client-supplied values
// are always removed first, so they cannot be forged.
const (
	headerPeerPID = "X-Fleetd-Standin-Peer-Pid"
	headerPeerErr = "X-Fleetd-Standin-Peer-Error"
)

// Daemon is one running stand-in fleetd. Create it with New, then call Run
// (or Listen, Boot and Serve separately). A Daemon serves once.
type Daemon struct {
	cfg   Config
	log   *log.Logger
	herdr *herdr.Client
	nonce string
	mcp   *mcp.Server

	ln net.Listener

	// opMu serialises operations that change herdr state (spawn, stop, reap,
	// lead launch), so two spawns cannot both create the fleet workspace.
	opMu sync.Mutex

	mu      sync.Mutex // guards members, order, added
	members map[string]*member
	order   []string
	added   map[string]bool

	eventsMu sync.Mutex
	execs    executions // tools/call executions by request id (executions.go)

	bus *bus // the broker connection (bus.go); nil without a broker URI
}

// member is one spawned member in the roster.
type member struct {
	ID, PaneID, TabID, WorkspaceID, Worktree, Profile string
}

// New checks cfg and returns a Daemon that logs to logw (one line per event,
// prefixed "fleetd stand-in: "). It draws the per-process nonce used in
// member tab labels ("member-<nonce>-<id>").
func New(cfg Config, logw io.Writer) (*Daemon, error) {
	if cfg.Name == "" {
		return nil, errors.New("fleetd stand-in: fleet name is required")
	}
	if cfg.HerdrSocket == "" {
		return nil, errors.New("fleetd stand-in: herdr socket is required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("fleetd stand-in: port %d out of range", cfg.Port)
	}
	if cfg.LeadTab == "" {
		cfg.LeadTab = DefaultLeadTab
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("fleetd stand-in: nonce: %w", err)
	}
	d := &Daemon{
		cfg:     cfg,
		log:     log.New(logw, "fleetd stand-in: ", 0),
		herdr:   &herdr.Client{Socket: cfg.HerdrSocket, Timeout: herdrTimeout},
		nonce:   hex.EncodeToString(b[:]),
		members: map[string]*member{},
		added:   map[string]bool{},
	}
	d.mcp = d.newMCPServer()
	return d, nil
}

// Nonce returns this process's random nonce (8 hex digits).
func (d *Daemon) Nonce() string { return d.nonce }

// Listen binds 127.0.0.1:Port (Port 0: an ephemeral port). Run calls it if
// it has not been called.
func (d *Daemon) Listen() error {
	if d.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(d.cfg.Port)))
	if err != nil {
		return fmt.Errorf("fleetd stand-in: listen: %w", err)
	}
	d.ln = ln
	return nil
}

// Addr returns the bound address; the zero AddrPort before Listen.
func (d *Daemon) Addr() netip.AddrPort {
	if d.ln == nil {
		return netip.AddrPort{}
	}
	return d.ln.Addr().(*net.TCPAddr).AddrPort()
}

// Run listens, performs the startup duties (Boot), logs
// "fleetd stand-in: fleet=<name> listening on 127.0.0.1:<port> pid=<pid>"
// and serves until ctx is done, then shuts down gracefully. It returns nil
// after a shutdown caused by ctx.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Listen(); err != nil {
		return err
	}
	if err := d.connectBus(ctx); err != nil {
		_ = d.ln.Close()
		return err
	}
	defer d.closeBus()
	d.Boot(ctx)
	return d.Serve(ctx)
}

// Boot performs fleetd's startup duties against herdr, logging (never
// failing on) herdr errors: first the orphan reap (every tab labelled
// "member-<nonce>-…" with a nonce other than this process's is closed), then
// lead auto-launch if enabled and no tab carries the lead label.
func (d *Daemon) Boot(ctx context.Context) {
	d.log.Printf("fleet=%s herdr socket %s (session %q) nonce %s", d.cfg.Name, d.cfg.HerdrSocket, d.cfg.HerdrSession, d.nonce)
	if n, err := d.reapOrphans(ctx); err != nil {
		d.log.Printf("orphan reap failed after %d tabs: %v", n, err)
	}
	if !d.cfg.LeadLaunch {
		d.log.Printf("lead auto-launch disabled")
		return
	}
	if err := d.launchLead(ctx); err != nil {
		d.log.Printf("lead auto-launch failed: %v", err)
	}
}

// Handler returns the HTTP handler: /healthz and /mcp. Requests that did not
// arrive through Serve have no resolved peer and are treated as from an
// unresolvable pid (primary).
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, "{\"status\":\"ok\",\"name\":%q}\n", d.cfg.Name)
	})
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return d.mcp },
		&mcp.StreamableHTTPOptions{PropagateRequestCancellation: true, JSONResponse: d.cfg.JSONResponse})
	mux.Handle(MCPPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(headerPeerPID)
		r.Header.Del(headerPeerErr)
		noteRequestID(r)
		if p, ok := r.Context().Value(peerKey{}).(*peer); ok {
			if p.err != nil {
				r.Header.Set(headerPeerErr, p.err.Error())
			} else {
				r.Header.Set(headerPeerPID, strconv.Itoa(p.pid))
			}
		} else {
			r.Header.Set(headerPeerErr, "request did not arrive through the daemon's listener")
		}
		mh.ServeHTTP(w, r)
	}))
	return mux
}

// peerKey keys the connection's *peer in request contexts.
type peerKey struct{}

// peer is the process at the other end of one HTTP connection.
type peer struct {
	pid    int
	err    error
	remote netip.AddrPort
}

// Serve serves HTTP on the bound listener until ctx is done, then shuts
// down: it stops accepting, lets requests in flight finish for up to 5 s
// (long-lived ones are cancelled after 1 s) and returns. Each connection's
// peer pid is resolved once, when it is accepted (http.Server.ConnContext),
// as fleetd's CallerResolver does.
func (d *Daemon) Serve(ctx context.Context) error {
	if d.ln == nil {
		return errors.New("fleetd stand-in: Serve before Listen")
	}
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(cctx context.Context, c net.Conn) context.Context {
			return context.WithValue(cctx, peerKey{}, d.resolvePeer(c))
		},
		ErrorLog: d.log,
	}
	d.log.Printf("fleet=%s listening on %s pid=%d", d.cfg.Name, d.Addr(), os.Getpid())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(d.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fleetd stand-in: serve: %w", err)
	case <-ctx.Done():
	}
	d.log.Printf("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	streams := time.AfterFunc(shutdownStreamGrace, cancelBase)
	defer streams.Stop()
	err := srv.Shutdown(sctx)
	<-errc // Serve returns ErrServerClosed once Shutdown starts
	if err != nil {
		// Connections still open after the grace (a client's SSE stream
		// that outlived the stream grace) are closed; that is still an
		// orderly stop, as a daemon's SIGTERM should be.
		_ = srv.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("fleetd stand-in: shutdown: %w", err)
		}
		d.log.Printf("closed connections still open after %s", shutdownGrace)
	}
	d.log.Printf("stopped")
	return nil
}

// resolvePeer finds the pid at the other end of c from /proc/net/tcp.
func (d *Daemon) resolvePeer(c net.Conn) *peer {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return &peer{err: fmt.Errorf("not a TCP connection (%s)", c.RemoteAddr())}
	}
	p := &peer{remote: ra.AddrPort()}
	p.pid, _, p.err = procfs.TCPPeerPID(ra.AddrPort(), la.AddrPort())
	if p.err != nil {
		d.log.Printf("peer of connection from %s unresolved: %v", ra, p.err)
	}
	return p
}

// event appends line to the log and, if configured, to the events file.
func (d *Daemon) event(line string) {
	d.log.Print(line)
	if d.cfg.EventsFile == "" {
		return
	}
	d.eventsMu.Lock()
	defer d.eventsMu.Unlock()
	f, err := os.OpenFile(d.cfg.EventsFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		d.log.Printf("events file: %v", err)
		return
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		d.log.Printf("events file: %v", err)
	}
	if err := f.Close(); err != nil {
		d.log.Printf("events file: %v", err)
	}
}
