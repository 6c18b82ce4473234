package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
)

// daemonInfo is <state_dir>/serve.json, written by a running serve.
type daemonInfo struct {
	PID     int    `json:"pid"`
	Listen  string `json:"listen"`
	Socket  string `json:"socket"`
	Log     string `json:"log,omitempty"`
	Version string `json:"version"`
	// Config is the fleets.toml the daemon reads (and re-reads on reload).
	Config string `json:"config,omitempty"`
}

func daemonInfoPath(cfg *registry.Config) string {
	return filepath.Join(cfg.Manager.StateDir, "serve.json")
}

func (a *app) serveCmd() *cobra.Command {
	var detach bool
	var stage, readyFD int
	var remote remoteOpts
	cmd := &cobra.Command{
		Use:   "serve",
		Args:  cobra.NoArgs,
		Short: "Run the MCP front door (HTTP on [manager] listen + unix socket), outside every herdr pane",
		Long: `Run fleetmgr's daemon: MCP streamable HTTP at http://<listen>/mcp and the same MCP
over the unix socket [manager] mcp_socket (used by 'fleetmgr mcp'). Every fleet's tools are
listed once with a required 'fleet' argument; fleetmgr_list/start/stop/restart/logs/status/reload
manage fleets.

Every connection is checked by the guard before any MCP message: callers inside any herdr
pane (or carrying herdr's environment markers, unless from an operator session), of
another uid, or that cannot be identified are refused and logged. fleetd trusts fleetmgr as primary, so serve itself must not run inside
a pane: started there it refuses, unless --detach (setsid + double fork, null stdio, log in
the state dir). Stopping serve leaves fleets running.

While it runs, serve supervises every fleet whose desired state is running: a fleetd that
exits or fails /healthz is restarted with exponential backoff, a dead herdr session is
started again first, too many restarts mark the fleet failed (restart_* / crash_loop_* /
health_* in fleets.toml). A new serve adopts the fleets it finds running without restarting
them.

One serve per state dir: serve holds an exclusive lock on <state_dir>/serve.lock for its
whole life, and a second serve on the same state dir (whatever its listen address and
socket) exits at once with status 1, naming the first one's pid.

SIGHUP (or 'fleetmgr reload', or the tool fleetmgr_reload) makes serve re-read fleets.toml:
added fleets can be started at once, removed fleets that still run stay listed and
stoppable (never restarted), changed settings of a running fleet apply at its next start.
An invalid file changes nothing; its problems are logged with file:line. SIGHUP never stops
serve. See 'fleetmgr reload --help'.`,
		Example: "  fleetmgr serve\n  fleetmgr serve --detach\n  kill -HUP <pid>   # re-read fleets.toml",
		RunE: func(cmd *cobra.Command, args []string) error {
			// First of all: from here on a SIGHUP asks for a reload and
			// never ends the process.
			hup, stopHup := catchHangup()
			defer stopHup()
			ready := readyPipe(stage, readyFD)
			err := func() error {
				cfg, err := a.load()
				if err != nil {
					return err
				}
				pol, err := remote.policy(cfg)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				if detach && stage == 0 {
					return a.detach(cmd.Context(), cfg, remote.args()...)
				}
				if stage == 1 {
					return a.detachStage1(cfg, ready, remote.args()...)
				}
				return a.serve(cmd.Context(), cfg, pol, hup, ready)
			}()
			if err != nil {
				ready.fail(err) // a detached daemon's caller hears why it did not come up
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&detach, "detach", false, "run as a detached daemon (setsid, double fork, null stdio, log to <state_dir>/fleetmgr.log) and return once it serves")
	cmd.Flags().IntVar(&stage, "daemon-stage", 0, "internal: detach stage")
	_ = cmd.Flags().MarkHidden("daemon-stage")
	cmd.Flags().IntVar(&readyFD, "daemon-ready-fd", 0, "internal: detach stages' readiness pipe")
	_ = cmd.Flags().MarkHidden("daemon-ready-fd")
	cmd.Flags().BoolVar(&remote.allow, "allow-remote", false, "allow [manager] listen on a non-loopback address; needs --token-file, and remote peers must send Authorization: Bearer <token>")
	cmd.Flags().StringVar(&remote.tokenFile, "token-file", "", "file holding the bearer token for remote peers (mode 0600, owned by you)")
	return cmd
}

// herdrSessions lists the sockets the guard must inspect: every fleet's
// herdr session (at the socket its state records, which a start under
// another environment may have put elsewhere, and where this environment
// would put it) and every running session herdr itself lists. The fleets
// are those of the config in force (a reload adds its new fleets at once)
// and those removed from it while they may still run.
func herdrSessions(m *lifecycle.Manager) func(context.Context) []guard.Session {
	confDir := herdr.ConfigDir(os.Getenv)
	return func(context.Context) []guard.Session {
		var out []guard.Session
		for _, n := range m.Names() {
			f, err := m.Fleet(n)
			if err != nil {
				continue
			}
			out = append(out, guard.Session{Name: f.HerdrSession, Socket: m.HerdrSocket(f)})
			if st, err := m.State(n); err == nil && st.HerdrSocket != "" && st.HerdrSocket != m.HerdrSocket(f) {
				out = append(out, guard.Session{Name: f.HerdrSession, Socket: st.HerdrSocket})
			}
		}
		if ss, err := herdr.ListSessions(confDir); err == nil {
			for _, s := range ss {
				if s.Running {
					out = append(out, guard.Session{Name: s.Name, Socket: s.SocketPath})
				}
			}
		}
		return out
	}
}

// newGuard builds the guard of cfg's [guard] table; uids are the peer uids
// it lets through the uid rule (the daemon: allowed_uids).
func newGuard(cfg *registry.Config, m *lifecycle.Manager, uids []int, log *slog.Logger) *guard.Guard {
	confDir := herdr.ConfigDir(os.Getenv)
	var ops []guard.Session
	for _, s := range cfg.Guard.OperatorSessions {
		ops = append(ops, guard.Session{Name: s, Socket: herdr.SocketPath(confDir, s)})
	}
	// herdr servers are also recognised by executable, wherever their
	// sockets live: herdr_bin as configured and as resolved.
	exes := []string{filepath.Base(cfg.Manager.HerdrBin)}
	if p, err := exec.LookPath(cfg.Manager.HerdrBin); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			exes = append(exes, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				exes = append(exes, real, filepath.Base(real))
			}
		}
	}
	return guard.New(guard.Options{
		AllowedUIDs:      uids,
		OperatorSessions: ops,
		Sessions:         herdrSessions(m),
		HerdrExes:        exes,
		Log:              log,
	})
}

