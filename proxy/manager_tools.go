package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// FleetSummary is one row of fleetmgr_list.
type FleetSummary struct {
	Name         string          `json:"name"`
	Phase        lifecycle.Phase `json:"state"`
	Desired      string          `json:"desired"`
	Port         int             `json:"port"`
	PID          int             `json:"pid,omitempty"`
	HerdrSession string          `json:"herdr_session"`
	Project      string          `json:"project"`
	Tools        int             `json:"tools"`
	LastError    string          `json:"last_error,omitempty"`
	// NotInConfig: fleets.toml no longer defines the fleet, which was
	// removed while it ran; it can be stopped, and is never restarted.
	NotInConfig bool `json:"not_in_config,omitempty"`
	// RestartPending lists the fleets.toml keys whose values differ from
	// those the running fleet was started with; its next start applies
	// them.
	RestartPending []string `json:"restart_pending,omitempty"`
	// NextRestartAt is when the supervisor's pending restart is due, and
	// Restart says it in words ("restarting in 3s (reason: …)"); both are
	// empty when no restart is pending.
	NextRestartAt time.Time `json:"next_restart_at,omitzero"`
	Restart       string    `json:"restart,omitempty"`
}

// ListResult is the structured result of fleetmgr_list.
type ListResult struct {
	Fleets []FleetSummary `json:"fleets"`
}

// FleetArgs names one fleet.
type FleetArgs struct {
	Fleet string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml"`
}

// StartArgs are fleetmgr_start's arguments.
type StartArgs struct {
	Fleet string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml"`
	Lead  bool   `json:"lead,omitempty" jsonschema:"also launch the fleet's lead (a paid agent session); default false"`
}

// ActionResult is the structured result of fleetmgr_start / fleetmgr_stop.
type ActionResult struct {
	Fleet string           `json:"fleet"`
	State lifecycle.Phase  `json:"state"`
	PID   int              `json:"pid,omitempty"`
	Port  int              `json:"port"`
	Steps []lifecycle.Step `json:"steps"`
}

// List summarises every configured fleet, and every fleet removed from the
// file while it may still run, sorted by name.
func (p *Proxy) List() (*ListResult, error) {
	m := p.opt.Manager
	cat := p.cat.current()
	out := &ListResult{Fleets: []FleetSummary{}}
	for _, name := range m.Names() {
		f, err := m.Fleet(name)
		if err != nil {
			continue // stopped since Names looked
		}
		st, err := m.State(name)
		if err != nil {
			return nil, err
		}
		s := FleetSummary{Name: name, Phase: st.Shown.Phase, Desired: string(st.Desired), Port: f.Port,
			HerdrSession: f.HerdrSession, Project: f.Project, LastError: st.Shown.LastError,
			NotInConfig: st.Shown.NotInConfig, RestartPending: st.Shown.RestartPending}
		if st.Port != 0 && st.Shown.Phase == lifecycle.PhaseRunning {
			s.Port = st.Port // where it runs, until a restart applies a changed port
		}
		if st.Fleetd != nil && st.Shown.Phase == lifecycle.PhaseRunning {
			s.PID = st.Fleetd.PID
		}
		if s.Restart = st.PendingRestart(time.Now()); s.Restart != "" {
			s.NextRestartAt = st.NextRestartAt
		}
		for _, t := range cat.Tools {
			for _, fl := range t.Fleets {
				if fl == name {
					s.Tools++
				}
			}
		}
		out.Fleets = append(out.Fleets, s)
	}
	return out, nil
}

func (p *Proxy) addManagerTools() {
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "list",
		Description: "List the fleets fleetmgr manages: state (running/stopped/failed/restarting…), port, fleetd pid, herdr session, project, how many tools each offers, and for a fleet the supervisor is restarting, when and why.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *ListResult, error) {
		r, err := p.List()
		return nil, r, err
	})
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "start",
		Description: "Start a fleet: its herdr session, then its fleetd, waiting until /healthz answers with the fleet's name. Reports each step as progress. lead=true also launches the fleet's lead.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StartArgs) (*mcp.CallToolResult, *ActionResult, error) {
		return p.actTool(ctx, req, VerbStart, in.Fleet, in.Lead)
	})
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "stop",
		Description: "Stop a fleet: fleetd, then its herdr session and every pane process. Its broker vhost and queued messages are kept.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in FleetArgs) (*mcp.CallToolResult, *ActionResult, error) {
		return p.actTool(ctx, req, VerbStop, in.Fleet, false)
	})
}

