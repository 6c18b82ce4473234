package herdrd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// Event delivery as herdr models it (herdr src/api/event_hub.rs, src/api/subscriptions.rs,
// src/api/wait.rs; 0.9.x behaviour from herdr issues #1270 and #4178 and pull request #4225):
// every event of every kind goes into one in-memory history that keeps the last
// Config.EventHistory (512) events; each subscription holds a cursor into it and is served by
// a loop that wakes every 100 ms.
const (
	// DefaultEventHistory is how many events the history retains (herdr's ring: 512).
	DefaultEventHistory = 512
	// eventTick is the delivery loop's period (herdr: 100 ms).
	eventTick = 100 * time.Millisecond
	// drainBatch bounds the events one subscription writes per tick from protocol 22 on
	// (pull request #4225 drains "in bounded batches"); before, it writes at most one.
	drainBatch = 64
)

// lifecycleKinds maps each lifecycle subscription type to its event kind.
var lifecycleKinds = map[string]string{}

func init() {
	for _, t := range []string{
		"workspace.created", "workspace.updated", "workspace.metadata_updated", "workspace.renamed",
		"workspace.moved", "workspace.reordered", "workspace.closed", "workspace.focused",
		"worktree.created", "worktree.opened", "worktree.removed",
		"tab.created", "tab.closed", "tab.focused", "tab.renamed", "tab.moved",
		"pane.created", "pane.closed", "pane.updated", "pane.focused", "pane.moved", "pane.exited",
		"pane.agent_detected", "layout.updated",
	} {
		lifecycleKinds[t] = strings.ReplaceAll(t, ".", "_")
	}
}

// event is one retained event.
type event struct {
	seq    uint64
	kind   string          // snake_case EventKind
	pane   string          // pane concerned, for the per-pane types
	status string          // new agent status (pane_agent_status_changed)
	data   json.RawMessage // the lifecycle data object, with its "type"
	sub    json.RawMessage // pane_agent_status_changed: the filtered data object (no "type")
}

// hub is the event history. It takes no other lock while holding its own.
type hub struct {
	mu     sync.Mutex
	limit  int
	events []event // retained, oldest first
	next   uint64  // seq of the next event; the first is 1
}

func newHub(limit int) *hub { return &hub{limit: limit, next: 1} }

// publish appends an event and drops the oldest beyond the limit.
func (h *hub) publish(e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.seq = h.next
	h.next++
	h.events = append(h.events, e)
	if n := len(h.events) - h.limit; n > 0 {
		h.events = append(h.events[:0:0], h.events[n:]...)
	}
}

// head returns the seq the next event will get.
func (h *hub) head() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next
}

// oldest returns the seq of the oldest retained event (head when none is retained).
func (h *hub) oldest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.oldestLocked()
}

func (h *hub) oldestLocked() uint64 {
	if len(h.events) == 0 {
		return h.next
	}
	return h.events[0].seq
}

// take returns up to max events at or after *cursor that match, advancing *cursor past every
// event examined (matching or not). lost reports that *cursor pointed at an evicted event: the
// events between it and the oldest retained one are gone.
func (h *hub) take(cursor *uint64, max int, match func(*event) bool) (out []event, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.oldestLocked(); *cursor < old {
		return nil, true
	}
	if len(h.events) == 0 {
		return nil, false
	}
	for i := int(*cursor - h.events[0].seq); i < len(h.events); i++ {
		e := &h.events[i]
		*cursor = e.seq + 1
		if match(e) {
			out = append(out, *e)
			if len(out) >= max {
				break
			}
		}
	}
	return out, false
}

// subSpec is one parsed subscription.
type subSpec struct {
	kind   string // event kind delivered
	pane   string // per-pane types
	status string // agent_status filter ("" for none)
}

func (sp subSpec) matches(e *event, liveFrom uint64) bool {
	if e.kind != sp.kind {
		return false
	}
	if sp.kind == herdr.KindAgentStatus {
		// A status subscription is always live: it does not replay history.
		return e.seq >= liveFrom && e.pane == sp.pane && (sp.status == "" || sp.status == e.status)
	}
	return true
}

