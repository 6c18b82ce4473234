package herdr

import (
	"context"
	"encoding/json"
	"fmt"
)

// typed performs method, checks the result's "type" against want and decodes the result object
// into out (skipped when out is nil).
func (c *Client) typed(ctx context.Context, method string, params any, want string, out any) error {
	var raw json.RawMessage
	if err := c.Call(ctx, method, params, &raw); err != nil {
		return err
	}
	var env struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("herdr: %s: malformed result: %w", method, err)
	}
	if env.Type != want {
		return fmt.Errorf("herdr: %s: result type %q, want %q", method, env.Type, want)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("herdr: %s: malformed result: %w", method, err)
	}
	return nil
}

// Ping calls ping (result type "pong").
func (c *Client) Ping(ctx context.Context) (*Pong, error) {
	var p Pong
	if err := c.typed(ctx, "ping", nil, "pong", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WorkspaceCreate calls workspace.create (result type "workspace_created").
func (c *Client) WorkspaceCreate(ctx context.Context, p WorkspaceCreateParams) (*WorkspaceCreated, error) {
	var r WorkspaceCreated
	if err := c.typed(ctx, "workspace.create", p, "workspace_created", &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// TabCreate calls tab.create (result type "tab_created"); workspace_not_found when p.WorkspaceID
// is empty and no workspace exists.
func (c *Client) TabCreate(ctx context.Context, p TabCreateParams) (*TabCreated, error) {
	var r TabCreated
	if err := c.typed(ctx, "tab.create", p, "tab_created", &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// workspaceParams is the params of tab.list and pane.list.
type workspaceParams struct {
	WorkspaceID string `json:"workspace_id,omitempty"`
}

// TabList calls tab.list (result type "tab_list"); workspaceID "" lists every workspace's tabs.
func (c *Client) TabList(ctx context.Context, workspaceID string) ([]TabInfo, error) {
	var r struct {
		Tabs []TabInfo `json:"tabs"`
	}
	if err := c.typed(ctx, "tab.list", workspaceParams{workspaceID}, "tab_list", &r); err != nil {
		return nil, err
	}
	return r.Tabs, nil
}

// PaneList calls pane.list (result type "pane_list"); workspaceID "" lists every pane.
func (c *Client) PaneList(ctx context.Context, workspaceID string) ([]PaneInfo, error) {
	var r struct {
		Panes []PaneInfo `json:"panes"`
	}
	if err := c.typed(ctx, "pane.list", workspaceParams{workspaceID}, "pane_list", &r); err != nil {
		return nil, err
	}
	return r.Panes, nil
}

// paneParams is the params of methods that take only a pane id.
type paneParams struct {
	PaneID string `json:"pane_id"`
}

// PaneGet calls pane.get (result type "pane_info"); pane_not_found for an unknown pane.
func (c *Client) PaneGet(ctx context.Context, paneID string) (*PaneInfo, error) {
	var r struct {
		Pane PaneInfo `json:"pane"`
	}
	if err := c.typed(ctx, "pane.get", paneParams{paneID}, "pane_info", &r); err != nil {
		return nil, err
	}
	return &r.Pane, nil
}

// PaneProcessInfo calls pane.process_info (result type "pane_process_info").
func (c *Client) PaneProcessInfo(ctx context.Context, paneID string) (*ProcessInfo, error) {
	var r struct {
		ProcessInfo ProcessInfo `json:"process_info"`
	}
	if err := c.typed(ctx, "pane.process_info", paneParams{paneID}, "pane_process_info", &r); err != nil {
		return nil, err
	}
	return &r.ProcessInfo, nil
}

// PaneSendInput calls pane.send_input: text (paste-encoded by herdr) then keys such as "Enter".
// This is how `herdr pane run ID CMD` runs a command: text=CMD, keys=["Enter"] (herdr src/cli/pane.rs pane_run).
// Empty text and nil keys are omitted.
func (c *Client) PaneSendInput(ctx context.Context, paneID, text string, keys []string) error {
	p := struct {
		PaneID string   `json:"pane_id"`
		Text   string   `json:"text,omitempty"`
		Keys   []string `json:"keys,omitempty"`
	}{paneID, text, keys}
	return c.typed(ctx, "pane.send_input", p, "ok", nil)
}

// PaneSendText calls pane.send_text: raw bytes, no paste wrapping, no Enter.
func (c *Client) PaneSendText(ctx context.Context, paneID, text string) error {
	p := struct {
		PaneID string `json:"pane_id"`
		Text   string `json:"text"`
	}{paneID, text}
	return c.typed(ctx, "pane.send_text", p, "ok", nil)
}

// PaneRead calls pane.read (result type "pane_read").
func (c *Client) PaneRead(ctx context.Context, p PaneReadParams) (*PaneReadResult, error) {
	var r struct {
		Read PaneReadResult `json:"read"`
	}
	if err := c.typed(ctx, "pane.read", p, "pane_read", &r); err != nil {
		return nil, err
	}
	return &r.Read, nil
}

// PaneClose calls pane.close. herdr signals the pane's session HUP, TERM, KILL 250 ms apart and
// closes the tab (and workspace) when it was the last pane.
func (c *Client) PaneClose(ctx context.Context, paneID string) error {
	return c.typed(ctx, "pane.close", paneParams{paneID}, "ok", nil)
}

// TabClose calls tab.close; the last tab closes its workspace.
func (c *Client) TabClose(ctx context.Context, tabID string) error {
	p := struct {
		TabID string `json:"tab_id"`
	}{tabID}
	return c.typed(ctx, "tab.close", p, "ok", nil)
}

// SessionSnapshot calls session.snapshot (result type "session_snapshot").
func (c *Client) SessionSnapshot(ctx context.Context) (*Snapshot, error) {
	var r struct {
		Snapshot Snapshot `json:"snapshot"`
	}
	if err := c.typed(ctx, "session.snapshot", nil, "session_snapshot", &r); err != nil {
		return nil, err
	}
	return &r.Snapshot, nil
}

// ServerStop calls server.stop. herdr answers "ok" at once and then shuts down: every later
// request but ping gets server_unavailable, and from 0.8.2 a repeated server.stop gets "ok"
// too (earlier releases answer it server_unavailable; herdr issue #2612). The API socket goes
// only after every pane is gone, so use SocketReachable to wait for the end.
func (c *Client) ServerStop(ctx context.Context) error {
	return c.typed(ctx, "server.stop", nil, "ok", nil)
}
