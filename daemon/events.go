package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/notify"
	"github.com/fleetmgr/fleetmgr/proxy"
)

// EventsTool and NotifyTestTool are the manager tools of the journal and
// of notifications.
const (
	EventsTool     = proxy.ManagerToolPrefix + "events"
	NotifyTestTool = proxy.ManagerToolPrefix + "notify_test"
)

// EventsArgs are fleetmgr_events' arguments.
type EventsArgs struct {
	Fleets []string `json:"fleets,omitempty" jsonschema:"fleets (NAME or NAME@HOST) whose events are wanted; default every event of this host. A NAME@HOST is read from that host's journal"`
	Kinds  []string `json:"kinds,omitempty" jsonschema:"event kinds (fleet.phase, fleet.restart, member.verdict, control, config.reload, guard.refusal, federation.request, call, notify); a prefix such as member selects member.*"`
	Since  string   `json:"since,omitempty" jsonschema:"oldest event: a duration back from now (1h, 30m) or an RFC 3339 time"`
	Until  string   `json:"until,omitempty" jsonschema:"events before this: a duration back from now or an RFC 3339 time"`
	After  uint64   `json:"after,omitempty" jsonschema:"only events with seq above this (to follow the journal)"`
	Limit  int      `json:"limit,omitempty" jsonschema:"newest events kept (default 1000, at most 100000)"`
}

// EventsResult is fleetmgr_events' structured result: events oldest
// first.
type EventsResult struct {
	Events []journal.Event `json:"events"`
}

// ParseWhen reads a --since/--until value: a duration back from now, or
// an RFC 3339 time (a date 2006-01-02 is its midnight UTC).
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now must be positive", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (1h, 30m) nor a time (2026-12-03T09:00:00Z)", s)
}

// Query turns the arguments into a journal query.
func (a EventsArgs) Query(now time.Time) (journal.Query, error) {
	q := journal.Query{Fleets: a.Fleets, Kinds: a.Kinds, After: a.After, Limit: a.Limit}
	var err error
	if q.Since, err = ParseWhen(a.Since, now); err != nil {
		return q, fmt.Errorf("since: %w", err)
	}
	if q.Until, err = ParseWhen(a.Until, now); err != nil {
		return q, fmt.Errorf("until: %w", err)
	}
	if q.Limit < 0 || q.Limit > 100000 {
		return q, errors.New("limit must be 0 (default 1000) to 100000")
	}
	return q, nil
}

// NotifyTestResult is fleetmgr_notify_test's structured result.
type NotifyTestResult struct {
	Attempts []NotifyAttempt `json:"attempts"`
}

// NotifyAttempt is one sink's outcome of a test.
type NotifyAttempt struct {
	Rule  string `json:"rule"`
	Sink  string `json:"sink"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// NotifyAttemptsOf renders notify attempts as fleetmgr_notify_test's.
func NotifyAttemptsOf(at []notify.Attempt) []NotifyAttempt {
	out := make([]NotifyAttempt, 0, len(at))
	for _, a := range at {
		na := NotifyAttempt{Rule: a.Event.Rule, Sink: a.Sink, OK: a.Err == nil}
		if a.Err != nil {
			na.Error = a.Err.Error()
		}
		out = append(out, na)
	}
	return out
}

// addTools registers fleetmgr_events and fleetmgr_notify_test on s.
func (a *attention) addTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name: EventsTool,
		Description: "The journal: what happened, newest last. Fleet phase changes with their reason, restarts with their cause and the members they ended, member verdict changes (WORKING, STALLED, BLOCKED, IDLE, gone), " +
			"control actions with who asked (CLI uid/pid, MCP client, dashboard, peer host) and the outcome, config reloads, guard refusals, federation requests, every tool call through the mount (tool, caller, duration, result size, outcome), notifications. Kept across serve restarts. " +
			"A fleet NAME@HOST of another federated host is read from that host's own journal (a signed request; at most 1000 events, with host set), merged with this host's events about it; following (after) is not available for it.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in EventsArgs) (*mcp.CallToolResult, *EventsResult, error) {
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
		return nil, &EventsResult{Events: ev}, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        NotifyTestTool,
		Description: "Send a test notification through every sink of a [[notify]] rule (every rule when none is named) and report each sink's outcome.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Rule string `json:"rule,omitempty" jsonschema:"the rule's name; default every rule"`
	}) (*mcp.CallToolResult, *NotifyTestResult, error) {
		at, err := a.n.Test(ctx, in.Rule)
		if err != nil {
			return nil, nil, err
		}
		return nil, &NotifyTestResult{Attempts: NotifyAttemptsOf(at)}, nil
	})
}

// Events reads the journal: through serve's fleetmgr_events when a serve
// runs for the state dir (it holds the file), else from the file itself.
// A NAME@HOST of another host is read from that host's journal through
// serve (the signed read path), so it needs a running serve.
func (c *Client) Events(ctx context.Context, args EventsArgs) ([]journal.Event, error) {
	if _, err := args.Query(time.Now()); err != nil {
		return nil, err
	}
	sock := c.socket()
	if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		conn.Close()
		cs, err := c.session(ctx, sock, nil)
		if err != nil {
			return nil, err
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: EventsTool, Arguments: args})
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return nil, fmt.Errorf("%s: %s", EventsTool, resultText(res))
		}
		var r EventsResult
		if err := decodeStructured(res, &r); err != nil {
			return nil, fmt.Errorf("%s: unexpected result: %v", EventsTool, err)
		}
		return r.Events, nil
	}
	for _, n := range args.Fleets {
		if isRemoteName(n) && c.cfg.Federation != nil {
			if _, host, _ := proxy.SplitRemote(n); host != c.cfg.Federation.Host {
				return nil, c.errNeedsServe(n)
			}
		}
	}
	path := JournalPath(c.cfg)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return []journal.Event{}, nil
	}
	j, err := journal.Open(journal.Options{Path: path, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer j.Close()
	q, _ := args.Query(time.Now())
	return j.Query(q)
}

// NotifyTest runs fleetmgr_notify_test on the serve of the state dir
// (the sinks are reached from serve's environment, as real notifications
// are); ErrNoDaemon when none runs.
func (c *Client) NotifyTest(ctx context.Context, rule string) ([]NotifyAttempt, error) {
	sock := c.socket()
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil, ErrNoDaemon
	}
	conn.Close()
	cs, err := c.session(ctx, sock, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: NotifyTestTool, Arguments: map[string]any{"rule": rule}})
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return nil, errors.New(strings.TrimSpace(resultText(res)))
	}
	var r NotifyTestResult
	if err := decodeStructured(res, &r); err != nil {
		return nil, fmt.Errorf("%s: unexpected result: %v", NotifyTestTool, err)
	}
	return r.Attempts, nil
}
