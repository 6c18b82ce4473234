package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// addTools registers fleetmgr_events and fleetmgr_notify_test on s.
func (a *attention) addTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name: serveapi.EventsTool,
		Description: "The journal: what happened, newest last. Fleet phase changes with their reason, restarts with their cause and the members they ended, member verdict changes (WORKING, STALLED, BLOCKED, IDLE, gone), " +
			"control actions with who asked (CLI uid/pid, MCP client, dashboard, peer host) and the outcome, config reloads, guard refusals, federation requests, every tool call through the mount (tool, caller, duration, result size, outcome), notifications. Kept across serve restarts. " +
			"A fleet NAME@HOST of another federated host is read from that host's own journal (a signed request; at most 1000 events, with host set), merged with this host's events about it; following (after) is not available for it.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in serveapi.EventsArgs) (*mcp.CallToolResult, *serveapi.EventsResult, error) {
		q, err := in.Query(time.Now())
		if err != nil {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		ev, err := a.queryEvents(ctx, in.Fleets, q)
		if errors.Is(err, ErrFollowRemote) {
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		if err != nil {
			return nil, nil, err
		}
		if ev == nil {
			ev = []journal.Event{}
		}
		return nil, &serveapi.EventsResult{Events: ev}, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        serveapi.NotifyTestTool,
		Description: "Send a test notification through every sink of a [[notify]] rule (every rule when none is named) and report each sink's outcome.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Rule string `json:"rule,omitempty" jsonschema:"the rule's name; default every rule"`
	}) (*mcp.CallToolResult, *serveapi.NotifyTestResult, error) {
		at, err := a.n.Test(ctx, in.Rule)
		if err != nil {
			return nil, nil, err
		}
		return nil, &serveapi.NotifyTestResult{Attempts: serveapi.NotifyAttemptsOf(at)}, nil
	})
}
