package herdrd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/sharedref"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// eventValidators compiles the schema's event (lifecycle envelope) and subscription_event
// (filtered envelope) sub-schemas, next to the response ones. Without the shared schema
// (a bare clone) validators is nil and lines are only checked to be JSON, as loadValidators
// says in one line.
type eventValidators struct {
	*validators
	lifecycle, filtered *jsonschema.Schema
}

func loadEventValidators(t *testing.T) *eventValidators {
	t.Helper()
	v := loadValidators(t)
	if v == nil {
		return &eventValidators{}
	}
	path, err := sharedref.Path(".", sharedref.HerdrSchema)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	ev := &eventValidators{validators: v}
	if ev.lifecycle, err = c.Compile(path + "#/schemas/event"); err != nil {
		t.Fatalf("compile event: %v", err)
	}
	if ev.filtered, err = c.Compile(path + "#/schemas/subscription_event"); err != nil {
		t.Fatalf("compile subscription_event: %v", err)
	}
	return ev
}

// checkEvent validates one line of a subscription after its acknowledgement: an error line
// against error_response, a dotted event against subscription_event, any other against event.
func (v *eventValidators) checkEvent(t *testing.T, line []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		t.Fatalf("event line is not JSON: %v: %q", err, line)
	}
	if v.validators == nil {
		return
	}
	m, _ := inst.(map[string]any)
	sch := v.lifecycle
	if _, isErr := m["error"]; isErr {
		sch = v.failure
	} else if k, _ := m["event"].(string); strings.Contains(k, ".") {
		sch = v.filtered
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("event line violates the herdr schema: %v\nline: %s", err, line)
	}
}

// sub is a raw subscription connection whose every line is schema-checked.
type sub struct {
	t    *testing.T
	v    *eventValidators
	c    net.Conn
	br   *bufio.Reader
	acks string // the acknowledgement (or refusal) line
}

// subscribe opens a subscription with the given params object; the first line is validated
// as a response.
func (h *harness) subscribe(v *eventValidators, id, params string) *sub {
	h.t.Helper()
	c, err := net.DialTimeout("unix", h.sock, 2*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, `{"id":%q,"method":"events.subscribe","params":%s}`+"\n", id, params); err != nil {
		h.t.Fatal(err)
	}
	s := &sub{t: h.t, v: v, c: c, br: bufio.NewReader(c)}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := s.br.ReadBytes('\n')
	if err != nil {
		h.t.Fatalf("subscription %s: no first line: %v", id, err)
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	v.check(h.t, line)
	s.acks = string(line)
	return s
}

// next returns the next event line (validated) within d; nil, io.EOF when the server closed.
func (s *sub) next(d time.Duration) ([]byte, error) {
	s.t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(d))
	line, err := s.br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	s.v.checkEvent(s.t, line)
	return line, nil
}

// decoded is an event line's fields of interest.
type decoded struct {
	Event string          `json:"event"`
	Data  herdr.EventData `json:"data"`
	ID    string          `json:"id"`
	Error *herdr.Error    `json:"error"`
}

func decode(t *testing.T, line []byte) decoded {
	t.Helper()
	var d decoded
	if err := json.Unmarshal(line, &d); err != nil {
		t.Fatal(err)
	}
	if d.Data.Pane != nil && d.Data.PaneID == "" {
		d.Data.PaneID = d.Data.Pane.PaneID
	}
	return d
}

// waitEvent reads events until one satisfies want, within d.
func (s *sub) waitEvent(d time.Duration, what string, want func(decoded) bool) decoded {
	s.t.Helper()
	deadline := time.Now().Add(d)
	var seen []string
	for {
		line, err := s.next(time.Until(deadline))
		if err != nil {
			s.t.Fatalf("waiting for %s: %v; seen: %v", what, err, seen)
		}
		e := decode(s.t, line)
		if want(e) {
			return e
		}
		seen = append(seen, string(line))
	}
}

