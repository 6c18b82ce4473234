package herdr

import "encoding/json"

// Field names and shapes below mirror the `success_response` schema of herdr protocol 20
// (herdr's API schema, ../shared/ref/herdr-api.schema.json beside the clone; $defs PaneInfo, TabInfo, WorkspaceInfo, …).
// Unknown fields in responses are ignored, so newer releases that add fields still decode.

// Agent status values of PaneInfo/TabInfo/WorkspaceInfo.agent_status (schema $defs AgentStatus).
// A plain shell shows StatusUnknown; a headless fleet should treat idle and done alike
// (herdr src/api/schema).
const (
	StatusIdle    = "idle"
	StatusWorking = "working"
	StatusBlocked = "blocked"
	StatusDone    = "done"
	StatusUnknown = "unknown"
)

// Read sources accepted by pane.read (schema $defs ReadSource).
const (
	SourceVisible         = "visible"
	SourceRecent          = "recent"
	SourceRecentUnwrapped = "recent_unwrapped"
	SourceDetection       = "detection"
)

// Capabilities is ping's optional capabilities object (schema $defs ServerCapabilities).
type Capabilities struct {
	// LiveHandoff reports whether the server can hand panes over to a new server binary.
	LiveHandoff bool `json:"live_handoff"`
	// DetachedServerDaemon is true when the server leads its own session (getsid(0)==getpid()).
	DetachedServerDaemon bool `json:"detached_server_daemon"`
}