// parseSubscriptions reads events.subscribe's params. Unknown types and per-pane types without a
// pane are badRequest; an unknown pane is pane_not_found; pane.output_matched and
// pane.scroll_changed are refused (invalid_params) because the stand-in does not produce them.
// Server.mu held.
func (s *Server) parseSubscriptions(raw json.RawMessage) ([]subSpec, error) {
	var p struct {
		Subscriptions []map[string]json.RawMessage `json:"subscriptions"`
	}
	if err := decodeParams(raw, &p, "subscriptions"); err != nil {
		return nil, err
	}
	var specs []subSpec
	for i, m := range p.Subscriptions {
		var typ, paneID string
		var status *string
		if err := json.Unmarshal(m["type"], &typ); err != nil || typ == "" {
			return nil, badRequest(fmt.Sprintf("subscriptions[%d]: missing field `type`", i))
		}
		if kind, ok := lifecycleKinds[typ]; ok {
			specs = append(specs, subSpec{kind: kind})
			continue
		}
		switch typ {
		case "pane.agent_status_changed":
			if err := json.Unmarshal(m["pane_id"], &paneID); err != nil || paneID == "" {
				return nil, badRequest(fmt.Sprintf("subscriptions[%d]: missing field `pane_id`", i))
			}
			if v, ok := m["agent_status"]; ok && string(v) != "null" {
				status = new(string)
				if err := json.Unmarshal(v, status); err != nil || statusRank(*status) < 0 {
					return nil, badRequest(fmt.Sprintf("subscriptions[%d]: unknown variant for field `agent_status`", i))
				}
			}
			if s.paneByID[paneID] == nil {
				return nil, apiErr("pane_not_found", "pane %s not found", paneID)
			}
			sp := subSpec{kind: herdr.KindAgentStatus, pane: paneID}
			if status != nil {
				sp.status = *status
			}
			specs = append(specs, sp)
		case "pane.output_matched", "pane.scroll_changed":
			return nil, apiErr("invalid_params", "subscription type %s is not served by the herdr stand-in", typ)
		default:
			return nil, badRequest(fmt.Sprintf("subscriptions[%d]: unknown variant `%s`", i, typ))
		}
	}
	return specs, nil
}

// statusEvents builds the two shapes of a pane_agent_status_changed event for p (Server.mu and
// p.mu not held by the caller's caller; the values are passed in).
func statusEvent(paneID, wsID, status, agent string, labels map[string]string) event {
	type data struct {
		Type        string            `json:"type,omitempty"`
		PaneID      string            `json:"pane_id"`
		WorkspaceID string            `json:"workspace_id"`
		AgentStatus string            `json:"agent_status"`
		Agent       string            `json:"agent,omitempty"`
		StateLabels map[string]string `json:"state_labels,omitempty"`
	}
	d := data{PaneID: paneID, WorkspaceID: wsID, AgentStatus: status, Agent: agent, StateLabels: labels}
	sub, _ := json.Marshal(d)
	d.Type = herdr.KindAgentStatus
	life, _ := json.Marshal(d)
	return event{kind: herdr.KindAgentStatus, pane: paneID, status: status, data: life, sub: sub}
}

// emit publishes a lifecycle event whose data is v (which must carry its "type").
func (s *Server) emit(kind, paneID string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encode event", "kind", kind, "err", err)
		return
	}
	s.hub.publish(event{kind: kind, pane: paneID, data: b})
}

// envelope encodes one event line as a subscription sends it.
func envelope(e *event) []byte {
	if e.kind == herdr.KindAgentStatus {
		b, _ := json.Marshal(struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}{"pane.agent_status_changed", e.sub})
		return b
	}
	b, _ := json.Marshal(struct {
		Event string          `json:"event"`
		Data  json.RawMessage `json:"data"`
	}{e.kind, e.data})
	return b
}

