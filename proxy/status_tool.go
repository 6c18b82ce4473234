package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

// StatusTool is the name of the manager's status tool
// (docs/ARCHITECTURE.md "Status: working or stalled").
const StatusTool = ManagerToolPrefix + "status"

// StatusArgs are fleetmgr_status's arguments.
type StatusArgs struct {
	Fleets     []string `json:"fleets,omitempty" jsonschema:"fleet names to report (NAME@HOST for another host's fleet); default every configured fleet and every federated host's"`
	IntervalMS int      `json:"interval_ms,omitempty" jsonschema:"milliseconds between a busy member's two evidence samples; default [status] interval (3000)"`
	MaxAgeMS   int      `json:"max_age_ms,omitempty" jsonschema:"answer at once from serve's last sampling when it is at most this many milliseconds old (cached and age_ms say so); 0: sample anew"`
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
		Description: "Which fleet is working, which member is stalled. Per fleet: state, pid, uptime, restarts, last restart reason, pending restart (next_restart_at), crash loop, what happens next after a start that did not become healthy (what_next, start_retries_left), last exit, /healthz latency, herdr session alive, broker, member count. " +
			"Per fleet also schema_drift: how its tool schemas differ from other fleets' tools of the same name (the exposed schema is their union; a fleet may refuse a call another accepts); " +
			"excluded_tools: its tools fleetmgr does not expose, with why; relaxed_tools: its tools whose exposed schema accepts more than the fleet's own, with why. " +
			"Per member a verdict from evidence, not from its claim: BLOCKED (herdr agent_status blocked), WORKING (files and/or output changed between two samples interval_ms apart), " +
			"STALLED (claims busy, nothing changed; with the age of the last change), IDLE, UNKNOWN (with the reason), REMOTE (another host, not probed). Takes about one interval. " +
			"When fleetmgr federates, every other host's fleet is a row NAME@HOST from that host's presence (its state, member and verdict counts, the age of its last beat; UNKNOWN with last-seen when the host is not online); naming a NAME@HOST in fleets asks that host for a fresh status of it.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StatusArgs) (*mcp.CallToolResult, *status.Report, error) {
		if in.IntervalMS < 0 || in.IntervalMS > 600_000 {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "interval_ms must be 0 (default) to 600000"}
		}
		if in.MaxAgeMS > 0 && in.IntervalMS == 0 && p.allLocal(in.Fleets) {
			rows, err := p.statusCol.Rows(in.Fleets)
			if err != nil {
				return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
			}
			if rep := p.verdicts.get(time.Duration(in.MaxAgeMS)*time.Millisecond, rows, p.statusCol.PushedMembers); rep != nil {
				// Drift is the catalogue's now, for stopped fleets too (their
				// cached tools), not the sampling's.
				NoteDrift(rep, p.Catalogue())
				// The sampling judged verdicts only (keepWarm reads no
				// /proc): resources are read now, for this caller.
				p.statusCol.AddResources(ctx, rep)
				if len(in.Fleets) == 0 {
					p.AddRemote(rep, nil)
				}
				p.NoteServe(rep)
				return nil, rep, nil
			}
		}
		began := time.Now()
		rep, err := p.status(ctx, in.Fleets, time.Duration(in.IntervalMS)*time.Millisecond)
		if err != nil {
			return nil, nil, err
		}
		if len(in.Fleets) == 0 && in.IntervalMS == 0 && p.opt.Remote == nil {
			p.verdicts.store(rep, began)
		}
		return nil, rep, nil
	})
}

// VerdictChanged tells the proxy that a member's verdict changed after
// its last sampling (serve's status tracker saw it in herdr's push): a
// status asking for a cached answer is then answered with the tracker's
// verdicts over the older sampling (status.Collector.PushedMembers), or
// samples anew when the tracker cannot give them.
func (p *Proxy) VerdictChanged() { p.verdicts.changedNow() }

// allLocal reports whether every one of names is a fleet of this host
// the config in force defines (a cached answer has no other rows).
func (p *Proxy) allLocal(names []string) bool {
	for _, n := range names {
		if _, host, err := p.remoteTarget(n); err != nil || host != "" {
			return false
		}
		if _, err := p.opt.Manager.Fleet(n); err != nil {
			return false
		}
	}
	return true
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

// status is fleetmgr_status: the local fleets named (all when names is
// empty) sampled by the collector, drift noted; each NAME@HOST named (or
// fleet declared on a federated peer) asked of its host (remoteStatus),
// all at once; and without names every peer's fleets from presence
// (AddRemote). An unknown local fleet is invalid params; a peer that
// refuses or does not answer fails the call, naming it.
func (p *Proxy) status(ctx context.Context, names []string, interval time.Duration) (*status.Report, error) {
	type remoteReq struct{ fleet, host string }
	var local []string
	var remotes []remoteReq
	for _, n := range names {
		fl, host, err := p.remoteTarget(n)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		if host != "" {
			remotes = append(remotes, remoteReq{fl, host})
			continue
		}
		if _, err := p.fleetFor(ctx, fl); err != nil { // a fleet just added to the file: reload first
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		local = append(local, fl)
	}
	var view []federation.HostView
	if p.opt.Remote != nil && len(remotes) > 0 {
		view = p.opt.Remote.View()
	}
	rows := make([]status.Fleet, len(remotes))
	errs := make([]error, len(remotes))
	var wg sync.WaitGroup
	for i, r := range remotes {
		wg.Go(func() { rows[i], errs[i] = p.remoteStatus(ctx, r.fleet, r.host, interval, view) })
	}
	var rep *status.Report
	var err error
	if len(names) == 0 || len(local) > 0 {
		rep, err = p.statusCol.Collect(ctx, status.Request{Fleets: local, Interval: interval, Resources: true})
		if err == nil {
			NoteDrift(rep, p.Catalogue())
		}
	} else {
		rep = p.statusCol.Empty(interval)
	}
	wg.Wait()
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		p.AddRemote(rep, nil)
	} else {
		p.AddRemote(rep, []string{}) // the federation's state, no presence rows
	}
	rep.Fleets = append(rep.Fleets, rows...)
	sort.SliceStable(rep.Fleets, func(i, j int) bool { return rep.Fleets[i].Name < rep.Fleets[j].Name })
	p.NoteServe(rep)
	return rep, nil
}

// NoteServe marks a report this serve made: its fleets are supervised by
// this process, and while fleets.toml does not load (Options.ConfigProblem)
// the report says why, being of the configuration in force; failing
// notification sinks are named (Options.NotifyFailing).
func (p *Proxy) NoteServe(rep *status.Report) {
	rep.Supervised, rep.ServePID = true, os.Getpid()
	rep.Supervision = status.SupervisionText(rep.ServePID)
	rep.ConfigError = p.ConfigError()
	rep.NotifyFailing = p.notifyFailing()
}

// notifyFailing is Options.NotifyFailing's answer (nil without it).
func (p *Proxy) notifyFailing() []status.FailingSink {
	if p.opt.NotifyFailing == nil {
		return nil
	}
	return p.opt.NotifyFailing()
}

// ConfigError is why fleets.toml as it now reads cannot be applied
// (Options.ConfigProblem), "" when it can or nothing tells.
func (p *Proxy) ConfigError() string {
	if p.opt.ConfigProblem == nil {
		return ""
	}
	if err := p.opt.ConfigProblem(); err != nil {
		return err.Error()
	}
	return ""
}