// Pong is the result of ping (result type "pong").
type Pong struct {
	// Version is the server's release, e.g. "0.8.0".
	Version string `json:"version"`
	// Protocol is the wire protocol number (20 at herdr 0.8.0); herdr's CLI requires an exact match.
	Protocol int `json:"protocol"`
	// Capabilities is nil when the server omits it (or sends null).
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// PaneInfo describes one pane (schema $defs PaneInfo). It carries no pids; see ProcessInfo.
type PaneInfo struct {
	// PaneID is the public pane id, "<workspace>:p<N>", e.g. "w1:p2".
	PaneID string `json:"pane_id"`
	// TerminalID ("term_<hex>") is unique to the pane's PTY and survives moves; use it as the
	// pane's fingerprint because pane ids can reappear across restarts.
	TerminalID string `json:"terminal_id"`
	// WorkspaceID is the id of the pane's workspace, e.g. "w1".
	WorkspaceID string `json:"workspace_id"`
	// TabID is the id of the pane's tab, e.g. "w1:t1".
	TabID string `json:"tab_id"`
	// Focused reports whether the pane is the focused one.
	Focused bool `json:"focused"`
	// Cwd is the pane's tracked directory; empty when herdr omits it.
	Cwd string `json:"cwd,omitempty"`
	// ForegroundCwd is the directory of the PTY's foreground process; empty when omitted.
	ForegroundCwd string `json:"foreground_cwd,omitempty"`
	// Label is a manual label (pane.rename/layout.apply); empty when omitted.
	Label string `json:"label,omitempty"`
	// Agent is the detected agent kind, e.g. "codex"; empty when none.
	Agent string `json:"agent,omitempty"`
	// AgentStatus is one of the Status* constants.
	AgentStatus string `json:"agent_status"`
	// Revision rises on title, metadata and token changes, not on terminal output.
	Revision uint64 `json:"revision"`
	// Title is the pane's title as a client reported it (pane.report_metadata); empty when
	// omitted.
	Title string `json:"title,omitempty"`
	// DisplayAgent is the agent name a client asked herdr to show; empty when omitted.
	DisplayAgent string `json:"display_agent,omitempty"`
	// StateLabels are the labels clients reported for the pane (pane.report_metadata), which
	// herdr shows in its sidebar; nil when none.
	StateLabels map[string]string `json:"state_labels,omitempty"`
}

// TabInfo describes one tab (schema $defs TabInfo).
type TabInfo struct {
	// TabID is "<workspace>:t<N>", e.g. "w1:t1".
	TabID string `json:"tab_id"`
	// WorkspaceID is the tab's workspace.
	WorkspaceID string `json:"workspace_id"`
	// Number is the tab's 1-based position within its workspace.
	Number int `json:"number"`
	// Label defaults to the tab number as a string.
	Label string `json:"label"`
	// Focused reports whether the tab is its workspace's active tab in the focused workspace.
	Focused bool `json:"focused"`
	// PaneCount is the number of panes in the tab.
	PaneCount int `json:"pane_count"`
	// AgentStatus aggregates the tab's panes (one of the Status* constants).
	AgentStatus string `json:"agent_status"`
}

// WorkspaceInfo describes one workspace (schema $defs WorkspaceInfo).
type WorkspaceInfo struct {
	// WorkspaceID is "w<N>", e.g. "w1".
	WorkspaceID string `json:"workspace_id"`
	// Number is the workspace's 1-based position.
	Number int `json:"number"`
	// Label is the workspace's label.
	Label string `json:"label"`
	// Focused reports whether this is the focused workspace.
	Focused bool `json:"focused"`
	// PaneCount counts panes over all tabs.
	PaneCount int `json:"pane_count"`
	// TabCount counts tabs.
	TabCount int `json:"tab_count"`
	// ActiveTabID is the id of the workspace's active tab.
	ActiveTabID string `json:"active_tab_id"`
	// AgentStatus aggregates the workspace's panes (one of the Status* constants).
	AgentStatus string `json:"agent_status"`
}

// WorkspaceCreateParams are workspace.create's params. Env keys must be non-empty and contain
// no '=' or NUL (else invalid_env); herdr's own HERDR_* variables override them (herdr src/pane.rs).
type WorkspaceCreateParams struct {
	// Cwd is the root pane's directory; empty lets the server choose.
	Cwd string `json:"cwd,omitempty"`
	// Label is the workspace label; empty lets the server choose.
	Label string `json:"label,omitempty"`
	// Focus focuses the new workspace.
	Focus bool `json:"focus"`
	// Env is added to the root pane's environment.
	Env map[string]string `json:"env,omitempty"`
}

// WorkspaceCreated is workspace.create's result (type "workspace_created").
type WorkspaceCreated struct {
	// Workspace is the new workspace.
	Workspace WorkspaceInfo `json:"workspace"`
	// Tab is its first tab.
	Tab TabInfo `json:"tab"`
	// RootPane is the first tab's pane.
	RootPane PaneInfo `json:"root_pane"`
}

// TabCreateParams are tab.create's params. With WorkspaceID empty the server uses the active
// workspace and fails with workspace_not_found when there is none (herdr src/app/api/tabs.rs).
type TabCreateParams struct {
	// WorkspaceID selects the workspace; empty means the active one.
	WorkspaceID string `json:"workspace_id,omitempty"`
	// Cwd is the root pane's directory; empty lets the server choose.
	Cwd string `json:"cwd,omitempty"`
	// Label is the tab label; empty means the tab number.
	Label string `json:"label,omitempty"`
	// Focus focuses the new tab.
	Focus bool `json:"focus"`
	// Env is added to the root pane's environment (same rules as WorkspaceCreateParams.Env).
	Env map[string]string `json:"env,omitempty"`
}

// TabCreated is tab.create's result (type "tab_created").
type TabCreated struct {
	// Tab is the new tab.
	Tab TabInfo `json:"tab"`
	// RootPane is the new tab's pane.
	RootPane PaneInfo `json:"root_pane"`
}

// ForegroundProcess is one member of a pane's foreground process group
// (schema $defs PaneProcessInfoProcess).
type ForegroundProcess struct {
	// PID is the process id in the server's pid namespace.
	PID int `json:"pid"`
	// Name is the kernel comm (at most 15 bytes).
	Name string `json:"name"`
	// Argv is /proc/<pid>/cmdline split at NULs; nil when unreadable.
	Argv []string `json:"argv,omitempty"`
	// Cmdline is Argv joined with spaces.
	Cmdline string `json:"cmdline,omitempty"`
	// Cwd is the process's working directory; empty when unreadable.
	Cwd string `json:"cwd,omitempty"`
}

// ProcessInfo is pane.process_info's result (type "pane_process_info", field process_info).
// Zero values mean herdr omitted (or nulled) the field; tty is never filled in by herdr.
type ProcessInfo struct {
	// PaneID is the pane described.
	PaneID string `json:"pane_id"`
	// ShellPID is the pid of the pane's first process; it leads its own session (setsid), so any
	// process whose session id equals ShellPID belongs to the pane (herdr src/platform/linux.rs).
	ShellPID int `json:"shell_pid,omitempty"`
	// ForegroundProcessGroupID is the PTY's foreground group (tpgid); equals ShellPID at a prompt.
	ForegroundProcessGroupID int `json:"foreground_process_group_id,omitempty"`
	// ForegroundProcesses are the foreground group's members sorted by pid.
	ForegroundProcesses []ForegroundProcess `json:"foreground_processes,omitempty"`
}

// PaneReadParams are pane.read's params.
type PaneReadParams struct {
	// PaneID selects the pane.
	PaneID string `json:"pane_id"`
	// Source is one of the Source* constants.
	Source string `json:"source"`
	// Lines limits the text to the last N lines; zero means the server default.
	Lines int `json:"lines,omitempty"`
	// Format is "text" or "ansi"; empty means the server default ("text").
	Format string `json:"format,omitempty"`
	// StripANSI asks the server to remove escape sequences. It is always sent, so the Go zero
	// value requests raw text (herdr's own default when the field is absent is true).
	StripANSI bool `json:"strip_ansi"`
}

// PaneReadResult is pane.read's result (type "pane_read", field read).
type PaneReadResult struct {
	// PaneID, WorkspaceID and TabID locate the pane read.
	PaneID      string `json:"pane_id"`
	WorkspaceID string `json:"workspace_id"`
	TabID       string `json:"tab_id"`
	// Source echoes the source read.
	Source string `json:"source"`
	// Format is "text" or "ansi".
	Format string `json:"format"`
	// Text is the pane content.
	Text string `json:"text"`
	// Revision is the pane's PaneInfo.Revision at read time (not an output counter).
	Revision uint64 `json:"revision"`
	// Truncated reports that older content was dropped to honour Lines or the buffer size.
	Truncated bool `json:"truncated"`
}

// Rect is a layout rectangle in terminal cells (schema $defs PaneLayoutRect).
type Rect struct {
	// X and Y are the top-left cell, 0-based.
	X int `json:"x"`
	Y int `json:"y"`
	// Width and Height are in cells.
	Width  int `json:"width"`
	Height int `json:"height"`
}

// LayoutPane is one pane's place in a tab layout (schema $defs PaneLayoutPane).
type LayoutPane struct {
	// PaneID is the pane placed.
	PaneID string `json:"pane_id"`
	// Focused reports whether it is the tab's focused pane.
	Focused bool `json:"focused"`
	// Rect is its area.
	Rect Rect `json:"rect"`
}

// LayoutSplit is one split of a tab layout (schema $defs PaneLayoutSplit).
type LayoutSplit struct {
	// ID names the split.
	ID string `json:"id"`
	// Direction is "right" or "down".
	Direction string `json:"direction"`
	// Ratio is the first child's share, 0..1.
	Ratio float64 `json:"ratio"`
	// Rect is the split's area.
	Rect Rect `json:"rect"`
}

// Layout is one tab's layout (schema $defs PaneLayoutSnapshot).
type Layout struct {
	// WorkspaceID and TabID name the tab laid out.
	WorkspaceID string `json:"workspace_id"`
	TabID       string `json:"tab_id"`
	// Zoomed reports a zoomed pane.
	Zoomed bool `json:"zoomed"`
	// Area is the tab's whole area.
	Area Rect `json:"area"`
	// FocusedPaneID is the tab's focused pane.
	FocusedPaneID string `json:"focused_pane_id"`
	// Panes places every pane; Splits lists the splits between them.
	Panes  []LayoutPane  `json:"panes"`
	Splits []LayoutSplit `json:"splits"`
}

// Snapshot is session.snapshot's result (type "session_snapshot", field snapshot): one
// consistent bootstrap read of the whole server, without pids.
type Snapshot struct {
	// Version and Protocol are as in Pong.
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	// Focused* are the focused ids; empty when none.
	FocusedWorkspaceID string `json:"focused_workspace_id,omitempty"`
	FocusedTabID       string `json:"focused_tab_id,omitempty"`
	FocusedPaneID      string `json:"focused_pane_id,omitempty"`
	// Workspaces, Tabs and Panes list every entity.
	Workspaces []WorkspaceInfo `json:"workspaces"`
	Tabs       []TabInfo       `json:"tabs"`
	Panes      []PaneInfo      `json:"panes"`
	// Layouts has one entry per tab.
	Layouts []Layout `json:"layouts"`
	// Agents holds schema AgentInfo objects, kept raw.
	Agents []json.RawMessage `json:"agents"`
}