// subscribe answers events.subscribe: it checks the subscriptions (a refusal is one error
// line, then close), acknowledges with subscription_started and returns the loop that writes
// events on c until the client goes, the server stops, or (protocol 22) the subscriber lags.
func (s *Server) subscribe(id string, raw json.RawMessage) (resp []byte, stream func(ctx context.Context, c net.Conn)) {
	s.mu.Lock()
	specs, err := s.parseSubscriptions(raw)
	// Initial state: a status subscription whose filter the pane already matches fires at once
	// (herdr reads the pane when it subscribes).
	var initial []event
	if err == nil {
		for _, sp := range specs {
			if sp.kind != herdr.KindAgentStatus || sp.status == "" {
				continue
			}
			p := s.paneByID[sp.pane]
			st, agent, _, _ := p.agentState()
			if st == sp.status {
				initial = append(initial, statusEvent(p.id, p.tab.ws.id, st, agent, p.labels()))
			}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return s.errorLine(id, err), nil
	}
	liveFrom := s.hub.head()
	cursor := liveFrom
	replay := s.cfg.Protocol < 22
	for _, sp := range specs {
		if replay && sp.kind != herdr.KindAgentStatus {
			// Before 0.9.0 a lifecycle subscription starts at the oldest retained event
			// (herdr issue #1270).
			cursor = s.hub.oldest()
			break
		}
	}
	perTick := 1
	if s.cfg.Protocol >= 22 {
		perTick = drainBatch
	}
	resp, _ = json.Marshal(struct {
		ID     string `json:"id"`
		Result any    `json:"result"`
	}{id, struct {
		Type string `json:"type"`
	}{"subscription_started"}})
	return resp, func(ctx context.Context, c net.Conn) {
		write := func(line []byte) bool {
			_ = c.SetWriteDeadline(time.Now().Add(requestTimeout))
			_, err := c.Write(append(line, '\n'))
			return err == nil
		}
		for i := range initial {
			if !write(envelope(&initial[i])) {
				return
			}
		}
		match := func(e *event) bool {
			for _, sp := range specs {
				if sp.matches(e, liveFrom) {
					return true
				}
			}
			return false
		}
		t := time.NewTicker(eventTick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			evs, lost := s.hub.take(&cursor, perTick, match)
			if lost {
				if s.cfg.Protocol >= 22 {
					// 0.9.x: tell the subscriber and close (herdr issue #4178).
					s.log.Info("subscriber lagged: events_lost", "id", id)
					write(encodeError(id, apiErr(herdr.CodeEventsLost, "subscriber lagged behind the retained events; subscribe again and take a new session.snapshot")))
					return
				}
				// 0.8.2: carry on from the oldest retained event, silently.
				cursor = s.hub.oldest()
				evs, _ = s.hub.take(&cursor, perTick, match)
			}
			for i := range evs {
				if !write(envelope(&evs[i])) {
					return
				}
			}
		}
	}
}

// errorLine encodes err as a response to id (badRequest as invalid_request with id "" before
// protocol 22).
func (s *Server) errorLine(id string, err error) []byte {
	switch e := err.(type) {
	case badRequest:
		if s.cfg.Protocol >= 22 {
			return encodeError(id, &herdr.Error{Code: "invalid_request", Message: "invalid request: " + string(e)})
		}
		return invalidRequest(string(e))
	case *herdr.Error:
		return encodeError(id, e)
	default:
		return encodeError(id, apiErr("internal_error", "%v", err))
	}
}

// eventsWait answers events.wait: only match_event pane_agent_status_changed is implemented, as
// in herdr (others: unsupported_event_wait_match). A pane that already shows the status matches
// at once; otherwise the wait ends on the first matching event, on timeout_ms (error
// "timeout"), when the client goes or the server stops.
func (s *Server) eventsWait(ctx context.Context, raw json.RawMessage) (any, error) {
	var q struct {
		MatchEvent map[string]json.RawMessage `json:"match_event"`
		TimeoutMS  *int64                     `json:"timeout_ms"`
	}
	if err := decodeParams(raw, &q, "match_event"); err != nil {
		return nil, err
	}
	var kind, paneID, status string
	if err := json.Unmarshal(q.MatchEvent["event"], &kind); err != nil || kind == "" {
		return nil, badRequest("match_event: missing field `event`")
	}
	if kind != herdr.KindAgentStatus {
		return nil, apiErr("unsupported_event_wait_match", "events.wait does not support match_event %s", kind)
	}
	if err := json.Unmarshal(q.MatchEvent["pane_id"], &paneID); err != nil || paneID == "" {
		return nil, badRequest("match_event: missing field `pane_id`")
	}
	if err := json.Unmarshal(q.MatchEvent["agent_status"], &status); err != nil || statusRank(status) < 0 {
		return nil, badRequest("match_event: missing or unknown field `agent_status`")
	}
	if q.TimeoutMS != nil && *q.TimeoutMS < 0 {
		return nil, badRequest("field `timeout_ms` out of range for u64")
	}
	matched := func(e event) any {
		return struct {
			Type  string `json:"type"`
			Event any    `json:"event"`
		}{"wait_matched", struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}{herdr.KindAgentStatus, e.data}}
	}
	s.mu.Lock()
	p := s.paneByID[paneID]
	if p == nil {
		s.mu.Unlock()
		return nil, apiErr("pane_not_found", "pane %s not found", paneID)
	}
	cursor := s.hub.head()
	st, agent, _, _ := p.agentState()
	now := statusEvent(p.id, p.tab.ws.id, st, agent, p.labels())
	s.mu.Unlock()
	if st == status {
		return matched(now), nil
	}
	s.waiting.Add(1)
	var timeout <-chan time.Time
	if q.TimeoutMS != nil {
		tm := time.NewTimer(time.Duration(*q.TimeoutMS) * time.Millisecond)
		defer tm.Stop()
		timeout = tm.C
	}
	t := time.NewTicker(eventTick)
	defer t.Stop()
	liveFrom := cursor
	sp := subSpec{kind: herdr.KindAgentStatus, pane: paneID, status: status}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout:
			return nil, apiErr("timeout", "timed out waiting for %s on %s", kind, paneID)
		case <-t.C:
		}
		evs, lost := s.hub.take(&cursor, 1, func(e *event) bool { return sp.matches(e, liveFrom) })
		if lost {
			cursor = s.hub.oldest()
		}
		if len(evs) > 0 {
			return matched(evs[0]), nil
		}
	}
}
