package fleetd

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Version is the stand-in's MCP implementation version.
const Version = "0.1.0-standin"

// Member states and live statuses reported in roster rows.
const (
	// StateReady is the only state the stand-in reports, even for a member
	// whose pane is gone (faithful to the bug measured in fleetd issue #160).
	StateReady = "ready"
	// LiveUnknown is liveStatus when herdr's agent_status is unknown or the
	// pane cannot be read.
	LiveUnknown = "unknown"
)

// Tool error prefixes, first word of the error text.
const (
	ErrAgentNotFound = "agent_not_found"
	ErrForbidden     = "forbidden"
	ErrInvalid       = "invalid_params"
	ErrHerdr         = "herdr_error"
)

// WhoamiResult is fleet_whoami's result.
type WhoamiResult struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// Role is primary, lead or worker.
	Role string `json:"role"`
	// CallerPID is the peer pid of the caller's TCP connection; 0 when it
	// could not be resolved.
	CallerPID int `json:"caller_pid"`
	// PaneID is the herdr pane that owns CallerPID; empty for primary.
	PaneID string `json:"pane_id,omitempty"`
}

// MemberRow is one roster row (fleet_list, fleet_status, fleet_spawn).
type MemberRow struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// ID is the member id.
	ID string `json:"id"`
	// PaneID is the member's herdr pane, e.g. "w1:p2".
	PaneID string `json:"pane_id"`
	// TabID is the pane's tab (labelled "member-<nonce>-<id>").
	TabID string `json:"tab_id"`
	// Worktree is the member's working directory (WorktreeRoot/<id>).
	Worktree string `json:"worktree"`
	// Profile is the profile named at spawn; empty when none.
	Profile string `json:"profile,omitempty"`
	// State is always "ready".
	State string `json:"state"`
	// LiveStatus is herdr's agent_status for the pane (working, idle,
	// blocked, done) or "unknown" (also when the pane is gone).
	LiveStatus string `json:"liveStatus"`
}

// ListResult is fleet_list's result.
type ListResult struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// Members are the roster rows in spawn order; never null.
	Members []MemberRow `json:"members"`
}

// AckResult is the result of fleet_send, fleet_stop and fleet_add_tool.
type AckResult struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// ID is the member addressed (send, stop).
	ID string `json:"id,omitempty"`
	// Tool is the tool added (add_tool).
	Tool string `json:"tool,omitempty"`
	// OK is true.
	OK bool `json:"ok"`
}

// SlowResult is fleet_slow's result.
type SlowResult struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// Completed is true when every step ran.
	Completed bool `json:"completed"`
}

type emptyInput struct{}

type spawnInput struct {
	ID      string `json:"id,omitempty" jsonschema:"member id ([A-Za-z0-9._-], 1-64); default m1, m2, ..."`
	Profile string `json:"profile,omitempty" jsonschema:"member profile (recorded only)"`
	Command string `json:"command,omitempty" jsonschema:"command line to run in the member's pane"`
}

type idInput struct {
	ID string `json:"id" jsonschema:"member id"`
}

type sendInput struct {
	ID   string `json:"id" jsonschema:"member id"`
	Text string `json:"text" jsonschema:"text typed into the member's pane, followed by Enter"`
}

type slowInput struct {
	Seconds *float64 `json:"seconds,omitempty" jsonschema:"total duration in seconds (default 5)"`
	Steps   *int     `json:"steps,omitempty" jsonschema:"number of progress steps (default 5)"`
}

type addToolInput struct {
	Name string `json:"name" jsonschema:"name of the tool to add ([a-zA-Z0-9_-], 1-64)"`
	// InputSchema, when set, is the new tool's input schema: the tool
	// validates its arguments against it (the go-sdk's mcp.AddTool does)
	// and answers with them (EchoResult).
	InputSchema map[string]any `json:"input_schema,omitempty" jsonschema:"input schema of the tool to add (JSON Schema, type object); when set the tool validates its arguments against it and echoes them"`
}

// EchoResult is the result of a tool added by fleet_add_tool with an
// input_schema: the arguments as the tool received them.
type EchoResult struct {
	// Fleet is the fleet name.
	Fleet string `json:"fleet"`
	// Tool is the tool called.
	Tool string `json:"tool"`
	// Args are the call's arguments, after validation.
	Args map[string]any `json:"args"`
}

