package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

// StatusTool is the name of the manager's status tool
// (docs/ARCHITECTURE.md "Status: working or stalled").
const StatusTool = ManagerToolPrefix + "status"

// StatusArgs are fleetmgr_status's arguments.
type StatusArgs struct {
	Fleets     []string `json:"fleets,omitempty" jsonschema:"fleet names to report; default every configured fleet"`
	IntervalMS int      `json:"interval_ms,omitempty" jsonschema:"milliseconds between a busy member's two evidence samples; default [status] interval (3000)"`
}

// addStatusTool registers fleetmgr_status. Its collector reads rosters
// through the proxy's own upstream sessions (fleet_list), so a status costs
// no new MCP session per fleet, and uses p.opt.Status (the serve daemon's
// watcher) for file evidence. Each fleet's schema drift, excluded and
// relaxed tools come from the current merged catalogue (NoteDrift).
func (p *Proxy) addStatusTool() {
	var opt status.Options
	if p.opt.Status != nil {
		opt = *p.opt.Status
	}
	opt.Manager = p.opt.Manager
	if opt.Roster == nil {
		opt.Roster = p.roster
	}
	if opt.Via == "" {
		opt.Via = "daemon"
	}
	if opt.Log == nil {
		opt.Log = p.log
	}
	opt.Version = p.opt.Version
	c := status.New(opt)
	p.statusCol = c
	mcp.AddTool(p.server, &mcp.Tool{
		Name: StatusTool,
		Description: "Which fleet is working, which member is stalled. Per fleet: state, pid, uptime, restarts, last restart reason, pending restart (next_restart_at), crash loop, last exit, /healthz latency, herdr session alive, broker, member count. " +
			"Per fleet also schema_drift: how its tool schemas differ from other fleets' tools of the same name (the exposed schema is their union; a fleet may refuse a call another accepts); " +
			"excluded_tools: its tools fleetmgr does not expose, with why; relaxed_tools: its tools whose exposed schema accepts more than the fleet's own, with why. " +
			"Per member a verdict from evidence, not from its claim: BLOCKED (herdr agent_status blocked), WORKING (files and/or output changed between two samples interval_ms apart), " +
			"STALLED (claims busy, nothing changed; with the age of the last change), IDLE, UNKNOWN (with the reason), REMOTE (another host, not probed). Takes about one interval.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StatusArgs) (*mcp.CallToolResult, *status.Report, error) {
		if in.IntervalMS < 0 || in.IntervalMS > 600_000 {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "interval_ms must be 0 (default) to 600000"}
		}
		for _, n := range in.Fleets {
			if _, err := p.fleetFor(ctx, n); err != nil { // a fleet just added to the file: reload first
				return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
			}
		}
		rep, err := c.Collect(ctx, status.Request{Fleets: in.Fleets, Interval: time.Duration(in.IntervalMS) * time.Millisecond})
		if err != nil {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		NoteDrift(rep, p.Catalogue())
		return nil, rep, nil
	})
}

// StatusCollector is the collector behind fleetmgr_status (rosters read
// over the proxy's upstream sessions, file evidence from Options.Status),
// for the daemon's other views of the same data (the dashboard), so they
// share its memory of each pane's last output change.
func (p *Proxy) StatusCollector() *status.Collector { return p.statusCol }

// roster calls the fleet's fleet_list over the fleet's upstream session.
func (p *Proxy) roster(ctx context.Context, f *registry.Fleet) ([]status.RosterRow, error) {
	u, err := p.ups.get(f.Name)
	if err != nil {
		return nil, err
	}
	res, err := u.call(ctx, &mcp.CallToolParams{Name: status.RosterTool, Arguments: map[string]any{}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", status.RosterTool, err)
	}
	return status.ParseRoster(res)
}