// newWorkspace makes a workspace and returns its root pane id.
func (h *harness) newWorkspace() string {
	h.t.Helper()
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", fmt.Sprintf(`{"cwd":%q}`, h.t.TempDir()), &wc)
	return wc.RootPane.PaneID
}

// setStatus types a printf of the stand-in's status hook into a pane.
func (h *harness) setStatus(paneID string, states ...string) {
	h.t.Helper()
	var b strings.Builder
	for _, st := range states {
		b.WriteString(`\033]777;herdr-status;` + st + `\007`)
	}
	h.run(paneID, "printf '"+b.String()+"'")
}

// TestSubscribeLifecycleReplay shows the two lifecycle behaviours: protocol 20 (0.8.2) replays
// the retained events to a new subscriber, protocol 22 (0.9.x) starts with live events only.
// Both then deliver a new pane's pane_created live.
func TestSubscribeLifecycleReplay(t *testing.T) {
	v := loadEventValidators(t)
	for _, proto := range []int{20, 22} {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) {
			h := startHarnessWith(t, v.validators, func(c *Config) { c.Protocol = proto })
			first := h.newWorkspace()
			s := h.subscribe(v, "sub-1", `{"subscriptions":[{"type":"pane.created"},{"type":"pane.closed"}]}`)
			if s.acks != `{"id":"sub-1","result":{"type":"subscription_started"}}` {
				t.Fatalf("ack = %s", s.acks)
			}
			if proto == 20 {
				e := s.waitEvent(3*time.Second, "replayed pane_created", func(e decoded) bool { return e.Event == "pane_created" })
				if e.Data.PaneID != first || e.Data.Type != "pane_created" {
					t.Fatalf("replayed event = %+v", e)
				}
			} else if line, err := s.next(400 * time.Millisecond); err == nil {
				t.Fatalf("protocol 22 replayed %s", line)
			} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatalf("protocol 22 subscription: %v", err)
			}
			var tc herdr.TabCreated
			h.call("tab.create", `{}`, &tc)
			e := s.waitEvent(3*time.Second, "live pane_created", func(e decoded) bool { return e.Event == "pane_created" })
			if e.Data.PaneID != tc.RootPane.PaneID {
				t.Fatalf("live pane_created for %s, want %s", e.Data.PaneID, tc.RootPane.PaneID)
			}
			h.call("pane.close", fmt.Sprintf(`{"pane_id":%q}`, tc.RootPane.PaneID), nil)
			e = s.waitEvent(3*time.Second, "pane_closed", func(e decoded) bool { return e.Event == "pane_closed" })
			if e.Data.PaneID != tc.RootPane.PaneID || e.Data.WorkspaceID == "" {
				t.Fatalf("pane_closed = %+v", e)
			}
		})
	}
}

// TestSubscribeAgentStatus follows one pane's agent status: the per-pane subscription gets each
// change in the filtered shape, pane.agent_detected fires once, a filter that already matches
// fires at once, and an unknown pane is refused with one error line and a close.
func TestSubscribeAgentStatus(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarness(t, v.validators)
	p := h.newWorkspace()
	other := h.newWorkspace()
	s := h.subscribe(v, "s1", fmt.Sprintf(`{"subscriptions":[{"type":"pane.agent_status_changed","pane_id":%q},{"type":"pane.agent_detected"}]}`, p))
	h.setStatus(other, "working") // another pane: not delivered on the status subscription
	h.setStatus(p, "working")
	e := s.waitEvent(5*time.Second, "agent detected", func(e decoded) bool { return e.Event == "pane_agent_detected" && e.Data.PaneID == p })
	if e.Data.Agent != "standin" {
		t.Fatalf("pane_agent_detected = %+v", e)
	}
	e = s.waitEvent(5*time.Second, "working", func(e decoded) bool { return e.Event == "pane.agent_status_changed" })
	if e.Data.PaneID != p || e.Data.AgentStatus != "working" || e.Data.Type != "" {
		t.Fatalf("status event = %+v", e)
	}
	h.setStatus(p, "blocked")
	e = s.waitEvent(5*time.Second, "blocked", func(e decoded) bool { return e.Event == "pane.agent_status_changed" })
	if e.Data.PaneID != p || e.Data.AgentStatus != "blocked" {
		t.Fatalf("status event = %+v", e)
	}

	// A filter the pane already matches fires at once.
	f := h.subscribe(v, "s2", fmt.Sprintf(`{"subscriptions":[{"type":"pane.agent_status_changed","pane_id":%q,"agent_status":"blocked"}]}`, p))
	e = f.waitEvent(time.Second, "initial blocked", func(e decoded) bool { return true })
	if e.Data.AgentStatus != "blocked" || e.Data.PaneID != p {
		t.Fatalf("initial event = %+v", e)
	}

	bad := h.subscribe(v, "s3", `{"subscriptions":[{"type":"pane.agent_status_changed","pane_id":"w9:p9"}]}`)
	if !strings.Contains(bad.acks, `"code":"pane_not_found"`) {
		t.Fatalf("unknown pane: %s", bad.acks)
	}
	if _, err := bad.next(2 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after a refusal: %v, want EOF", err)
	}
	if code, _ := h.callErr(`{"id":"s4","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.agent_status_changed"}]}}`); code != "invalid_request" {
		t.Fatalf("status subscription without pane_id: %s", code)
	}
}