// StepMetaKey is the _meta key under which the progress notifications of
// fleetmgr_start, fleetmgr_stop and fleetmgr_restart carry their step as
// a value (lifecycle.Step's JSON: fleet, step, detail, elapsed_ns) beside
// the message written for people ("herdr-session: started"), so a
// program (fleetmgr's own CLI, daemon.Client) never parses the message.
// The key follows the MCP specification's rules for _meta keys (Base
// Protocol, "General fields"): a prefix of dot-separated labels in reverse
// DNS notation, then "/" and a name; the second label is neither
// modelcontextprotocol nor mcp, which are reserved.
const StepMetaKey = "io.github.fleetmgr/step"

// Verb is a lifecycle verb of Act: the manager tools fleetmgr_start,
// fleetmgr_stop and fleetmgr_restart, the CLI's start/stop/restart through
// serve, and the dashboard's buttons.
type Verb string

// The verbs of Act.
const (
	VerbStart   Verb = "start"
	VerbStop    Verb = "stop"
	VerbRestart Verb = "restart"
)

// UnknownFleetError is Act's (and the manager tools') error for a name
// fleets.toml does not define even after it was read again; nothing was
// done. Its text is the config's own ("unknown fleet "x": … defines a,
// b").
type UnknownFleetError struct {
	// Fleet is the name asked for.
	Fleet string
	// Err is the config's error.
	Err error
}

func (e *UnknownFleetError) Error() string { return e.Err.Error() }
func (e *UnknownFleetError) Unwrap() error { return e.Err }

// Act runs one lifecycle verb on fleet: the one path of the manager tools
// (fleetmgr_start, fleetmgr_stop, fleetmgr_restart) and of the dashboard's
// actions. A name the config in force does not define makes serve read
// fleets.toml again first (a fleet added since is then known: fleetFor);
// still unknown, it is an *UnknownFleetError and nothing is done. Each
// completed step goes to progress (nil: none) as it happens and into the
// result's Steps. After the verb the catalogue is refreshed (bounded by
// 10 s, not cut short by ctx) so the fleet enums follow. lead applies to
// start and restart (`fleetmgr start --lead`). The result is returned
// with the verb's error too (the state it left, the steps it made); it is
// nil only when fleet is unknown or the config cannot be re-read.
func (p *Proxy) Act(ctx context.Context, verb Verb, fleet string, lead bool, progress func(lifecycle.Step)) (*ActionResult, error) {
	m := p.opt.Manager
	var do func(context.Context, string, lifecycle.Options) (*lifecycle.State, error)
	switch verb {
	case VerbStart:
		do = m.Start
	case VerbStop:
		do, lead = m.Stop, false
	case VerbRestart:
		do = m.Restart
	default:
		return nil, fmt.Errorf("verb %q: want start, stop or restart", verb)
	}
	f, err := p.fleetFor(ctx, fleet)
	if err != nil {
		return nil, err
	}
	res := &ActionResult{Fleet: fleet, Port: f.Port, Steps: []lifecycle.Step{}}
	opt := lifecycle.Options{Lead: lead, Progress: func(s lifecycle.Step) {
		res.Steps = append(res.Steps, s)
		if progress != nil {
			progress(s)
		}
	}}
	st, err := do(ctx, fleet, opt)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = p.Refresh(rctx)
	if st != nil {
		res.State = st.Phase
		if st.Fleetd != nil {
			res.PID = st.Fleetd.PID
		}
	}
	return res, err
}

// actTool is Act for a manager tool: each step is relayed as MCP progress
// when the call has a progress token (the message for people, the step
// itself under StepMetaKey).
func (p *Proxy) actTool(ctx context.Context, req *mcp.CallToolRequest, verb Verb, fleet string, lead bool) (*mcp.CallToolResult, *ActionResult, error) {
	tok := req.Params.GetProgressToken()
	n := 0
	relay := func(s lifecycle.Step) {
		n++
		if tok != nil && req.Session != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: tok, Progress: float64(n), Message: fmt.Sprintf("%s: %s", s.Name, s.Detail),
				Meta: mcp.Meta{StepMetaKey: s}})
		}
	}
	res, err := p.Act(ctx, verb, fleet, lead, relay)
	return nil, res, err
}
