// Package proxy is fleetmgr's MCP front door: one mcp.Server that re-exposes
// every fleet's tools once, each with a required "fleet" argument, forwards
// calls to the chosen fleet's fleetd over an upstream session, and adds the
// manager's own fleetmgr_* tools. DESIGN.md "The merged catalogue".
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

// ManagerToolPrefix starts the name of every tool fleetmgr itself offers;
// upstream tools with this prefix are not exposed.
const ManagerToolPrefix = "fleetmgr_"

// Options configure a Proxy.
type Options struct {
	Manager *lifecycle.Manager
	Log     *slog.Logger
	Version string
	// RefreshEvery is how often Run re-reads fleet states and re-lists the
	// tools of fleets whose state changed (default 2 s).
	RefreshEvery time.Duration
	// Status configures fleetmgr_status (file evidence, broker probe);
	// nil means defaults (walking). Manager and Roster are filled in.
	Status *status.Options
	// Metrics, if set, receives one observation per forwarded call and
	// reports fleet phases and upstream sessions at scrape time.
	Metrics *Metrics
	// Reload, if set, re-reads fleets.toml and swaps it into Manager
	// (the serve daemon's reload): the tool fleetmgr_reload calls it, and
	// a manager tool naming a fleet the config does not define calls it
	// with ifChanged (only when the file changed since it was last read)
	// before answering "unknown fleet". nil: no fleetmgr_reload tool.
	Reload func(ctx context.Context, ifChanged bool) (*lifecycle.ReloadReport, error)
}

// Proxy is the MCP front door. Create with New, serve Server() over any
// transport, and run Run for background catalogue upkeep.
type Proxy struct {
	opt    Options
	log    *slog.Logger
	server *mcp.Server
	client *mcp.Client
	httpc  *http.Client

	mu         sync.Mutex
	ups        map[string]*upstream
	running    map[string]endpoint // fleet → where its running fleetd was started (refresh)
	phases     map[string]lifecycle.Phase
	gens       map[string]string // fleet → phase + fleetd pid and start time, as last listed
	registered map[string][]byte // exposed tool name → JSON of what was registered
	cat        atomic.Pointer[Catalogue]
	refreshMu  sync.Mutex
	kick       chan struct{}

	// verifyListener checks fleet name's listener on port (nil:
	// Manager.VerifyListenerOn; tests count checks through it).
	verifyListener func(ctx context.Context, name string, port int) error
	checkMu        sync.Mutex
	checks         map[string]*listenerCheck // fleet + port → its latest listener check

	fast     fastCalls // calls the HTTP fast path is answering
	seq      atomic.Uint64
	progress sync.Map // our upstream progress token (string) → *progressTarget

	statusCol *status.Collector // fleetmgr_status's; set by New, read only after
}

// progressTarget is where progress for one forwarded call goes: the
// caller's session, its own token, and the caller's request context (the
// go-sdk routes a notification sent with a request's context onto that
// request's response stream, which every client reads).
type progressTarget struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	emit  func(*mcp.ProgressNotificationParams) // the fast path's sink, used instead of ss

	mu       sync.Mutex
	relayed  int           // notifications relayed out of band (by the SDK session) so far
	finished bool          // progress reached its total
	final    chan struct{} // closed when finished
}

// progressSettle bounds how long a finished call waits for progress the
// upstream sent just before its result: the SDK hands notifications to
// their handler asynchronously, so the last one may still be in flight
// when the result arrives.
const progressSettle = 50 * time.Millisecond