// TestSubscriberGone: any byte the client writes after its request line ends the subscription,
// as herdr's probe does.
func TestSubscriberGone(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarness(t, v.validators)
	s := h.subscribe(v, "g", `{"subscriptions":[{"type":"pane.created"}]}`)
	if _, err := s.c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.next(2 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after a client byte: %v, want EOF", err)
	}
}

// TestLaggingSubscriber bursts more status changes than the history keeps: at protocol 20 the
// subscriber silently skips what was evicted and carries on (it still sees the final state); at
// protocol 22 it gets events_lost, with its request id, and the connection closes.
func TestLaggingSubscriber(t *testing.T) {
	v := loadEventValidators(t)
	burst := make([]string, 0, 81)
	for i := 0; i < 40; i++ {
		burst = append(burst, "working", "idle")
	}
	burst = append(burst, "blocked")
	for _, proto := range []int{20, 22} {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) {
			h := startHarnessWith(t, v.validators, func(c *Config) { c.Protocol = proto; c.EventHistory = 16 })
			p := h.newWorkspace()
			s := h.subscribe(v, "lag-1", fmt.Sprintf(`{"subscriptions":[{"type":"pane.agent_status_changed","pane_id":%q}]}`, p))
			h.setStatus(p, burst...)
			if proto == 22 {
				e := s.waitEvent(5*time.Second, "events_lost", func(e decoded) bool { return e.Error != nil })
				if e.Error.Code != herdr.CodeEventsLost || e.ID != "lag-1" {
					t.Fatalf("lag line = %+v", e)
				}
				if _, err := s.next(2 * time.Second); !errors.Is(err, io.EOF) {
					t.Fatalf("after events_lost: %v, want EOF", err)
				}
				return
			}
			n := 0
			e := s.waitEvent(20*time.Second, "final blocked", func(e decoded) bool {
				if e.Error != nil {
					t.Fatalf("protocol 20 sent an error line: %+v", e.Error)
				}
				n++
				return e.Data.AgentStatus == "blocked"
			})
			if n >= len(burst) {
				t.Fatalf("received all %d events; the burst did not overrun a 16-event history", n)
			}
			t.Logf("protocol 20: %d of %d events delivered, the rest skipped silently; last %+v", n, len(burst), e.Data)
			h.setStatus(p, "idle") // the subscription goes on
			s.waitEvent(5*time.Second, "idle after the burst", func(e decoded) bool { return e.Data.AgentStatus == "idle" })
		})
	}
}

