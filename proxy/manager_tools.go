package proxy

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
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
	// WhatNext and StartRetriesLeft: for a fleet whose start did not
	// become healthy, what happens next in one sentence and how many
	// retries serve still makes (status's what_next, start_retries_left).
	WhatNext         string `json:"what_next,omitempty"`
	StartRetriesLeft *int   `json:"start_retries_left,omitempty"`

	// The fields below are set for a fleet of another host (federation,
	// docs/FEDERATION.md): a row named NAME@HOST, or a fleet fleets.toml
	// declares with host = a federated peer. Its state is the one the
	// host's last presence reported (unknown when the host is not online:
	// kept, never dropped); port, pid, herdr session and project are
	// the host's own and not shown.

	// Host is the fleet's host id.
	Host string `json:"host,omitempty"`
	// Remote is where and when the host was seen (host_state, last_seen,
	// beat_age_s, reported_state, verdicts_age_s, catalogue): the same
	// object as a status row's "remote" (peerview.Fleet).
	Remote *peerview.Fleet `json:"remote,omitempty"`
	// UptimeS, Restarts and CrashLoop are the host's report.
	UptimeS   int64 `json:"uptime_s,omitempty"`
	Restarts  int   `json:"restarts,omitempty"`
	CrashLoop bool  `json:"crash_loop,omitempty"`
	// Members and Verdicts are the host's last status report of the
	// fleet (Remote.VerdictsAgeS old when it was sent); absent when it
	// had none.
	Members  *int           `json:"members,omitempty"`
	Verdicts map[string]int `json:"verdicts,omitempty"`
}

// ListResult is the structured result of fleetmgr_list.
type ListResult struct {
	// Fleets are this host's fleets and, when it federates, every other
	// host's as NAME@HOST, sorted by name.
	Fleets []FleetSummary `json:"fleets"`
	// Federation is this host's federation and its peers; absent when it
	// does not federate.
	Federation *peerview.Federation `json:"federation,omitempty"`
	// ConfigError is set while fleets.toml does not load (each problem
	// with file:line): the list is of the configuration in force.
	ConfigError string `json:"config_error,omitempty"`
	// NotifyFailing are the notification sinks whose last delivery
	// failed (status.Report's); absent when none is.
	NotifyFailing []status.FailingSink `json:"notify_failing,omitempty"`
}

// FleetArgs names one fleet.
type FleetArgs struct {
	Fleet string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml, or NAME@HOST for a fleet of another federated host"`
}

// StartArgs are fleetmgr_start's arguments.
type StartArgs struct {
	Fleet string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml, or NAME@HOST for a fleet of another federated host"`
	Lead  bool   `json:"lead,omitempty" jsonschema:"also launch the fleet's lead (a paid agent session); default false"`
}

// StopArgs are fleetmgr_stop's arguments.
type StopArgs struct {
	Fleet   string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml, or NAME@HOST for a fleet of another federated host"`
	Confirm bool   `json:"confirm,omitempty" jsonschema:"true: go on although the stop ends the fleet's live members; without it a fleet with live members is not stopped and the error names them"`
}

// RestartArgs are fleetmgr_restart's arguments.
type RestartArgs struct {
	Fleet   string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml, or NAME@HOST for a fleet of another federated host"`
	Lead    bool   `json:"lead,omitempty" jsonschema:"also launch the fleet's lead if its tab is missing; default false"`
	Confirm bool   `json:"confirm,omitempty" jsonschema:"true: go on although the restart ends the fleet's live members (a new fleetd reaps them); without it a fleet with live members is not restarted and the error names them"`
}

// ActArgs are one lifecycle verb for Do: the verb (VerbStart, VerbStop,
// VerbRestart), the fleet (NAME or NAME@HOST), whether to launch the
// lead (start, restart), whether the caller confirmed that a stop or
// restart may end live members (lifecycle.Options.Confirm; without it
// such a verb is refused with a *lifecycle.MembersLiveError), and who
// asked (lifecycle.Options.Origin: "mcp", "dashboard", "remote" …).
type ActArgs struct {
	Verb, Fleet string
	Lead        bool
	Confirm     bool
	Origin      string
}

// ActionResult is the structured result of fleetmgr_start / fleetmgr_stop.
type ActionResult struct {
	Fleet string           `json:"fleet"`
	State lifecycle.Phase  `json:"state"`
	PID   int              `json:"pid,omitempty"`
	Port  int              `json:"port"`
	Steps []lifecycle.Step `json:"steps"`
	// ConfigError is ListResult's: set while fleets.toml does not load;
	// the verb ran on the configuration in force.
	ConfigError string `json:"config_error,omitempty"`
}