// New builds a Proxy over the fleets of opt.Manager.
func New(opt Options) *Proxy {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.RefreshEvery <= 0 {
		opt.RefreshEvery = 2 * time.Second
	}
	p := &Proxy{
		opt:        opt,
		log:        opt.Log,
		ups:        map[string]*upstream{},
		phases:     map[string]lifecycle.Phase{},
		gens:       map[string]string{},
		registered: map[string][]byte{},
		kick:       make(chan struct{}, 1),
	}
	p.httpc = &http.Client{Transport: &http.Transport{
		DialContext:         p.dialUpstream,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}
	p.cat.Store(&Catalogue{Tools: map[string]*MergedTool{}})
	p.server = mcp.NewServer(&mcp.Implementation{Name: "fleetmgr", Version: opt.Version}, &mcp.ServerOptions{
		Instructions: "fleetmgr fronts several coding-agent fleets. Every fleet tool takes a required `fleet` argument naming the fleet to call; fleetmgr_list shows the fleets and their states.",
		Logger:       p.SDKLogger(),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	p.client = mcp.NewClient(&mcp.Implementation{Name: "fleetmgr", Version: opt.Version}, &mcp.ClientOptions{
		Capabilities:                &mcp.ClientCapabilities{},
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { p.Kick() },
		ProgressNotificationHandler: p.relayProgress,
	})
	p.addManagerTools()
	p.addSupervisionTools()
	p.addReloadTool() // fleetmgr_reload (reload_tool.go), with opt.Reload
	p.addStatusTool() // fleetmgr_status (status_tool.go, issue #7)
	if opt.Metrics != nil {
		opt.Metrics.state.proxy = p
	}
	return p
}

// Connected reports whether fleetmgr holds an open MCP session to fleet
// name's fleetd right now.
func (p *Proxy) Connected(name string) bool {
	p.mu.Lock()
	u := p.ups[name]
	p.mu.Unlock()
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cs != nil
}

// SDKLogger is the logger to give the go-sdk (server, transports): opt.Log
// raised to Warn, because the SDK logs every session connect/disconnect at
// Info, one line per client session, which drowns the daemon's own log.
func (p *Proxy) SDKLogger() *slog.Logger {
	return slog.New(minLevel{p.log.Handler(), slog.LevelWarn})
}

// minLevel is a slog.Handler that drops records below level.
type minLevel struct {
	slog.Handler
	level slog.Level
}

// Enabled implements slog.Handler: records below h.level are dropped.
func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.level}
}

// WithGroup implements slog.Handler.
func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.level}
}

// Server is the MCP server to serve over a transport.
func (p *Proxy) Server() *mcp.Server { return p.server }

// Catalogue returns the current merged catalogue.
func (p *Proxy) Catalogue() *Catalogue { return p.cat.Load() }

// Kick asks Run to refresh the catalogue now (e.g. an upstream sent
// notifications/tools/list_changed, or a fleet was started).
func (p *Proxy) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run keeps the catalogue current until ctx ends: at once, then whenever
// kicked, and every RefreshEvery when a fleet's phase changed. It closes all
// upstream sessions on return.
func (p *Proxy) Run(ctx context.Context) {
	defer p.closeUpstreams()
	t := time.NewTicker(p.opt.RefreshEvery)
	defer t.Stop()
	force := true
	for {
		if err := p.refresh(ctx, force); err != nil && ctx.Err() == nil {
			p.log.Warn("catalogue refresh", "err", err)
		}
		force = false
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
			force = true
		case <-t.C:
		}
	}
}

// Refresh re-reads every fleet's state and tools and updates the exposed
// tool set (clients are notified with tools/list_changed).
func (p *Proxy) Refresh(ctx context.Context) error { return p.refresh(ctx, true) }

func (p *Proxy) closeUpstreams() {
	p.mu.Lock()
	ups := p.ups
	p.ups = map[string]*upstream{}
	p.mu.Unlock()
	for _, u := range ups {
		u.close()
	}
}

func (p *Proxy) catalogueCache(name string) string {
	return filepath.Join(p.opt.Manager.FleetDir(name), "catalogue.json")
}

// upstreamFor returns (creating if needed) the upstream of fleet name.
// dialUpstream opens a TCP connection to a fleetd (every connection of the
// upstream sessions and of the hot path goes through it). When addr is the
// loopback port of a configured fleet, the process listening there must
// be the fleetd fleetmgr started for it (lifecycle.Manager.VerifyListener)
// before the connection is handed out, so nothing is ever written to an
// impostor that took a dead fleetd's port (red-team S5), not even on a
// session opened while the real fleetd still held it. The check costs a
// socket lookup and a /proc scan (about 2 ms) per new connection; kept-alive
// connections are not checked again.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil || p.opt.Manager == nil {
		return c, err
	}
	if name, port := p.fleetAt(addr); name != "" {
		if err := p.checkListener(ctx, name, port, time.Now()); err != nil {
			c.Close()
			p.log.Warn("refused to forward to an unverified listener", "fleet", name, "addr", addr, "err", err)
			return nil, err
		}
	}
	return c, nil
}

