package herdr

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"
)

// Push methods: events.subscribe, events.wait, session.snapshot, pane.report_metadata and
// notification.show are in herdr's protocol-20 API schema (herdr's `herdr api schema --json` at
// commit 10974c82) and, by the 0.9.x release reports, in protocol 22.

// HasPush reports whether a server speaking protocol p is known to serve the push methods
// (events.subscribe, events.wait, session.snapshot, pane.report_metadata, notification.show):
// protocol 20 (0.8.1/0.8.2, whose schema lists them) and later. Protocol 19 (0.8.0) and
// anything unknown are not relied on: fleetmgr samples them as before. A server that answers
// one of the methods with invalid_request anyway is treated as lacking them (see
// IsMethodMissing).
func HasPush(protocol int) bool { return protocol >= 20 }

// PushLiveOnly reports whether lifecycle subscriptions of protocol p start with live events
// only and a lagging subscriber gets events_lost and is closed (herdr 0.9.0 and later, protocol
// 22; herdr issues #1270 and #4178). Before, a new lifecycle subscription first replays the
// retained events (the last 512 of all kinds) and a lagging one silently skips what it lost.
func PushLiveOnly(protocol int) bool { return protocol >= 22 }

// CodeEventsLost is the error code of the line herdr 0.9.x writes on a subscription that lagged
// behind its retained events, just before it closes the connection (herdr issue #4178): the
// subscriber must subscribe again and take a new session.snapshot.
const CodeEventsLost = "events_lost"

// IsMethodMissing reports whether err is herdr's answer to a method it does not serve:
// invalid_request whose message names an unknown variant (herdr's serde error for an unknown
// method).
func IsMethodMissing(err error) bool {
	var he *Error
	return errors.As(err, &he) && he.Code == "invalid_request" && strings.Contains(he.Message, "unknown variant")
}

// Subscription types of events.subscribe (schema request $defs Subscription). The lifecycle
// types take no filter; SubAgentStatus needs PaneID.
const (
	SubPaneCreated       = "pane.created"
	SubPaneClosed        = "pane.closed"
	SubPaneUpdated       = "pane.updated"
	SubPaneExited        = "pane.exited"
	SubPaneAgentDetected = "pane.agent_detected"
	SubAgentStatus       = "pane.agent_status_changed"
)

// Event kinds as they appear in an Event (schema event $defs EventKind, snake_case; the
// filtered agent-status event arrives as "pane.agent_status_changed" and Kind maps it to
// KindAgentStatus).
const (
	KindPaneCreated       = "pane_created"
	KindPaneClosed        = "pane_closed"
	KindPaneUpdated       = "pane_updated"
	KindPaneExited        = "pane_exited"
	KindPaneAgentDetected = "pane_agent_detected"
	KindAgentStatus       = "pane_agent_status_changed"
)

// Subscription is one entry of events.subscribe's params.subscriptions.
type Subscription struct {
	// Type is one of the Sub* constants (or any other type of the schema).
	Type string `json:"type"`
	// PaneID is required by the per-pane types (SubAgentStatus).
	PaneID string `json:"pane_id,omitempty"`
	// AgentStatus filters SubAgentStatus to one status; when the pane already shows it, the
	// event fires at once.
	AgentStatus string `json:"agent_status,omitempty"`
}

// Event is one line of a subscription, or the event an events.wait matched. Lifecycle events
// come as {"event":"pane_exited","data":{"type":"pane_exited",…}}, the filtered ones as
// {"event":"pane.agent_status_changed","data":{…}} (no type inside data).
type Event struct {
	// Event names the kind as sent.
	Event string `json:"event"`
	// Data is the event's object, kept raw; Decode reads the fields fleetmgr uses.
	Data json.RawMessage `json:"data"`
}

// Kind is e.Event in the lifecycle spelling: "pane.agent_status_changed" becomes
// "pane_agent_status_changed".
func (e Event) Kind() string { return strings.ReplaceAll(e.Event, ".", "_") }