// List summarises every configured fleet, and every fleet removed from the
// file while it may still run, and, when this manager federates, every
// other host's fleet (NAME@HOST, from presence), sorted by name.
func (p *Proxy) List() (*ListResult, error) {
	m := p.opt.Manager
	cat := p.cat.current()
	out := &ListResult{Fleets: []FleetSummary{}}
	declared := map[string]*FleetSummary{} // fleets.toml puts them on another host
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
		s.WhatNext = st.Shown.Next
		if st.Shown.StartRetrying {
			left := st.Shown.StartRetriesLeft
			s.StartRetriesLeft = &left
		}
		if s.Restart = st.PendingRestart(time.Now()); s.Restart != "" {
			s.NextRestartAt = st.Shown.NextRestartAt
		}
		for _, t := range cat.Tools {
			for _, fl := range t.Fleets {
				if fl == name {
					s.Tools++
				}
			}
		}
		out.Fleets = append(out.Fleets, s)
		if f.Host != "" && !p.IsLocal(f.Host) {
			d := s
			d.Host = f.Host
			declared[name] = &d
		}
	}
	rows, fed := p.remoteListRows(declared)
	for i := range out.Fleets {
		if d := declared[out.Fleets[i].Name]; d != nil {
			out.Fleets[i] = *d
		}
	}
	out.Fleets = append(out.Fleets, rows...)
	out.Federation = fed
	sort.SliceStable(out.Fleets, func(i, j int) bool { return out.Fleets[i].Name < out.Fleets[j].Name })
	out.NotifyFailing = p.notifyFailing()
	return out, nil
}

func (p *Proxy) addManagerTools() {
	mcp.AddTool(p.server, &mcp.Tool{
		Name: ManagerToolPrefix + "list",
		Description: "List the fleets fleetmgr manages: state (running/stopped/failed/restarting…), port, fleetd pid, herdr session, project, how many tools each offers, and for a fleet the supervisor is restarting, when and why. " +
			"When fleetmgr federates, other hosts' fleets are listed as NAME@HOST with their host, host state (online/expired/offline), state, member and verdict counts and the age of the host's last beat.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *ListResult, error) {
		r, err := p.List()
		if r != nil {
			r.ConfigError = p.ConfigError()
		}
		return nil, r, err
	})
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "start",
		Description: "Start a fleet: its herdr session, then its fleetd, waiting until /healthz answers with the fleet's name. Reports each step as progress. A start that does not become healthy is an error ending with what happens next in one sentence: serve retries it start_retries times (default 3) with the restart backoff, then the fleet is failed until started again. lead=true also launches the fleet's lead. A fleet of another host (NAME@HOST) is started by that host's fleetmgr over the federation.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StartArgs) (*mcp.CallToolResult, *ActionResult, error) {
		return p.act(ctx, req, ActArgs{Verb: VerbStart, Fleet: in.Fleet, Lead: in.Lead, Origin: "mcp"})
	})
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "stop",
		Description: "Stop a fleet: fleetd, then its herdr session and every pane process. Its broker vhost and queued messages are kept. A fleet with live members is stopped only with confirm=true (they end); without it the error says how many and which. A fleet of another host (NAME@HOST) is stopped by that host's fleetmgr over the federation.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StopArgs) (*mcp.CallToolResult, *ActionResult, error) {
		return p.act(ctx, req, ActArgs{Verb: VerbStop, Fleet: in.Fleet, Confirm: in.Confirm, Origin: "mcp"})
	})
}

// The lifecycle verbs of the manager tools fleetmgr_start, fleetmgr_stop
// and fleetmgr_restart (and of the federation's control requests).
const (
	VerbStart   = "start"
	VerbStop    = "stop"
	VerbRestart = "restart"
)

// StepMetaKey is the _meta key under which the progress notifications of
// fleetmgr_start, fleetmgr_stop and fleetmgr_restart carry their step as
// a value (lifecycle.Step's JSON: fleet, step, detail, elapsed_ns) beside
// the message written for people ("herdr-session: started"), so a
// program (fleetmgr's own CLI, serveclient.Client) never parses the message.
// The key follows the MCP specification's rules for _meta keys (Base
// Protocol, "General fields"): a prefix of dot-separated labels in reverse
// DNS notation, then "/" and a name; the second label is neither
// modelcontextprotocol nor mcp, which are reserved.
const StepMetaKey = "io.github.fleetmgr/step"

// act is the tool handler of fleetmgr_<verb>: Act, relaying each step as
// MCP progress (the message for people, the step itself under
// StepMetaKey).
func (p *Proxy) act(ctx context.Context, req *mcp.CallToolRequest, a ActArgs) (*mcp.CallToolResult, *ActionResult, error) {
	tok := req.Params.GetProgressToken()
	n := 0
	res, err := p.Do(ctx, a, func(s lifecycle.Step) {
		n++
		if tok != nil && req.Session != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: tok, Progress: float64(n), Message: fmt.Sprintf("%s: %s", s.Name, s.Detail),
				Meta: mcp.Meta{StepMetaKey: s}})
		}
	})
	if err != nil && federation.IsIndeterminate(err) {
		// A peer's fleet whose request left and got no answer: it may
		// have run there. The tool error carries _meta
		// io.github.fleetmgr/outcome = indeterminate (as a cut call's
		// does), by which serve journals it so, never as a failure to
		// retry (issue 27 item 8).
		if res == nil {
			res = &ActionResult{Fleet: a.Fleet, Steps: []lifecycle.Step{}}
		}
		res.ConfigError = p.ConfigError()
		return indeterminate("%s", err.Error()), res, nil
	}
	if res == nil && err != nil {
		return nil, nil, err
	}
	if res != nil {
		res.ConfigError = p.ConfigError()
	}
	return nil, res, err
}

