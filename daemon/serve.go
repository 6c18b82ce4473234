package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/dashboard"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/membership"
	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/notify"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/runner"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
)

// Options configure Serve.
type Options struct {
	// Config is the fleets.toml serve was started with (loaded, ports
	// allocated); its Path is what a reload re-reads.
	Config *registry.Config
	// Log receives the daemon's log (a detached daemon's stderr is
	// <state_dir>/fleetmgr.log).
	Log *slog.Logger
	// Version is fleetmgr's version: the MCP server's implementation
	// version and serve.json's.
	Version string
	// Policy is the HTTP exposure Remote.Policy allowed.
	Policy guard.HTTPPolicy
	// Hangup delivers SIGHUP (CatchHangup): each one is a reload. nil: no
	// reload by signal.
	Hangup <-chan os.Signal
	// Ready, when set, is told how start-up ended (a detached daemon's
	// pipe to its caller).
	Ready *Readiness
	// TakeOverHost is --take-over-host: federation provisioning may
	// re-provision this host id although the broker has it registered
	// with another key (docs/FEDERATION.md "Identity").
	TakeOverHost bool
}

// Serve runs `fleetmgr serve` until ctx ends: fleets keep running after
// it returns. In order, it
//   - takes the state dir's lock (LockStateDir; another serve holding it
//     is a *LockedError);
//   - refuses to run inside a herdr pane (a *Refusal: fleetd resolves
//     callers by pid, so a serve in a pane would be that pane's member on
//     every fleet, not primary);
//   - builds the proxy (package proxy) with the reloader and the status
//     watcher, and binds [manager] listen and [manager] mcp_socket;
//   - lists every running fleet's tools before it serves anything, so the
//     first tools/list a client gets is complete;
//   - serves HTTP (/mcp, /metrics, /healthz and the dashboard at /, every
//     route but /healthz behind the guard's middleware, see routes) and
//     the unix socket (guard.CheckConn per connection, Refuse for a refused
//     peer), and runs the proxy's catalogue upkeep, the supervisor
//     (lifecycle.Supervisor), the status watcher, the dashboard and the
//     SIGHUP reloads, each a goroutine Serve owns and stops;
//   - writes serve.json, then tells Ready it serves.
//
// When ctx ends it stops accepting, answers the lifecycle calls (start,
// stop, restart) still under way on the unix mount (bounded by
// start_timeout + stop_grace + 5 s) before it closes those sessions. On
// return serve.json and the socket file are removed and the lock is
// released.
func Serve(ctx context.Context, o Options) error {
	cfg, log := o.Config, o.Log
	release, err := LockStateDir(cfg.Manager.StateDir) // before anything else is touched
	if err != nil {
		return err
	}
	defer release()
	defer startCPUProfile(log)()
	m := NewManager(cfg, log)
	m.KeepReserve() // room for the fleets' records on a full disk (diskreserve)
	// The journal and notifications (attention.go): closed last, once
	// every part that appends has stopped.
	att := newAttention(cfg, m, log)
	defer att.close()
	g := NewGuard(cfg, m, cfg.Guard.AllowedUIDs, log, att.onDecision)
	if d := SelfInPane(ctx, cfg, m); !d.Allowed {
		return &serveapi.Refusal{Err: fmt.Errorf("refusing to serve from inside a herdr pane (%s).\n"+
			"fleetd would see fleetmgr as that pane's member instead of primary. Run it outside herdr, or detach it:\n"+
			"  fleetmgr serve --detach", d.Reason)}
	}

	proxy.TuneGC() // see proxy.DaemonGCPercent: the go-sdk's per-message garbage
	metrics := proxy.NewMetrics()
	metrics.WatchGuard(g)
	metrics.Registry().MustRegister(att.collector())
	// The readers of the fleets' lifecycle rows (the dashboard, the
	// catalogue upkeep, the status watcher's roots) read them when a state
	// file is written or the config reloaded (stateWatch), and poll them
	// only without inotify.
	sw, err := newStateWatch(cfg.Manager.StateDir, log)
	var dashChanges, catChanges, rootChanges, trackChanges, attChanges chan struct{}
	if err != nil {
		log.Warn("no inotify watch of the state directory; the dashboard polls the fleets' state every 250 ms, the catalogue and the status watcher every 2 s", "err", err)
		sw = nil
	} else {
		defer sw.fsw.Close() // Run closes it too; this when serve ends before it runs
		dashChanges, catChanges, rootChanges = sw.Subscribe(), sw.Subscribe(), sw.Subscribe()
		trackChanges, attChanges = sw.Subscribe(), sw.Subscribe()
	}
	statusOpt, runStatusWatch := statusWatcher(cfg, m, rootChanges, log)
	// Every report the collector makes, for whoever asked, feeds the
	// notifier and the dashboard (which exists only once the proxy does:
	// dashRef is set then), so a page opened later shows at first paint the
	// members serve knows (issue 24 item 16).
	var dashRef atomic.Pointer[dashboard.Server]
	statusOpt.Observe = func(rep *status.Report) {
		att.observe(rep)
		if d := dashRef.Load(); d != nil {
			d.Observe(rep)
		}
	}
	rl := newReloader(cfg, m, log)
	rl.done = att.reloaded
	if _, data, err := registry.LoadBytes(cfg.Path); err == nil {
		saveInForce(cfg, data) // the CLI's configuration while the file does not load
	}
	// The federation (federation/membership) exists before the proxy,
	// which shows its view; the proxy then serves its presence and peers'
	// requests.
	parts := &membership.Parts{}
	fh, err := membership.New(cfg, m.BrokerAdmin, parts, metrics.Registry(), o.TakeOverHost, att.fedRefused, log)
	if err != nil {
		return err
	}
	popt := proxy.Options{Manager: m, Log: log, Version: o.Version, Metrics: metrics, Status: statusOpt, Reload: rl.reload, ConfigProblem: rl.problem, OnCall: att.onCall, NotifyFailing: att.failingSinks}
	if catChanges != nil {
		popt.StateChanges = catChanges // never a typed nil
	}
	if fh != nil {
		popt.Remote = fh // never a typed nil in the interface
		att.remote = fh
	}
	p := proxy.New(popt)
	inflight := &lifecycleCalls{}
	p.Server().AddReceivingMiddleware(inflight.middleware, att.middleware)
	att.mcp = func() []*mcp.ServerSession { return slices.Collect(p.Server().Sessions()) }
	att.addTools(p.Server())
	parts.Source, parts.Executor, parts.Calls = p, att.executor(federation.ExecutorFunc(p.Execute)), p.CallHandler()
	rl.refresh = p.Kick
	var changes <-chan struct{}
	if sw != nil {
		changes = dashChanges
		rl.kick = sw.Poke
	}
	files, _ := statusOpt.Files.(*status.Watcher) // nil when serve walks: the page then waits for its samplings
	dash, err := newDashboard(m, p, metrics, changes, files, att, log)
	if err != nil {
		return err
	}
	notice := func(e notify.Event) {
		dash.Notify(dashboard.Notice{Kind: e.Kind, Fleet: e.Fleet, Member: e.Member, Host: e.Host, State: e.State, Text: e.Text, At: e.At})
	}
	att.onNotify.Store(&notice)
	dashRef.Store(dash)
	hs := &http.Server{Handler: routes(g, o.Policy, p, metrics, dash, cfg.Manager.FastPath), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		return withCaller(g.ConnContext(ctx, c), "") // the origin is the guard's decision
	}, ReadHeaderTimeout: 10 * time.Second}
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

	// serve's parts (package runner): started in this order, stopped in
	// the reverse one, so the listeners stop first and what they use
	// (federation, journal readers, status, supervision, the catalogue)
	// after them.
	run := &runner.Group{Log: log}
	run.Go("catalogue", p.Run)
	// herdr's push (docs/ARCHITECTURE.md "Status from herdr's push"): each
	// running fleet's herdr state followed from its events, verdicts
	// labelled in herdr's sidebar ([manager] herdr_labels, read at start).
	topt := status.TrackerOptions{Labels: cfg.Manager.HerdrLabels, Log: log, Refresh: 2 * time.Second}
	if sw != nil {
		topt.Changes, topt.Refresh = trackChanges, stateBackstop // never a typed nil
	}
	topt.OnVerdict = func(v status.VerdictChange) {
		log.Info("member verdict", "fleet", v.Fleet, "member", v.Member, "pane", v.PaneID, "from", string(v.From), "to", string(v.To), "reason", v.Reason)
		dash.VerdictChanged(v) // the member's "Last change", to the moment
		dash.Sample(v.Fleet)   // an open page's event stream shows it at once
		p.VerdictChanged()     // a cached status answer is not older than it
		att.onVerdict(v)       // journal and notifications
	}
	tracker := p.StatusCollector().NewTracker(topt)
	// Supervision (docs/ARCHITECTURE.md "Supervision"): one goroutine per
	// fleet, restarts with backoff, adoption of fleets started before
	// this serve.
	sup := lifecycle.NewSupervisor(m, log)
	// A start, restart or stop the last serve (or a CLI) was making when
	// it died is journalled before the supervisor takes the fleet over.
	att.noteInterrupted()
	// What the tracker hears from a herdr server (an answer, an event)
	// counts as a ping that answered: an active fleet's herdr is not
	// pinged as well (herdr_health_interval).
	sup.HeardFrom(tracker.Heard)
	run.Go("supervisor", sup.Run)
	runStatusWatch(run)
	run.Go("herdr push", tracker.Run)
	if sw != nil {
		run.Go("state watch", sw.Run)
		if fh != nil {
			// Other hosts' fleets and beats change the page's rows too.
			fc := fh.Changes()
			run.Go("peer changes", func(ctx context.Context) {
				for {
					select {
					case <-ctx.Done():
						return
					case <-fc:
						select { // the page's rows only
						case dashChanges <- struct{}{}:
						default:
						}
					}
				}
			})
		}
	}
	var attCh <-chan struct{}
	if attChanges != nil {
		attCh = attChanges
	}
	run.Go("attention", func(ctx context.Context) { att.run(ctx, attCh, p.StatusCollector()) })
	run.Go("dashboard", dash.Run)
	run.Go("reload on SIGHUP", func(ctx context.Context) { rl.onHangup(ctx, o.Hangup) })
	if fh != nil {
		// Presence, peers' requests, and this host announced offline when
		// its turn to stop comes (after the listeners').
		run.Go("federation", fh.Run)
		run.Go("peer verdicts", func(ctx context.Context) { sampleVerdicts(ctx, p.StatusCollector(), m, p.IsLocal) })
	}
	// The unix mount's sessions outlive its turn to stop until the
	// lifecycle calls they carry are answered (lifecycleCalls), bounded
	// as a start and a stop are.
	sessions, endSessions := context.WithCancel(context.WithoutCancel(ctx))
	defer endSessions()
	run.Add(runner.Part{Name: "unix socket",
		Run: func(ctx context.Context) error {
			serveUnix(ctx, sessions, ul, g, p, cfg.Manager.FastPath, log)
			return nil
		},
		Stop: func() {
			ul.Close()
			// A start, stop or restart under way through the unix mount is
			// answered first.
			if n := inflight.wait(cfg.Manager.StartTimeout.Duration + cfg.Manager.StopGrace.Duration + 5*time.Second); n > 0 {
				log.Warn("stopping with lifecycle calls unanswered", "calls", n)
			}
			endSessions()
		}})
	run.Add(runner.Part{Name: "http",
		Run: func(context.Context) error {
			if err := hs.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		Stop: func() {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = hs.Shutdown(sctx)
			scancel()
		}})

	info := serveapi.Info{PID: os.Getpid(), Listen: tl.Addr().String(), Socket: cfg.Manager.MCPSocket, Version: o.Version, Config: cfg.Path}
	if b, err := json.Marshal(info); err == nil {
		_ = os.WriteFile(serveapi.InfoPath(cfg), b, 0o600)
	}
	run.Started = func() {
		log.Info("fleetmgr serving", "http", "http://"+tl.Addr().String()+"/mcp", "dashboard", "http://"+tl.Addr().String()+"/",
			"socket", cfg.Manager.MCPSocket, "fleets", cfg.Names(), "pid", os.Getpid())
		o.Ready.OK()
	}
	run.Stopping = func() { log.Info("fleetmgr stopping; fleets keep running") }
	err = run.Run(ctx)
	if err != nil {
		log.Error("serve stopped", "err", err)
	}
	_ = os.Remove(serveapi.InfoPath(cfg))
	_ = os.Remove(cfg.Manager.MCPSocket)
	return err
}