// validName reports whether s is 1–64 characters of [A-Za-z0-9_-], plus
// '.' when dot is true.
func validName(s string, dot bool) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || dot && r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// anyMemberID reports whether id is acceptable with Config.AnyMemberID:
// 1–128 bytes of valid UTF-8 without control characters.
func anyMemberID(id string) bool {
	if len(id) < 1 || len(id) > 128 || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// memberDir is the file name (and tab label suffix) of member id: the id
// itself when it is a plain name, else "x" and its hex form (an id
// accepted with Config.AnyMemberID may hold "/" or "..").
func memberDir(id string) string {
	if validName(id, true) && id != "." && id != ".." {
		return id
	}
	return "x" + hex.EncodeToString([]byte(id))
}

// newMCPServer builds the MCP server with the stand-in's tools. The tools
// capability advertises listChanged.
func (d *Daemon) newMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fleetd-standin", Title: "fleetd stand-in (test equipment)", Version: Version},
		&mcp.ServerOptions{
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
			Instructions: "fleetd STAND-IN (test equipment, not the real fleetd) for fleet " + d.cfg.Name,
		})
	s.AddReceivingMiddleware(d.countExecutions)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_whoami", Description: "Report the caller's role in this fleet (primary, lead or worker)."}, d.whoami)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_list", Description: "List the fleet's members with state and liveStatus."}, d.list)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_spawn", Description: "Spawn a member in a new herdr tab of the fleet's workspace."}, d.spawn)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_status", Description: "Report one member's roster row."}, d.status)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_send", Description: "Type text (and Enter) into a member's pane."}, d.send)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_stop", Description: "Stop a member (close its tab). Lead-only."}, d.stop)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_slow", Description: "Test probe: wait in steps, reporting progress; honours cancellation."}, d.slow)
	mcp.AddTool(s, &mcp.Tool{Name: "fleet_add_tool", Description: "Test probe: add a trivial tool at runtime (clients get tools/list_changed)."}, d.addTool)
	s.AddTool(&mcp.Tool{Name: EchoSizeTool, Description: "Test probe: answer with a message of the requested size (and one progress notification of a requested size first).",
		InputSchema: echoSizeSchema}, d.echoSize)
	for _, n := range []string{"fleet_whoami", "fleet_list", "fleet_spawn", "fleet_status", "fleet_send", "fleet_stop", "fleet_slow", "fleet_add_tool", EchoSizeTool} {
		d.added[n] = true // fleet_add_tool must not replace a built-in
	}
	return s
}

// callerOf resolves the identity behind a tool call from the peer headers
// the daemon's /mcp wrapper set.
func (d *Daemon) callerOf(ctx context.Context, req *mcp.CallToolRequest) caller {
	var h http.Header
	if req != nil && req.Extra != nil {
		h = req.Extra.Header
	}
	pid, _ := strconv.Atoi(h.Get(headerPeerPID))
	errText := h.Get(headerPeerErr)
	if pid == 0 && errText == "" {
		errText = "no peer information"
	}
	return d.resolveCaller(ctx, pid, errText)
}

func (d *Daemon) whoami(ctx context.Context, req *mcp.CallToolRequest, _ emptyInput) (*mcp.CallToolResult, WhoamiResult, error) {
	c := d.callerOf(ctx, req)
	d.log.Printf("fleet_whoami: pid %d → %s %s", c.PID, c.Role, c.PaneID)
	return nil, WhoamiResult{Fleet: d.cfg.Name, Role: c.Role, CallerPID: c.PID, PaneID: c.PaneID}, nil
}

// row builds m's roster row, reading the pane's agent_status from herdr.
func (d *Daemon) row(ctx context.Context, m member) MemberRow {
	r := MemberRow{Fleet: d.cfg.Name, ID: m.ID, PaneID: m.PaneID, TabID: m.TabID, Worktree: m.Worktree,
		Profile: m.Profile, State: StateReady, LiveStatus: LiveUnknown}
	p, err := d.herdr.PaneGet(ctx, m.PaneID)
	if err != nil {
		return r // gone or unreadable: still "ready" (the measured bug)
	}
	switch p.AgentStatus {
	case herdr.StatusWorking, herdr.StatusIdle, herdr.StatusBlocked, herdr.StatusDone:
		r.LiveStatus = p.AgentStatus
	}
	return r
}

// lookup returns a copy of member id.
func (d *Daemon) lookup(id string) (member, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.members[id]
	if !ok {
		return member{}, false
	}
	return *m, true
}

func (d *Daemon) notFound(id string) error {
	return fmt.Errorf("%s: no member %q in fleet %s", ErrAgentNotFound, id, d.cfg.Name)
}

func (d *Daemon) list(ctx context.Context, _ *mcp.CallToolRequest, _ emptyInput) (*mcp.CallToolResult, ListResult, error) {
	d.mu.Lock()
	ms := make([]member, 0, len(d.order))
	for _, id := range d.order {
		ms = append(ms, *d.members[id])
	}
	d.mu.Unlock()
	res := ListResult{Fleet: d.cfg.Name, Members: make([]MemberRow, 0, len(ms))}
	for _, m := range ms {
		res.Members = append(res.Members, d.row(ctx, m))
	}
	return nil, res, nil
}