// TestEventsWait covers the one events.wait form herdr implements and its refusals.
func TestEventsWait(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarness(t, v.validators)
	p := h.newWorkspace()
	done := make(chan []byte, 1)
	go func() {
		c, err := net.Dial("unix", h.sock)
		if err != nil {
			done <- nil
			return
		}
		defer c.Close()
		fmt.Fprintf(c, `{"id":"w1","method":"events.wait","params":{"match_event":{"event":"pane_agent_status_changed","pane_id":%q,"agent_status":"blocked"},"timeout_ms":20000}}`+"\n", p)
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		done <- bytes.TrimSuffix(line, []byte("\n"))
	}()
	// The wait is registered (its cursor taken) before the change, so the match comes from a live event.
	wait.For(t, 10*time.Second, "events.wait registered", wait.Bool(func() bool { return h.srv.waiting.Load() >= 1 }))
	h.setStatus(p, "working", "blocked")
	var line []byte
	select {
	case line = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("events.wait did not return")
	}
	v.check(t, line)
	var r struct {
		Result struct {
			Type  string `json:"type"`
			Event struct {
				Event string          `json:"event"`
				Data  herdr.EventData `json:"data"`
			} `json:"event"`
		} `json:"result"`
	}
	if err := json.Unmarshal(line, &r); err != nil || r.Result.Type != "wait_matched" || r.Result.Event.Event != "pane_agent_status_changed" ||
		r.Result.Event.Data.AgentStatus != "blocked" || r.Result.Event.Data.PaneID != p {
		t.Fatalf("events.wait = %s (%v)", line, err)
	}
	// Already blocked: matched at once.
	var now struct {
		Type string `json:"type"`
	}
	h.call("events.wait", fmt.Sprintf(`{"match_event":{"event":"pane_agent_status_changed","pane_id":%q,"agent_status":"blocked"},"timeout_ms":1}`, p), &now)
	if now.Type != "wait_matched" {
		t.Fatalf("immediate wait = %+v", now)
	}
	if code, id := h.callErr(fmt.Sprintf(`{"id":"w2","method":"events.wait","params":{"match_event":{"event":"pane_agent_status_changed","pane_id":%q,"agent_status":"idle"},"timeout_ms":300}}`, p)); code != "timeout" || id != "w2" {
		t.Fatalf("timeout: %s %q", code, id)
	}
	if code, _ := h.callErr(`{"id":"w3","method":"events.wait","params":{"match_event":{"event":"pane_closed","pane_id":"w1:p1"}}}`); code != "unsupported_event_wait_match" {
		t.Fatalf("pane_closed wait: %s", code)
	}
	if code, _ := h.callErr(`{"id":"w4","method":"events.wait","params":{"match_event":{"event":"pane_agent_status_changed","pane_id":"w9:p9","agent_status":"idle"}}}`); code != "pane_not_found" {
		t.Fatalf("unknown pane wait: %s", code)
	}
}