// routes is the HTTP side of serve on [manager] listen:
//
//	/mcp          MCP streamable HTTP (the go-sdk's handler), with the
//	              proxy's fast path for forwarded tools/call in front
//	GET /metrics  Prometheus metrics (they name fleets)
//	GET /healthz  {"status":"ok","name":"fleetmgr","pid":N}, unguarded
//	/             the dashboard (package dashboard): the page, /api/…,
//	              /events
//
// Every route but /healthz is wrapped in the guard's middleware with the
// same policy, so a process in a herdr pane, a peer of another uid and a
// request with a foreign Host or Origin get 403 from all of them alike.
func routes(g *guard.Guard, pol guard.HTTPPolicy, p *proxy.Proxy, metrics *proxy.Metrics, dash http.Handler, fast bool) http.Handler {
	mcpHandler := p.HTTPHandler(mcp.StreamableHTTPOptions{Logger: p.SDKLogger()}, fast) // [manager] fast_path
	mux := http.NewServeMux()
	mux.Handle("/mcp", g.Middleware(withSessionID(mcpHandler), pol))
	mux.Handle("GET /metrics", g.Middleware(metrics.Handler(), pol))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "name": "fleetmgr", "pid": os.Getpid()})
	})
	mux.Handle("/", g.Middleware(dash, pol))
	return securityHeaders(mux)
}

// baselineCSP is the Content-Security-Policy of every response that is
// not the dashboard's (which sets its own, dashboard.ContentSecurityPolicy):
// MCP, /metrics, /healthz, 404s and the guard's refusals load nothing, run
// nothing and are never framed, whatever a browser makes of them.
const baselineCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// securityHeaders sets the headers every response of the HTTP listener
// carries before h runs (h may replace them: the dashboard sets its own
// CSP): no MIME sniffing, no framing, no referrer, readable by this origin
// only (docs/SECURITY.md "Network exposure").
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", baselineCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}