func (a *app) serve(ctx context.Context, cfg *registry.Config, pol guard.HTTPPolicy, hup <-chan os.Signal, ready *readiness) error {
	// One serve per state dir (before anything else is touched): two
	// would both supervise every fleet.
	release, err := lockStateDir(cfg.Manager.StateDir)
	if err != nil {
		return err
	}
	defer release()
	log := a.logger(slog.LevelInfo)
	m := a.manager(cfg, log)
	g := newGuard(cfg, m, cfg.Guard.AllowedUIDs, log)

	// fleetd resolves callers by pid: a serve inside a pane would be that
	// pane's member on every fleet, not primary.
	if d := a.selfInPane(ctx, cfg, m); !d.Allowed {
		return &exitError{code: 3, err: fmt.Errorf("refusing to serve from inside a herdr pane (%s).\n"+
			"fleetd would see fleetmgr as that pane's member instead of primary. Run it outside herdr, or detach it:\n"+
			"  fleetmgr serve --detach", d.Reason)}
	}

	proxy.TuneGC() // see proxy.DaemonGCPercent: the go-sdk's per-message garbage
	metrics := proxy.NewMetrics()
	metrics.WatchGuard(g)
	statusOpt, runStatusWatch := statusWatcher(cfg, m, log)
	rl := newReloader(cfg, m, log)
	p := proxy.New(proxy.Options{Manager: m, Log: log, Version: version, Metrics: metrics, Status: statusOpt, Reload: rl.reload})
	rl.kick = p.Kick
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.Server() },
		&mcp.StreamableHTTPOptions{Logger: p.SDKLogger()})
	mux := http.NewServeMux()
	mux.Handle("/mcp", g.Middleware(p.HTTPHandler(mcpHandler), pol)) // fast path for forwarded tools/call
	mux.Handle("GET /metrics", g.Middleware(metrics.Handler(), pol)) // names fleets: guarded like /mcp
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "name": "fleetmgr", "pid": os.Getpid()})
	})
	hs := &http.Server{Handler: mux, ConnContext: g.ConnContext, ReadHeaderTimeout: 10 * time.Second}
	tl, err := net.Listen("tcp", cfg.Manager.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s ([manager] listen in %s): %w; is another fleetmgr serve running? (fleetmgr list shows its state dir)", cfg.Manager.Listen, cfg.Path, err)
	}
	ul, err := listenUnix(cfg.Manager.MCPSocket)
	if err != nil {
		tl.Close()
		return err
	}

	// The listeners are bound but not served yet: the first tools/list any
	// client gets (and /healthz) must already hold every running fleet's
	// tools, not an empty catalogue filled in a moment later.
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := p.Refresh(rctx); err != nil {
		log.Warn("initial catalogue incomplete", "err", err)
	}
	rcancel()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	// Supervision (issue #4): one goroutine per fleet, restarts with
	// backoff, adoption of fleets started before this serve.
	wg.Go(func() { lifecycle.NewSupervisor(m, log).Run(ctx) })
	runStatusWatch(ctx, &wg)
	wg.Go(func() {
		if err := hs.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
			cancel()
		}
	})
	wg.Go(func() { serveUnix(ctx, ul, g, p, log) })
	wg.Go(func() { rl.onHangup(ctx, hup) })

	info := daemonInfo{PID: os.Getpid(), Listen: tl.Addr().String(), Socket: cfg.Manager.MCPSocket, Version: version, Config: cfg.Path}
	if b, err := json.Marshal(info); err == nil {
		_ = os.WriteFile(daemonInfoPath(cfg), b, 0o600)
	}
	log.Info("fleetmgr serving", "http", "http://"+tl.Addr().String()+"/mcp", "socket", cfg.Manager.MCPSocket, "fleets", cfg.Names(), "pid", os.Getpid())
	ready.ok()

	<-ctx.Done()
	log.Info("fleetmgr stopping; fleets keep running")
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hs.Shutdown(sctx)
	scancel()
	ul.Close()
	wg.Wait()
	_ = os.Remove(daemonInfoPath(cfg))
	_ = os.Remove(cfg.Manager.MCPSocket)
	return nil
}