// listenerCheck is one VerifyListener of a fleet, shared by the dials
// whose connection was established before it began.
type listenerCheck struct {
	began time.Time
	done  chan struct{}
	err   error
}

// checkListener verifies fleet name's listener on port for a connection
// established at connected. A check that began after that instant saw the
// listener as it was once the connection existed, which is what checking
// this connection on its own would see, so dials share checks: one check
// per connection made a burst of first calls cost one /proc/net/tcp read
// and fd scan each, slower the more sockets are open (80 concurrent first
// calls: 2 s on 2 cores). One check per fleet runs at a time; a dial
// established after the running one began waits for it to end and then
// joins (or starts) the next, so a burst costs two or three checks.
func (p *Proxy) checkListener(ctx context.Context, name string, port int, connected time.Time) error {
	key := name + ":" + strconv.Itoa(port)
	for {
		p.checkMu.Lock()
		ch := p.checks[key]
		switch {
		case ch != nil && ch.began.After(connected):
			p.checkMu.Unlock()
			select {
			case <-ch.done:
				return ch.err
			case <-ctx.Done():
				return ctx.Err()
			}
		case ch != nil && !ch.finished():
			p.checkMu.Unlock()
			select {
			case <-ch.done: // then the next check, begun after connected
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch = &listenerCheck{began: time.Now(), done: make(chan struct{})}
		if p.checks == nil {
			p.checks = map[string]*listenerCheck{}
		}
		p.checks[key] = ch
		p.checkMu.Unlock()
		verify := p.opt.Manager.VerifyListenerOn
		if p.verifyListener != nil {
			verify = p.verifyListener
		}
		// Not bound to this dial's context: other dials wait for it.
		ch.err = verify(context.WithoutCancel(ctx), name, port)
		close(ch.done)
		return ch.err
	}
}

func (c *listenerCheck) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// fleetAt names the fleet whose fleetd listens (or would listen) on addr
// (a loopback host:port) and returns the port: a fleet's configured port,
// or the one its running fleetd was started on (a reload may have changed
// the configured one since). "" when addr is no fleet's.
func (p *Proxy) fleetAt(addr string) (string, int) {
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
	p.mu.Lock()
	for name, ep := range p.running {
		if ep.port == port {
			p.mu.Unlock()
			return name, port
		}
	}
	p.mu.Unlock()
	cfg := p.opt.Manager.Config()
	for _, name := range cfg.Names() {
		if f, err := cfg.Fleet(name); err == nil && f.Port == port {
			return name, port
		}
	}
	return "", 0
}

// endpoint is where a fleet's fleetd serves MCP.
type endpoint struct {
	port int
	path string
}

// upstreamFor returns (creating if needed) the upstream of fleet name: at
// the endpoint its running fleetd was started with (the last refresh saw
// it), else at the one the config gives. A fleet removed from the config
// while it runs is still reached (lifecycle.Manager.Fleet).
func (p *Proxy) upstreamFor(name string) (*upstream, error) {
	f, err := p.opt.Manager.Fleet(name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ep, ok := p.running[name]
	if !ok {
		ep = endpoint{f.Port, f.MCPPath}
	}
	u := p.ups[name]
	if u == nil || u.endpoint != endpointURL(ep.port, ep.path) {
		if u != nil {
			go u.close()
		}
		u = newUpstream(name, ep.port, ep.path, p.client, p.httpc)
		u.h1.dial = p.dialUpstream
		u.log = p.log
		p.ups[name] = u
	}
	return u, nil
}

func (p *Proxy) refresh(ctx context.Context, force bool) error {
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	names := p.opt.Manager.Names() // configured, and removed from the file while running
	changed := force
	phases := map[string]lifecycle.Phase{}
	gens := map[string]string{}
	running := map[string]endpoint{}
	for _, name := range names {
		st, err := p.opt.Manager.State(name)
		if err != nil {
			return err
		}
		phases[name] = st.Shown.Phase
		if st.Shown.Phase == lifecycle.PhaseRunning && st.Port != 0 {
			// Where it runs, which a reload that changed its port or
			// mcp_path does not move until its next start.
			ep := endpoint{port: st.Port}
			if st.Launch != nil {
				ep.path = st.Launch.MCPPath
			}
			if f, err := p.opt.Manager.Fleet(name); ep.path == "" && err == nil {
				ep.path = f.MCPPath
			}
			running[name] = ep
		}
		// A fleetd restarted between two looks (the supervisor is quick)
		// shows the same phase but another process, whose tools may
		// differ: re-list it too.
		gen := string(st.Shown.Phase)
		if st.Fleetd != nil {
			gen += fmt.Sprintf("/%d/%d", st.Fleetd.PID, st.Fleetd.StartTime)
		}
		gens[name] = gen
		p.mu.Lock()
		if p.gens[name] != gen {
			changed = true
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.running = running
	if len(p.gens) != len(gens) {
		changed = true // a fleet was added to or removed from the config
	}
	var gone []*upstream
	for name, u := range p.ups {
		if _, ok := gens[name]; !ok {
			gone = append(gone, u)
			delete(p.ups, name)
		}
	}
	p.mu.Unlock()
	for _, u := range gone {
		go u.close()
	}
	if !changed {
		return nil
	}
	perFleet := map[string][]*mcp.Tool{}
	var errs []error
	for _, name := range names {
		var tools []*mcp.Tool
		if phases[name] == lifecycle.PhaseRunning {
			u, err := p.upstreamFor(name)
			if err == nil {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				tools, err = u.listTools(lctx)
				cancel()
			}
			if err == nil {
				if b, merr := json.Marshal(tools); merr == nil {
					if werr := os.WriteFile(p.catalogueCache(name), b, 0o600); werr != nil {
						p.log.Warn("cache catalogue", "fleet", name, "err", werr)
					}
				}
			} else {
				errs = append(errs, err)
				tools = nil
			}
		}
		if tools == nil {
			// A fleet that is down keeps its last known tools listed.
			if b, err := os.ReadFile(p.catalogueCache(name)); err == nil {
				_ = json.Unmarshal(b, &tools)
			}
		}
		if tools != nil {
			perFleet[name] = tools
		}
	}
	cat := Merge(perFleet, func(n string) bool { return strings.HasPrefix(n, ManagerToolPrefix) })
	cat.LogNotes(p.log)
	p.apply(cat)
	p.mu.Lock()
	p.phases = phases
	p.gens = gens
	p.mu.Unlock()
	return errors.Join(errs...)
}

// apply registers the catalogue's tools with the MCP server, removing tools
// that vanished and re-adding only those whose definition changed, so
// clients get tools/list_changed exactly when the set changes.
func (p *Proxy) apply(cat *Catalogue) {
	p.cat.Store(cat)
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for name := range p.registered {
		if _, ok := cat.Tools[name]; !ok {
			gone = append(gone, name)
			delete(p.registered, name)
		}
	}
	if len(gone) > 0 {
		p.server.RemoveTools(gone...)
	}
	for name, mt := range cat.Tools {
		b, _ := json.Marshal(mt.Tool)
		if old, ok := p.registered[name]; ok && string(old) == string(b) {
			continue
		}
		p.registered[name] = b
		p.server.AddTool(mt.Tool, p.forward(name))
	}
}

// forward returns the handler of one re-exposed tool.
func (p *Proxy) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		t0 := time.Now()
		fleet, outcome := "", OutcomeError
		res, err := p.forwardCall(ctx, name, req, &fleet, &outcome)
		if p.opt.Metrics != nil {
			if fleet == "" {
				fleet = "-" // no valid fleet named: one series, never the caller's text
			}
			p.opt.Metrics.observe(fleet, name, outcome, time.Since(t0))
		}
		return res, err
	}
}

// forwardCall does the work of forward (the SDK path), reporting the
// fleet chosen (once valid) and the call's outcome through fleetOut and
// outcome.
func (p *Proxy) forwardCall(ctx context.Context, name string, req *mcp.CallToolRequest, fleetOut, outcome *string) (*mcp.CallToolResult, error) {
	c := callSpec{name: name, args: req.Params.Arguments, meta: forwardMeta(req.Params.Meta)}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		ours := fmt.Sprintf("fleetmgr-%d", p.seq.Add(1))
		pt := &progressTarget{ctx: ctx, ss: req.Session, token: tok, final: make(chan struct{})}
		p.progress.Store(ours, pt)
		defer func() {
			// Wait (briefly) for progress that is on its way, so it
			// reaches the caller before the result, never after.
			pt.mu.Lock()
			pending := pt.relayed > 0 && !pt.finished
			pt.mu.Unlock()
			if pending {
				select {
				case <-pt.final:
				case <-time.After(progressSettle):
				}
			}
			p.progress.Delete(ours)
		}()
		c.token = ours
		c.progress = func(np *mcp.ProgressNotificationParams) { pt.relay(p, np, true) }
	}
	raw, tres, err := p.dispatch(ctx, c, fleetOut, outcome)
	if err != nil || tres != nil {
		return tres, err
	}
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal(raw, res); err != nil {
		*outcome = OutcomeError
		return toolError("fleet %s: %s answered with a result fleetmgr cannot read: %v", *fleetOut, name, err), nil
	}
	return res, nil
}

// callSpec is one call of an exposed tool, as received.
type callSpec struct {
	name string
	args json.RawMessage // the caller's arguments, fleet included
	meta mcp.Meta        // forwardMeta of the caller's _meta
	// token is fleetmgr's own upstream progress token ("" = none) and
	// progress receives the upstream's progress for it, in order.
	token    string
	progress func(*mcp.ProgressNotificationParams)
	// later, if set, takes clean-up that can wait until the caller has
	// its answer (reading the rest of the upstream's response so the
	// connection can be reused); nil runs it before dispatch returns.
	later func(func())
}

// dispatch routes one call to its fleet and returns the upstream's raw
// result, or a tool-error result of fleetmgr's own (fleet down, timeout,
// upstream failure), or a JSON-RPC error (invalid params, caller
// cancelled). It reports the fleet chosen and the outcome.
func (p *Proxy) dispatch(ctx context.Context, c callSpec, fleetOut, outcome *string) (json.RawMessage, *mcp.CallToolResult, error) {
	name := c.name
	mt := p.cat.Load().Tools[name]
	if mt == nil {
		*outcome = OutcomeInvalidParams
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
	}
	fleet, args, err := SplitFleet(c.args, mt.Fleets)
	if err != nil {
		*outcome = OutcomeInvalidParams
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	*fleetOut = fleet
	params := &mcp.CallToolParams{Name: name, Arguments: args, Meta: c.meta}
	if c.token != "" {
		params.SetProgressToken(c.token)
	}
	u, err := p.upstreamFor(fleet)
	if err != nil {
		*outcome = OutcomeInvalidParams
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	cfg := p.opt.Manager.Config()
	timeout := cfg.Manager.CallTimeout.Duration
	if f, err := p.opt.Manager.Fleet(fleet); err == nil && f.CallTimeout.Duration > 0 {
		timeout = f.CallTimeout.Duration
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := u.callRaw(cctx, params, c.progress, c.later)
	if err == nil {
		*outcome = OutcomeOK
		var flag struct {
			IsError bool `json:"isError"`
		}
		if bytes.Contains(raw, []byte(`"isError"`)) && json.Unmarshal(raw, &flag) == nil && flag.IsError {
			*outcome = OutcomeToolError
		}
		return raw, nil, nil
	}
	var ue *upstreamError
	switch {
	case ctx.Err() != nil:
		*outcome = OutcomeCancelled
		return nil, nil, ctx.Err() // the caller cancelled
	case cctx.Err() != nil:
		*outcome = OutcomeTimeout
		return nil, toolError("fleet %s: %s did not answer within %s (call_timeout); the fleet itself is not marked down", fleet, name, timeout), nil
	case errors.As(err, &ue):
		// fleetd answered with a JSON-RPC error (e.g. its own invalid
		// params): pass it on as it is.
		*outcome = OutcomeInvalidParams
		if ue.rpc.Code != jsonrpc.CodeInvalidParams {
			*outcome = OutcomeError
		}
		return nil, nil, ue.rpc
	}
	if errors.Is(err, lifecycle.ErrUnverifiedListener) {
		// Someone else holds the fleet's port (red-team S5): name it.
		*outcome = OutcomeFleetDown
		return nil, toolError("%v", err), nil
	}
	if st, serr := p.opt.Manager.State(fleet); serr == nil && st.Shown.Phase != lifecycle.PhaseRunning {
		*outcome = OutcomeFleetDown
		if when := st.PendingRestart(time.Now()); when != "" {
			// The supervisor brings it back by itself: say when, not "start it".
			return nil, toolError("fleet %s is %s, so %s cannot be called now; call it again once the fleet is running (fleetmgr_status shows it)", fleet, when, name), nil
		}
		return nil, toolError("fleet %s is %s, so %s cannot be called; start it with `fleetmgr start %s` (or the fleetmgr_start tool)%s", fleet, st.Shown.Phase, name, fleet, lastErr(st)), nil
	}
	return nil, toolError("fleet %s: %s failed: %v", fleet, name, err), nil
}

func lastErr(st *lifecycle.State) string {
	if st.Shown.LastError != "" {
		return "; last error: " + st.Shown.LastError
	}
	return ""
}

// SplitFleet takes a call's raw arguments, removes the "fleet" argument and
// returns it with the remaining arguments as raw JSON. valid lists the
// fleets offering the tool; a missing, non-string or unknown fleet is an
// error that lists them.
func SplitFleet(raw json.RawMessage, valid []string) (string, json.RawMessage, error) {
	args := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", nil, fmt.Errorf("arguments must be a JSON object: %v", err)
		}
	}
	fv, ok := args[FleetArg]
	if !ok {
		return "", nil, fmt.Errorf("missing required argument %q; one of: %s", FleetArg, strings.Join(valid, ", "))
	}
	var fleet string
	if err := json.Unmarshal(fv, &fleet); err != nil || string(bytes.TrimSpace(fv)) == "null" {
		return "", nil, fmt.Errorf("argument %q must be a string naming a fleet; one of: %s", FleetArg, strings.Join(valid, ", "))
	}
	if !slices.Contains(valid, fleet) {
		return "", nil, fmt.Errorf("unknown fleet %q for this tool; valid fleets: %s", fleet, strings.Join(valid, ", "))
	}
	delete(args, FleetArg)
	out, err := json.Marshal(args)
	if err != nil {
		return "", nil, err
	}
	return fleet, out, nil
}

// forwardMeta copies the caller's _meta minus the keys that describe the
// caller's own protocol session (the upstream session has its own).
func forwardMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		switch k {
		case mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities, "progressToken":
			continue
		}
		out[k] = v
	}
	return out
}

// relayProgress maps an upstream progress notification back to the caller
// whose call it belongs to.
func (p *Proxy) relayProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, _ := req.Params.ProgressToken.(string)
	v, ok := p.progress.Load(tok)
	if !ok {
		return
	}
	v.(*progressTarget).relay(p, req.Params, false)
}

// relay sends one upstream progress notification to the caller, with the
// caller's own token, on the caller's request stream.
// inline is true for progress read from the call's own response stream
// (ordered before the result); false for progress the SDK session handed
// over asynchronously.
func (t *progressTarget) relay(p *Proxy, up *mcp.ProgressNotificationParams, inline bool) {
	np := *up
	np.ProgressToken = t.token
	if t.emit != nil {
		t.emit(&np)
	} else if err := t.ss.NotifyProgress(t.ctx, &np); err != nil {
		p.log.Debug("relay progress", "err", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !inline {
		t.relayed++
	}
	if np.Total > 0 && np.Progress >= np.Total && !t.finished {
		t.finished = true
		close(t.final)
	}
}

func toolError(format string, a ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, a...)}}}
}