// EventData holds the fields of an event's data that fleetmgr reads; absent ones are zero.
type EventData struct {
	// Type is the lifecycle kind (absent in filtered events).
	Type string `json:"type,omitempty"`
	// PaneID and WorkspaceID name the pane or workspace concerned.
	PaneID      string `json:"pane_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	// AgentStatus is the new status of a pane_agent_status_changed event.
	AgentStatus string `json:"agent_status,omitempty"`
	// Agent is the detected agent kind, when given.
	Agent string `json:"agent,omitempty"`
	// Pane is the pane of pane_created and pane_updated events.
	Pane *PaneInfo `json:"pane,omitempty"`
}

// Decode reads e's data. A pane_created or pane_updated event's PaneID is taken from its pane.
func (e Event) Decode() (EventData, error) {
	var d EventData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return d, fmt.Errorf("herdr: malformed %s event: %w", e.Event, err)
	}
	if d.PaneID == "" && d.Pane != nil {
		d.PaneID, d.WorkspaceID = d.Pane.PaneID, d.Pane.WorkspaceID
	}
	return d, nil
}

// Stream is an open events.subscribe connection. herdr writes one event per line on it and
// takes any byte the client writes, or a half-close, as the client leaving (herdr
// src/ipc.rs probe_stream_closed), so a Stream never writes after the request line. Next
// must be called from one goroutine; Close may be called from any.
type Stream struct {
	conn net.Conn
	br   *bufio.Reader
	stop func() bool
}

// Subscribe opens a connection, sends events.subscribe with subs and waits (within c.Timeout)
// for the acknowledgement {"type":"subscription_started"}. A refusal (an unknown pane, an
// unsupported type, a server lacking the method) is returned as *Error. The stream ends when
// ctx ends, Close is called, or herdr closes it.
func (c *Client) Subscribe(ctx context.Context, subs []Subscription) (*Stream, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if subs == nil {
		subs = []Subscription{}
	}
	params, err := json.Marshal(struct {
		Subscriptions []Subscription `json:"subscriptions"`
	}{subs})
	if err != nil {
		return nil, fmt.Errorf("herdr: encode events.subscribe params: %w", err)
	}
	line, err := json.Marshal(request{ID: "sub-" + strconv.FormatUint(rand.Uint64(), 36), Method: "events.subscribe", Params: params})
	if err != nil {
		return nil, fmt.Errorf("herdr: encode events.subscribe request: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("herdr: events.subscribe: %w", err)
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		conn.Close()
		return nil, fmt.Errorf("herdr: events.subscribe: write: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	ack, err := readLine(br, MaxResponseBytes)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("herdr: events.subscribe: read: %w", ctxErr(dctx, err))
	}
	var started struct {
		Type string `json:"type"`
	}
	if err := DecodeResponse(ack, &started); err != nil {
		conn.Close()
		var he *Error
		if errors.As(err, &he) {
			return nil, he
		}
		return nil, fmt.Errorf("herdr: events.subscribe: %w", err)
	}
	if started.Type != "subscription_started" {
		conn.Close()
		return nil, fmt.Errorf("herdr: events.subscribe: result type %q, want \"subscription_started\"", started.Type)
	}
	_ = conn.SetDeadline(time.Time{})
	s := &Stream{conn: conn, br: br}
	s.stop = context.AfterFunc(ctx, func() { _ = conn.Close() })
	return s, nil
}

// Next blocks for the next event. herdr's events_lost line (0.9.x) and any other error line
// are returned as *Error (the connection is then over); a closed connection is io.EOF or a
// network error.
func (s *Stream) Next() (Event, error) {
	line, err := readLine(s.br, MaxResponseBytes)
	if err != nil {
		return Event{}, err
	}
	var probe struct {
		ID    *string `json:"id"`
		Error *Error  `json:"error"`
		Event string  `json:"event"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		return Event{}, fmt.Errorf("herdr: malformed event line: %w", err)
	}
	if probe.Error != nil {
		return Event{}, probe.Error
	}
	var e Event
	if err := json.Unmarshal(line, &e); err != nil || e.Event == "" {
		return Event{}, fmt.Errorf("herdr: malformed event line %.200q", line)
	}
	return e, nil
}