// listenUnix listens on path (mode 0600), replacing a stale socket file but
// never one a live daemon still answers on.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another fleetmgr serve already answers on %s", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on unix socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serveUnix serves one MCP session (newline-delimited JSON-RPC) per unix
// connection, after the guard has admitted its peer (SO_PEERCRED). A
// refused peer gets one JSON-RPC error line, then the socket is closed.
func serveUnix(ctx context.Context, l net.Listener, g *guard.Guard, p *proxy.Proxy, log *slog.Logger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Error("unix accept", "err", err)
			}
			return
		}
		wg.Go(func() {
			d := g.CheckConn(ctx, c)
			if !d.Allowed {
				refuseUnix(c, d)
				return
			}
			ss, err := p.Server().Connect(ctx, p.SocketTransport(c), nil) // fast path for forwarded tools/call
			if err != nil {
				log.Warn("unix session", "err", err)
				c.Close()
				return
			}
			done := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
					ss.Close()
				case <-done:
				}
			}()
			_ = ss.Wait()
			close(done)
		})
	}
}

// refuseUnix answers a refused unix-socket peer and closes the connection.
// Each request the peer sends within a second (at most refusalAnswers of
// them) is answered with a JSON-RPC error (code -32001, the guard's
// reason), so an MCP client reports "calling initialize: <reason>" instead
// of a bare EOF, also one that first tries server/discover and falls back
// to initialize; a peer that sends no request gets one error with a null
// id.
func refuseUnix(c net.Conn, d guard.Decision) {
	defer c.Close()
	answer := func(id json.RawMessage) bool {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": refusalCode, "message": d.Error()}})
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.Write(append(b, '\n'))
		return err == nil
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	// A line is read whole up to the bound (an initialize with a large
	// clientInfo or _meta is still answered with its id).
	br := bufio.NewReaderSize(io.LimitReader(c, refusalReadMax), refusalReadMax)
	answered := 0
	for answered < refusalAnswers {
		line, err := br.ReadSlice('\n')
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &req) == nil && len(req.ID) > 0 && string(req.ID) != "null" {
			if !answer(req.ID) {
				return
			}
			answered++
		}
		if err != nil {
			break
		}
	}
	if answered == 0 {
		answer(json.RawMessage("null"))
	}
}