// Act runs verb (VerbStart, VerbStop, VerbRestart) on fleet as the manager
// tools fleetmgr_start, fleetmgr_stop and fleetmgr_restart do, and is what
// they and the dashboard's actions call: a fleet of another host
// (NAME@HOST, or one fleets.toml declares on a federated peer) by a
// signed control request to that host (its steps handed to onStep when
// the reply arrives), any other through Lifecycle, which reads
// fleets.toml again for a name the config in force does not define (a
// name still unknown is an *UnknownFleetError, nothing done).
//
// Act is Do confirmed (its callers asked the operator first: the
// dashboard's dialog).
func (p *Proxy) Act(ctx context.Context, verb, fleet string, lead bool, onStep func(lifecycle.Step)) (*ActionResult, error) {
	return p.Do(ctx, ActArgs{Verb: verb, Fleet: fleet, Lead: lead, Confirm: true}, onStep)
}

// Do is Act with every argument: a.Confirm false refuses a stop or
// restart that would end live members (*lifecycle.MembersLiveError, or
// the peer's text of it for NAME@HOST).
func (p *Proxy) Do(ctx context.Context, a ActArgs, onStep func(lifecycle.Step)) (*ActionResult, error) {
	verb, fleet, lead := a.Verb, a.Fleet, a.Lead
	name, host, err := p.remoteTarget(fleet)
	if err != nil {
		return nil, err
	}
	if host != "" {
		return p.remoteAct(ctx, verb, name, host, lead, a.Confirm, onStep)
	}
	return p.lifecycle(ctx, a, name, onStep)
}

// UnknownFleetError is the error of Lifecycle, Act and the manager tools
// for a name fleets.toml does not define even after it was read again;
// nothing was done. Its text is the config's own ("unknown fleet "x": …
// defines a, b").
type UnknownFleetError struct {
	// Fleet is the name asked for.
	Fleet string
	// Err is the config's error.
	Err error
}

func (e *UnknownFleetError) Error() string { return e.Err.Error() }
func (e *UnknownFleetError) Unwrap() error { return e.Err }

// Lifecycle runs verb (VerbStart, VerbStop, VerbRestart) on the local
// fleet named fleet: the lifecycle.Manager's verb with its steps recorded
// in the result (and each handed to onStep, when set, as it completes),
// then a catalogue refresh so the fleet enums follow (bounded by 10 s,
// not cut short when ctx ends). lead also launches the fleet's lead
// (start, restart). It is the one code path of fleetmgr_start,
// fleetmgr_stop and fleetmgr_restart and of a peer's control request
// (Execute). The result is nil only when the fleet is unknown (the error
// says so); on a failed verb it holds the steps done and the state left.
//
// Lifecycle is confirmed: a stop or restart goes on although it ends live
// members (callers that must ask use Do).
func (p *Proxy) Lifecycle(ctx context.Context, verb, fleet string, lead bool, onStep func(lifecycle.Step)) (*ActionResult, error) {
	return p.lifecycle(ctx, ActArgs{Verb: verb, Fleet: fleet, Lead: lead, Confirm: true}, fleet, onStep)
}

// lifecycle is Lifecycle with every argument (a.Fleet, as the caller
// named it, is not used: fleet is the local name).
func (p *Proxy) lifecycle(ctx context.Context, a ActArgs, fleet string, onStep func(lifecycle.Step)) (*ActionResult, error) {
	verb, lead := a.Verb, a.Lead
	f, err := p.fleetFor(ctx, fleet)
	if err != nil {
		return nil, err
	}
	res := &ActionResult{Fleet: fleet, Port: f.Port, Steps: []lifecycle.Step{}}
	opt := lifecycle.Options{Lead: lead, Confirm: a.Confirm, Origin: a.Origin, Progress: func(s lifecycle.Step) {
		res.Steps = append(res.Steps, s)
		if onStep != nil {
			onStep(s)
		}
	}}
	var st *lifecycle.State
	m := p.opt.Manager
	switch verb {
	case VerbStart:
		st, err = m.Start(ctx, fleet, opt)
	case VerbStop:
		opt.Lead = false
		st, err = m.Stop(ctx, fleet, opt)
	case VerbRestart:
		st, err = m.Restart(ctx, fleet, opt)
	default:
		return nil, fmt.Errorf("unknown lifecycle verb %q", verb)
	}
	if verb != VerbStop {
		// A start that did not become healthy says what happens next:
		// serve's retries, or that it gave up (issue 24 item 5).
		err = m.WithNext(fleet, err)
	}
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
