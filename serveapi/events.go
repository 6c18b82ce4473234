package serveapi

import (
	"errors"
	"fmt"
	"strings"
	"time"

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
	Kinds  []string `json:"kinds,omitempty" jsonschema:"event kinds (fleet.phase, fleet.restart, member.verdict, control, config.reload, guard.refusal, federation.request, federation.host, call, notify); a prefix such as member selects member.*"`
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
	for _, k := range a.Kinds {
		if !journal.KnownKind(k) {
			return q, fmt.Errorf("kind %q: no such event kind; the kinds are %s (a prefix such as member selects member.*)", k, strings.Join(journal.AllKinds, ", "))
		}
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