func (d *Daemon) status(ctx context.Context, _ *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, MemberRow, error) {
	m, ok := d.lookup(in.ID)
	if !ok {
		return nil, MemberRow{}, d.notFound(in.ID)
	}
	return nil, d.row(ctx, m), nil
}

func (d *Daemon) spawn(ctx context.Context, _ *mcp.CallToolRequest, in spawnInput) (*mcp.CallToolResult, MemberRow, error) {
	if d.cfg.WorktreeRoot == "" {
		return nil, MemberRow{}, fmt.Errorf("%s: fleet %s has no worktree root (FLEET_WORKTREE_ROOT)", ErrInvalid, d.cfg.Name)
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	id := in.ID
	d.mu.Lock()
	if id == "" {
		for n := 1; ; n++ {
			if _, taken := d.members["m"+strconv.Itoa(n)]; !taken {
				id = "m" + strconv.Itoa(n)
				break
			}
		}
	}
	_, taken := d.members[id]
	d.mu.Unlock()
	switch {
	case d.cfg.AnyMemberID:
		if !anyMemberID(id) {
			return nil, MemberRow{}, fmt.Errorf("%s: member id %q: want 1-128 bytes of UTF-8 without control characters", ErrInvalid, id)
		}
	case !validName(id, true) || id == "." || id == "..":
		return nil, MemberRow{}, fmt.Errorf("%s: member id %q: want 1-64 of [A-Za-z0-9._-]", ErrInvalid, id)
	}
	if taken {
		return nil, MemberRow{}, fmt.Errorf("%s: member %q already exists in fleet %s", ErrInvalid, id, d.cfg.Name)
	}
	if d.bus != nil {
		// The inbox first: a member that cannot get mail is not spawned.
		if err := d.bus.declareInbox(id); err != nil {
			return nil, MemberRow{}, fmt.Errorf("%s: inbox for %s in fleet %s: %v", ErrBroker, id, d.cfg.Name, err)
		}
		d.log.Printf("fleet=%s declared durable queue agent.%s.inbox", d.cfg.Name, id)
	}
	dir := filepath.Join(d.cfg.WorktreeRoot, memberDir(id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, MemberRow{}, fmt.Errorf("%s: worktree: %v", ErrInvalid, err)
	}
	tc, err := d.createTab(ctx, herdr.TabCreateParams{Cwd: dir, Label: d.memberLabel(id),
		Env: map[string]string{"FLEET_MEMBER_ID": id, "FLEET_NAME": d.cfg.Name}})
	if err != nil {
		return nil, MemberRow{}, fmt.Errorf("%s: spawn %s: %v", ErrHerdr, id, err)
	}
	m := member{ID: id, PaneID: tc.RootPane.PaneID, TabID: tc.Tab.TabID, WorkspaceID: tc.Tab.WorkspaceID, Worktree: dir, Profile: in.Profile}
	d.mu.Lock()
	d.members[id] = &m
	d.order = append(d.order, id)
	d.mu.Unlock()
	d.log.Printf("spawned member %s (pane=%s tab=%s label=%s)", id, m.PaneID, m.TabID, d.memberLabel(id))
	if in.Command != "" {
		if err := d.herdr.PaneSendInput(ctx, m.PaneID, in.Command, []string{"Enter"}); err != nil {
			return nil, MemberRow{}, fmt.Errorf("%s: run command in %s: %v", ErrHerdr, m.PaneID, err)
		}
	}
	return nil, d.row(ctx, m), nil
}

func (d *Daemon) send(ctx context.Context, _ *mcp.CallToolRequest, in sendInput) (*mcp.CallToolResult, AckResult, error) {
	m, ok := d.lookup(in.ID)
	if !ok {
		return nil, AckResult{}, d.notFound(in.ID)
	}
	if err := d.herdr.PaneSendInput(ctx, m.PaneID, in.Text, []string{"Enter"}); err != nil {
		return nil, AckResult{}, fmt.Errorf("%s: send to %s (pane %s): %v", ErrHerdr, m.ID, m.PaneID, err)
	}
	return nil, AckResult{Fleet: d.cfg.Name, ID: m.ID, OK: true}, nil
}

func (d *Daemon) stop(ctx context.Context, req *mcp.CallToolRequest, in idInput) (*mcp.CallToolResult, AckResult, error) {
	c := d.callerOf(ctx, req)
	if c.Role == RoleWorker {
		d.log.Printf("fleet_stop %s refused: caller pid %d is a worker (pane %s)", in.ID, c.PID, c.PaneID)
		return nil, AckResult{}, fmt.Errorf("%s: fleet_stop is lead-only", ErrForbidden)
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	m, ok := d.lookup(in.ID)
	if !ok {
		return nil, AckResult{}, d.notFound(in.ID)
	}
	if err := d.herdr.TabClose(ctx, m.TabID); err != nil && !herdr.IsCode(err, "tab_not_found") {
		return nil, AckResult{}, fmt.Errorf("%s: stop %s (tab %s): %v", ErrHerdr, m.ID, m.TabID, err)
	}
	d.mu.Lock()
	delete(d.members, m.ID)
	if i := indexOf(d.order, m.ID); i >= 0 {
		d.order = append(d.order[:i], d.order[i+1:]...)
	}
	d.mu.Unlock()
	d.log.Printf("stopped member %s (tab=%s) for %s pid %d", m.ID, m.TabID, c.Role, c.PID)
	return nil, AckResult{Fleet: d.cfg.Name, ID: m.ID, OK: true}, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func (d *Daemon) slow(ctx context.Context, req *mcp.CallToolRequest, in slowInput) (*mcp.CallToolResult, SlowResult, error) {
	seconds, steps := 5.0, 5
	if in.Seconds != nil {
		seconds = *in.Seconds
	}
	if in.Steps != nil {
		steps = *in.Steps
	}
	if seconds < 0 || seconds > 3600 || steps < 1 || steps > 10000 {
		return nil, SlowResult{}, fmt.Errorf("%s: seconds must be 0-3600 and steps 1-10000", ErrInvalid)
	}
	var token any
	var rid string
	if req != nil && req.Params != nil {
		token = req.Params.GetProgressToken()
		rid = requestIDOf(req.Params.Meta)
	}
	step := time.Duration(seconds / float64(steps) * float64(time.Second))
	t := time.NewTimer(step)
	defer t.Stop()
	for i := 1; i <= steps; i++ {
		select {
		case <-ctx.Done():
			if rid != "" {
				d.event("cancelled fleet_slow request-id=" + rid)
			} else {
				d.event("cancelled fleet_slow")
			}
			return nil, SlowResult{}, ctx.Err()
		case <-t.C:
		}
		if token != nil && req.Session != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(i), Total: float64(steps),
				Message: fmt.Sprintf("step %d/%d", i, steps),
			}); err != nil {
				d.log.Printf("fleet_slow: progress %d/%d: %v", i, steps, err)
			}
		}
		t.Reset(step)
	}
	return nil, SlowResult{Fleet: d.cfg.Name, Completed: true}, nil
}

func (d *Daemon) addTool(_ context.Context, _ *mcp.CallToolRequest, in addToolInput) (*mcp.CallToolResult, AckResult, error) {
	if !validName(in.Name, false) {
		return nil, AckResult{}, fmt.Errorf("%s: tool name %q: want 1-64 of [a-zA-Z0-9_-]", ErrInvalid, in.Name)
	}
	d.mu.Lock()
	dup := d.added[in.Name]
	d.added[in.Name] = true
	d.mu.Unlock()
	if dup {
		return nil, AckResult{}, fmt.Errorf("%s: tool %q already exists", ErrInvalid, in.Name)
	}
	name := in.Name
	if in.InputSchema != nil {
		if err := d.addEchoTool(name, in.InputSchema); err != nil {
			d.mu.Lock()
			delete(d.added, name)
			d.mu.Unlock()
			return nil, AckResult{}, fmt.Errorf("%s: tool %q: input_schema: %v", ErrInvalid, name, err)
		}
		d.log.Printf("added tool %s with its own input schema", name)
		return nil, AckResult{Fleet: d.cfg.Name, Tool: name, OK: true}, nil
	}
	mcp.AddTool(d.mcp, &mcp.Tool{Name: name, Description: "Trivial tool added at runtime by fleet_add_tool (stand-in test probe)."},
		func(context.Context, *mcp.CallToolRequest, emptyInput) (*mcp.CallToolResult, AckResult, error) {
			return nil, AckResult{Fleet: d.cfg.Name, Tool: name, OK: true}, nil
		})
	d.log.Printf("added tool %s", name)
	return nil, AckResult{Fleet: d.cfg.Name, Tool: name, OK: true}, nil
}

// addEchoTool adds tool name with input schema schema, answering with its
// (validated) arguments. mcp.AddTool panics on a schema it cannot use; that
// is returned as an error.
func (d *Daemon) addEchoTool(name string, schema map[string]any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mcp.AddTool(d.mcp, &mcp.Tool{Name: name, Description: "Tool added at runtime by fleet_add_tool with its own input schema (stand-in test probe); echoes its arguments.", InputSchema: schema},
		func(_ context.Context, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, EchoResult, error) {
			return nil, EchoResult{Fleet: d.cfg.Name, Tool: name, Args: args}, nil
		})
	return nil
}