// Close ends the subscription (herdr sees the connection go).
func (s *Stream) Close() error {
	s.stop()
	return s.conn.Close()
}

// EventMatch is events.wait's match_event. herdr implements only the
// pane_agent_status_changed form (others: unsupported_event_wait_match; herdr src/api/wait.rs).
type EventMatch struct {
	// Event is the kind, e.g. KindAgentStatus.
	Event string `json:"event"`
	// PaneID is the pane to watch.
	PaneID string `json:"pane_id"`
	// AgentStatus is the status waited for; when the pane shows it already, the wait ends at
	// once.
	AgentStatus string `json:"agent_status,omitempty"`
}

// EventsWait calls events.wait and blocks until herdr reports a matching event or timeout
// passes (herdr's error code "timeout"). The call's own deadline is timeout plus c.Timeout.
func (c *Client) EventsWait(ctx context.Context, match EventMatch, timeout time.Duration) (*Event, error) {
	p := struct {
		MatchEvent EventMatch `json:"match_event"`
		TimeoutMS  int64      `json:"timeout_ms"`
	}{match, timeout.Milliseconds()}
	cc := *c
	base := c.Timeout
	if base <= 0 {
		base = DefaultTimeout
	}
	cc.Timeout = timeout + base
	var r struct {
		Event Event `json:"event"`
	}
	if err := cc.typed(ctx, "events.wait", p, "wait_matched", &r); err != nil {
		return nil, err
	}
	return &r.Event, nil
}

// ReportMetadataParams are pane.report_metadata's params (schema request $defs
// PaneReportMetadataParams), the part fleetmgr uses: labels herdr shows for the pane in its own
// sidebar, kept per reporting source.
type ReportMetadataParams struct {
	// PaneID is the pane described.
	PaneID string `json:"pane_id"`
	// Source names the reporter (e.g. "fleetmgr"); each source's labels are kept apart.
	Source string `json:"source"`
	// StateLabels replace this source's labels for the pane.
	StateLabels map[string]string `json:"state_labels,omitempty"`
	// ClearStateLabels removes this source's labels.
	ClearStateLabels bool `json:"clear_state_labels,omitempty"`
	// Seq orders reports of one source: an older one than the last seen is ignored. 0 omits it.
	Seq uint64 `json:"seq,omitempty"`
	// TTLMS makes the report expire after that many milliseconds (1..86400000); 0 omits it.
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

// ReportMetadata calls pane.report_metadata (result "ok").
func (c *Client) ReportMetadata(ctx context.Context, p ReportMetadataParams) error {
	return c.typed(ctx, "pane.report_metadata", p, "ok", nil)
}

// NotificationParams are notification.show's params.
type NotificationParams struct {
	// Title is required.
	Title string `json:"title"`
	// Body is optional text.
	Body string `json:"body,omitempty"`
	// Sound is "none", "done" or "request"; empty omits it.
	Sound string `json:"sound,omitempty"`
}

// NotificationResult is notification.show's result (type "notification_show").
type NotificationResult struct {
	// Shown reports whether herdr showed it.
	Shown bool `json:"shown"`
	// Reason is shown, disabled, rate_limited, no_foreground_client or busy.
	Reason string `json:"reason"`
}

// NotificationShow calls notification.show.
func (c *Client) NotificationShow(ctx context.Context, p NotificationParams) (*NotificationResult, error) {
	var r NotificationResult
	if err := c.typed(ctx, "notification.show", p, "notification_show", &r); err != nil {
		return nil, err
	}
	return &r, nil
}
