package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// RosterTool is the fleetd tool a roster comes from (docs/fleetd.md "Tools status reads").
const RosterTool = "fleet_list"

// RosterRow is one member as fleet_list reports it (the fields status
// needs; unknown fields are ignored).
type RosterRow struct {
	// ID is the member id (id, memberId, member_id, agentId or name).
	ID string
	// PaneID is the member's herdr pane (pane_id, paneId or pane).
	PaneID string
	// TabID is the pane's tab (tab_id, tabId or tab).
	TabID string
	// Worktree is the member's working directory (worktree,
	// worktreePath, worktree_path or cwd); "" when not reported.
	Worktree string
	// State is fleetd's state for the member, e.g. "ready".
	State string
	// LiveStatus is fleetd's liveStatus: the member's claim.
	LiveStatus string
}

// RosterFunc reads a fleet's roster. fleetmgr is outside every herdr pane,
// so fleetd resolves it as primary (docs/fleetd.md "Caller identity").
type RosterFunc func(ctx context.Context, f *registry.Fleet) ([]RosterRow, error)

// BrokerProbe reports a fleet's broker vhost and inbox depths; it returns a
// Broker with Configured=false when no broker is configured. It must honour
// ctx. Options.Broker defaults to ManagerBroker.
type BrokerProbe func(ctx context.Context, f *registry.Fleet) (*Broker, error)

// MCPRoster returns a RosterFunc that opens one MCP session per call to the
// fleet's fleetd at http://127.0.0.1:<port><mcp_path>, calls fleet_list and
// closes the session. The serve daemon uses its long-lived upstream
// sessions instead (proxy package).
func MCPRoster(version string) RosterFunc {
	client := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr-status", Version: version}, nil)
	base := &http.Transport{DisableKeepAlives: true}
	return func(ctx context.Context, f *registry.Fleet) ([]RosterRow, error) {
		// Every request of this session, including the SDK's own
		// notifications/cancelled (sent with a fresh 5 s timeout when a call
		// is cancelled), ends with ctx: a hung fleetd cannot hold us longer.
		httpc := &http.Client{Transport: boundTransport{base: base, ctx: ctx}}
		endpoint := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port)) + f.MCPPath
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: httpc, MaxRetries: -1}, nil)
		if err != nil {
			return nil, fmt.Errorf("cannot open an MCP session at %s: %w", endpoint, err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: RosterTool, Arguments: map[string]any{}})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RosterTool, err)
		}
		return ParseRoster(res)
	}
}

// boundTransport ends every request when ctx ends, whatever the request's
// own context says.
type boundTransport struct {
	base http.RoundTripper
	ctx  context.Context
}

// RoundTrip sends r with a context cancelled by either r's context or ctx.
func (b boundTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := b.ctx.Err(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(b.ctx, cancel)
	resp, err := b.base.RoundTrip(r.WithContext(rctx))
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	resp.Body = &releaseBody{ReadCloser: resp.Body, release: func() { stop(); cancel() }}
	return resp, nil
}

// releaseBody runs release when the body is closed.
type releaseBody struct {
	io.ReadCloser
	release func()
}

// Close closes the body and releases its context.
func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// ParseRoster decodes a fleet_list result: the structured content (or, when
// absent, the text content as JSON) holding a "members" (or "agents")
// array of rows. Field names are matched tolerantly (pane_id / paneId,
// liveStatus / live_status, …) because the real fleetd's shape is only
// partly known (docs/fleetd.md "Tools status reads").
func ParseRoster(res *mcp.CallToolResult) ([]RosterRow, error) {
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return nil, fmt.Errorf("%s failed: %s", RosterTool, text.String())
	}
	var raw []byte
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		raw = b
	} else {
		raw = []byte(text.String())
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("%s: result is not a JSON object: %v", RosterTool, err)
	}
	var arr json.RawMessage
	for _, k := range []string{"members", "agents", "roster"} {
		if v, ok := top[k]; ok {
			arr = v
			break
		}
	}
	if arr == nil {
		return nil, errors.New(RosterTool + ": result has no members array")
	}
	var rows []map[string]any
	if err := json.Unmarshal(arr, &rows); err != nil {
		return nil, fmt.Errorf("%s: members: %v", RosterTool, err)
	}
	out := make([]RosterRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, RosterRow{
			ID:         pick(r, "id", "memberId", "member_id", "agentId", "name"),
			PaneID:     pick(r, "pane_id", "paneId", "pane"),
			TabID:      pick(r, "tab_id", "tabId", "tab"),
			Worktree:   pick(r, "worktree", "worktreePath", "worktree_path", "cwd"),
			State:      pick(r, "state"),
			LiveStatus: pick(r, "liveStatus", "live_status"),
		})
	}
	return out, nil
}

// pick returns the first string value among keys.
func pick(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok {
			return s
		}
	}
	return ""
}

// durMS is d in milliseconds as a float with microsecond precision.
func durMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ManagerBroker is the BrokerProbe over lifecycle's VhostHealth:
// a connection to the fleet's own vhost with the fleet's own credentials,
// then every queue's depth. Without a [broker] table it reports "no broker
// configured".
func ManagerBroker(m *lifecycle.Manager) BrokerProbe {
	return func(ctx context.Context, f *registry.Fleet) (*Broker, error) {
		ok, depths, err := m.VhostHealth(ctx, f.Name)
		if errors.Is(err, lifecycle.ErrNoBroker) {
			return &Broker{Note: "no broker configured"}, nil
		}
		b := &Broker{Configured: true, Vhost: f.Vhost, Reachable: ok, Inboxes: depths}
		if err != nil {
			b.Note = err.Error()
		}
		return b, nil
	}
}