// refusalAnswers bounds the requests refuseUnix answers, and
// refusalReadMax the bytes it reads from a refused peer.
const (
	refusalAnswers = 4
	refusalReadMax = 64 << 10
)

// detach starts serve as a daemon: this process → stage 1 (new session)
// → stage 2 (the daemon, reparented to init when stage 1 exits), with null
// stdio and its log in the state dir. It returns once the daemon serves,
// or with the daemon's own error (another serve holds the state dir, say),
// which the daemon reports on a readiness pipe (ready.go).
func (a *app) detach(ctx context.Context, cfg *registry.Config, extra ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	defer pr.Close()
	c := exec.Command(self, append([]string{"serve", "--config", cfg.Path, "--daemon-stage", "1", "--daemon-ready-fd", "3"}, extra...)...)
	c.Env = herdr.ScrubEnv(os.Environ())
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c.ExtraFiles = []*os.File{pw} // fd 3 in stage 1, handed on to the daemon
	err = c.Run()
	pw.Close() // from now on only the daemon holds the write end
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	logPath := filepath.Join(cfg.Manager.StateDir, "fleetmgr.log")
	pid, err := awaitReady(ctx, pr, 15*time.Second)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w; see %s", err, logPath)
	}
	var info daemonInfo
	if b, err := os.ReadFile(daemonInfoPath(cfg)); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	fmt.Fprintf(a.stdout, "fleetmgr serve running (pid %d): http://%s/mcp and %s; log: %s\n", pid, info.Listen, cfg.Manager.MCPSocket, logPath)
	return nil
}

// detachStage1 runs in the new session: it starts the daemon and exits at
// once, so the daemon is nobody's child but init's. The readiness pipe
// goes on to the daemon as its fd 3.
func (a *app) detachStage1(cfg *registry.Config, ready *readiness, extra ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Manager.StateDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Manager.StateDir, "fleetmgr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"serve", "--config", cfg.Path, "--daemon-stage", "2"}
	if ready.f != nil {
		args = append(args, "--daemon-ready-fd", "3")
	}
	c := exec.Command(self, append(args, extra...)...)
	if ready.f != nil {
		c.ExtraFiles = []*os.File{ready.f}
	}
	c.Env = herdr.ScrubEnv(os.Environ())
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return err
	}
	if ready.f != nil {
		ready.f.Close() // the daemon has its own copy
		ready.f = nil
	}
	return c.Process.Release()
}
