// Package proxy is fleetmgr's MCP front door: one mcp.Server that re-exposes
// every fleet's tools once, each with a required "fleet" argument, forwards
// calls to the chosen fleet's fleetd over an upstream session, and adds the
// manager's own fleetmgr_* tools (docs/ARCHITECTURE.md "The merged
// catalogue").
//
// Where things are: the merged catalogue is built in catalogue.go and
// schema.go and kept current in refresh.go; a forwarded call goes through
// call.go whichever way it came (the SDK's tool handler, the HTTP fast path
// in fastpath.go, the unix socket's in socketfast.go); the upstream
// sessions are upstream.go and upstreams.go (one mcpwire.Pool per fleetd),
// their hot path rawcall.go; the MCP sessions the fast path may answer on
// are tracked in sessions.go; progress is relayed by progress.go; the manager's own tools are
// manager_tools.go, supervise_tools.go, reload_tool.go and status_tool.go;
// /metrics is metrics.go.
package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/catalogues"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
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
	// tools of fleets whose state changed (default 2 s; 10 s with
	// StateChanges, then a safety net).
	RefreshEvery time.Duration
	// StateChanges, if set, gets a signal whenever a fleet's state file
	// may have changed (serve's inotify watch of the state directory):
	// Run re-reads the states then, not only every RefreshEvery.
	StateChanges <-chan struct{}
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
	// ConfigProblem, if set, says why fleets.toml as it now reads cannot
	// be applied (nil: it can): fleetmgr_list, fleetmgr_status and the
	// lifecycle tools then carry it as config_error, working on the
	// configuration in force.
	ConfigProblem func() error
	// Remote, if set, is the federation (remote.go): other hosts' fleets
	// in fleetmgr_list and fleetmgr_status, the manager tools on
	// NAME@HOST, and remote fleets' tools in the merged catalogue as
	// NAME@HOST with calls to them (federation/catalogues, remote_call.go).
	// nil: this manager does not federate.
	Remote Remote
	// OnCall, if set, is told of every call of a fleet tool once it is
	// answered (serve's journal): ctx is the call's. It runs on the call's
	// goroutine, so it must not block.
	OnCall func(ctx context.Context, c CallRecord)
	// NotifyFailing, if set, returns the notification sinks failing now
	// (serve's notifier): fleetmgr_status and fleetmgr_list carry them
	// (notify_failing), so `status` and `check` show them.
	NotifyFailing func() []status.FailingSink
}

// CallRecord is one answered call of a fleet tool (Options.OnCall).
type CallRecord struct {
	// Fleet is the fleet called (NAME or NAME@HOST; "-" when the
	// arguments named no valid one), Tool the tool's name.
	Fleet, Tool string
	// Outcome is the fleetmgr_tool_calls_total outcome (OutcomeOK …).
	Outcome string
	// Duration is from the caller's request to the answer.
	Duration time.Duration
	// ResultBytes is the size of the result's JSON (0 for an error).
	ResultBytes int
	// Peer is the federation host the call came from ("" for a local
	// caller).
	Peer string
	// Args are the caller's arguments as sent (fleet included); valid
	// only during OnCall.
	Args json.RawMessage
	// Indeterminate: the call was sent and cut before its answer (the
	// fleet or its host restarted or went away, the connection or the
	// call timeout ended it), so it may or may not have run; Outcome says
	// how it ended (timeout, fleet_down, host_down, error, tool_error for
	// a peer's answer of that kind). The journal records it as
	// OutcomeIndeterminate.
	Indeterminate bool
}

// Proxy is the MCP front door. Create with New, serve Server() over any
// transport (HTTPHandler and ConnectSocket add the fast path for
// forwarded calls), and run Run for background catalogue upkeep.
//
// Its state is kept by concern, each part with its own lock: the merged
// catalogue in force and its upkeep (cat, refresh.go), the upstream
// session per fleet and the dialer that checks a fleet's listener (ups,
// upstreams.go), the upstream progress tokens of calls in flight (relay,
// progress.go), and the HTTP fast path's calls in flight, for
// cancellation (fast, fastpath.go). Every forwarded call, whichever entry
// point it came through, goes through forwardCall (call.go).
type Proxy struct {
	opt    Options
	log    *slog.Logger
	server *mcp.Server

	cat   *liveCatalogue
	ups   *upstreamSet
	relay progressRelay
	fast  fastCalls
	// sessions are the MCP server's sessions, entered and ended by the
	// SDK (sessions.go), for the fast path.
	sessions sessionTable
	// versions are the protocol versions server supports (its default
	// options), for the fast path's checks.
	versions []string
	// remote holds the remote fleets' catalogues and the peers' states
	// (federation/catalogues); nil without opt.Remote.
	remote *catalogues.Set
	// remoteCalls are the round trips of calls to other hosts' fleets
	// (remote_call.go), for status's per-host "calls".
	remoteCalls peerview.CallStats

	statusCol *status.Collector // fleetmgr_status's; set by New, read only after
	verdicts  *verdictCache     // fleetmgr_status's last sampling (status_cache.go)
	hashes    catalogueHashes   // CatalogueHash's memo (remote.go)
	policies  policyCache       // the tool policy in force (tools_policy.go)
}

// New builds a Proxy over the fleets of opt.Manager.
func New(opt Options) *Proxy {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.RefreshEvery <= 0 {
		opt.RefreshEvery = 2 * time.Second
		if opt.StateChanges != nil {
			opt.RefreshEvery = 10 * time.Second
		}
	}
	p := &Proxy{opt: opt, log: opt.Log, verdicts: newVerdictCache(), versions: mcp.SupportedProtocolVersions()}
	p.server = mcp.NewServer(&mcp.Implementation{Name: "fleetmgr", Version: opt.Version}, &mcp.ServerOptions{
		Instructions: "fleetmgr fronts several coding-agent fleets. Every fleet tool takes a required `fleet` argument naming the fleet to call; fleetmgr_list shows the fleets and their states.",
		Logger:       p.SDKLogger(),
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr", Version: opt.Version}, &mcp.ClientOptions{
		Capabilities:           &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { p.Kick() },
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			p.relay.deliver(req.Params)
		},
	})
	p.server.AddReceivingMiddleware(p.sessions.middleware)
	p.cat = newLiveCatalogue(p.server)
	if opt.Remote != nil && opt.Manager != nil {
		p.remote = catalogues.New(opt.Remote, filepath.Join(opt.Manager.Config().Manager.StateDir, catalogues.Dir), p.log, p.remoteChanged)
	}
	p.ups = newUpstreamSet(opt.Manager, p.log, client)
	p.addManagerTools()
	p.addSupervisionTools()
	p.addReloadTool() // fleetmgr_reload (reload_tool.go), with opt.Reload
	p.addStatusTool() // fleetmgr_status (status_tool.go)
	p.addToolsTool()  // fleetmgr_tools (tools_policy.go)
	p.server.AddReceivingMiddleware(p.refuseHidden)
	if opt.Metrics != nil {
		opt.Metrics.state.proxy = p
	}
	return p
}

// Connected reports whether fleetmgr holds an open MCP session to fleet
// name's fleetd right now.
func (p *Proxy) Connected(name string) bool { return p.ups.connected(name) }

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
func (p *Proxy) Catalogue() *Catalogue { return p.cat.current() }