// TestReportMetadata: a source's labels show on the pane (pane.get, session.snapshot) and in
// a pane_updated event; a stale seq is ignored, clear removes them, ttl_ms expires them, and
// bad tokens are refused.
func TestReportMetadata(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarness(t, v.validators)
	p := h.newWorkspace()
	s := h.subscribe(v, "u", `{"subscriptions":[{"type":"pane.updated"}]}`)
	h.call("pane.report_metadata", fmt.Sprintf(`{"pane_id":%q,"source":"fleetmgr","state_labels":{"fleetmgr":"STALLED 3m"},"seq":2}`, p), nil)
	if got := h.pane(p).StateLabels["fleetmgr"]; got != "STALLED 3m" {
		t.Fatalf("state_labels = %q", got)
	}
	e := s.waitEvent(3*time.Second, "pane_updated", func(e decoded) bool { return e.Event == "pane_updated" })
	if e.Data.Pane == nil || e.Data.Pane.StateLabels["fleetmgr"] != "STALLED 3m" {
		t.Fatalf("pane_updated = %+v", e.Data.Pane)
	}
	h.call("pane.report_metadata", fmt.Sprintf(`{"pane_id":%q,"source":"fleetmgr","state_labels":{"fleetmgr":"old"},"seq":1}`, p), nil)
	if got, _ := h.srv.PaneLabels(p); got["fleetmgr"] != "STALLED 3m" {
		t.Fatalf("a stale seq replaced the labels: %v", got)
	}
	h.call("pane.report_metadata", fmt.Sprintf(`{"pane_id":%q,"source":"other","state_labels":{"x":"y"}}`, p), nil)
	var snap struct {
		Snapshot struct {
			Panes []herdr.PaneInfo `json:"panes"`
		} `json:"snapshot"`
	}
	h.call("session.snapshot", `{}`, &snap)
	if l := snap.Snapshot.Panes[0].StateLabels; l["fleetmgr"] != "STALLED 3m" || l["x"] != "y" {
		t.Fatalf("snapshot labels = %v", l)
	}
	h.call("pane.report_metadata", fmt.Sprintf(`{"pane_id":%q,"source":"fleetmgr","clear_state_labels":true,"seq":3}`, p), nil)
	if got, _ := h.srv.PaneLabels(p); got["fleetmgr"] != "" || got["x"] != "y" {
		t.Fatalf("after clear: %v", got)
	}
	h.call("pane.report_metadata", fmt.Sprintf(`{"pane_id":%q,"source":"ttl","state_labels":{"t":"1"},"ttl_ms":200}`, p), nil)
	if got, _ := h.srv.PaneLabels(p); got["t"] != "1" {
		t.Fatalf("ttl label not shown: %v", got)
	}
	wait.For(t, 3*time.Second, "ttl label to expire", func() (bool, string) {
		got, _ := h.srv.PaneLabels(p)
		return got["t"] == "", fmt.Sprint(got)
	})
	if code, _ := h.callErr(fmt.Sprintf(`{"id":"m1","method":"pane.report_metadata","params":{"pane_id":%q,"source":"x","tokens":{"bad name":"v"}}}`, p)); code != "invalid_params" {
		t.Fatalf("bad token: %s", code)
	}
	if code, _ := h.callErr(`{"id":"m2","method":"pane.report_metadata","params":{"pane_id":"w9:p9","source":"x"}}`); code != "pane_not_found" {
		t.Fatalf("unknown pane: %s", code)
	}
	if code, _ := h.callErr(`{"id":"m3","method":"pane.report_metadata","params":{"pane_id":"w1:p1"}}`); code != "invalid_request" {
		t.Fatalf("without source: %s", code)
	}
}

// TestNotificationShow: a headless server shows nothing (no_foreground_client) and the stand-in
// records the request.
func TestNotificationShow(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarness(t, v.validators)
	var r struct {
		Type   string `json:"type"`
		Shown  bool   `json:"shown"`
		Reason string `json:"reason"`
	}
	h.call("notification.show", `{"title":"fleet kb","body":"member m2 STALLED","sound":"request"}`, &r)
	if r.Type != "notification_show" || r.Shown || r.Reason != "no_foreground_client" {
		t.Fatalf("notification.show = %+v", r)
	}
	if n := h.srv.Notifications(); len(n) != 1 || n[0].Title != "fleet kb" || n[0].Body != "member m2 STALLED" || n[0].Sound != "request" {
		t.Fatalf("recorded = %+v", n)
	}
	if code, _ := h.callErr(`{"id":"n1","method":"notification.show","params":{"body":"x"}}`); code != "invalid_request" {
		t.Fatalf("without title: %s", code)
	}
}

// TestWithoutPush: a stand-in made to lack the push methods answers them as any unknown method.
func TestWithoutPush(t *testing.T) {
	v := loadEventValidators(t)
	h := startHarnessWith(t, v.validators, func(c *Config) { c.WithoutPush = true })
	for _, m := range []string{"events.subscribe", "events.wait", "pane.report_metadata", "notification.show"} {
		resp := h.raw(fmt.Sprintf(`{"id":"x","method":%q,"params":{}}`, m))
		var r reply
		if err := json.Unmarshal(resp, &r); err != nil || r.Error == nil || r.Error.Code != "invalid_request" || !strings.Contains(r.Error.Message, "unknown variant") {
			t.Fatalf("%s: %s", m, resp)
		}
	}
	var pong struct {
		herdr.Pong
	}
	h.call("ping", `{}`, &pong)
}
