package herdr

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Readiness of an agent in a pane: herdr's agent_status is "unknown" for a plain shell and for an
// agent just detected whose prompt has not settled (docs/herdr.md "Facts these rely on"); any
// other status means an agent runs there and has shown its state.

// Ways an AgentWatch learns a pane's agent state (AgentReady.Via).
const (
	// ViaEvents: herdr pushed it (events.subscribe, taken before the first pane.get).
	ViaEvents = "events"
	// ViaPolling: pane.get every AgentPollInterval (a herdr without the push methods, or a
	// subscription that ended during the wait).
	ViaPolling = "polling"
)

// AgentPollInterval is how often an AgentWatch without a subscription asks pane.get.
const AgentPollInterval = 250 * time.Millisecond

// AgentBackstop is how often an AgentWatch with a subscription reads the pane anyway, for
// anything an event did not say (the pane closing at protocol 20, an event herdr dropped).
const AgentBackstop = 5 * time.Second

// AgentSettled reports whether status is one an agent shows once its prompt settled: idle,
// working, blocked or done (not unknown, not empty).
func AgentSettled(status string) bool {
	switch status {
	case StatusIdle, StatusWorking, StatusBlocked, StatusDone:
		return true
	}
	return false
}

// agentSubs are the subscriptions of an AgentWatch on pane p at protocol protocol: its agent
// status (per pane, live only, in every protocol) and, where lifecycle subscriptions are live
// only too (PushLiveOnly), the lifecycle events that say an agent was detected or the pane
// went. Before that (protocol 20) a lifecycle subscription first replays the retained history,
// up to 512 events at one per 100 ms, which would hold back the pane's own status events for
// up to a minute; the pane's going is then found by the backstop read (AgentBackstop).
func agentSubs(p string, protocol int) []Subscription {
	subs := []Subscription{{Type: SubAgentStatus, PaneID: p}}
	if PushLiveOnly(protocol) {
		subs = append(subs, Subscription{Type: SubPaneAgentDetected}, Subscription{Type: SubPaneClosed}, Subscription{Type: SubPaneExited})
	}
	return subs
}

// AgentWatch waits for an agent to come up in one pane. WatchAgent takes herdr's subscription
// first, so that an event caused by what the caller does next (typing the agent's command) is
// not missed; Wait then reads the pane's state once (pane.get) and follows the events. Against
// a herdr whose protocol lacks events.subscribe (HasPush, from ping) or that answers it as an
// unknown method, Wait polls pane.get instead. Close must be called; it ends the subscription
// and the goroutine that reads it.
type AgentWatch struct {
	c      *Client
	paneID string

	stream   *Stream          // nil: polling
	events   chan streamEvent // fed by the reader goroutine while stream is open
	quit     chan struct{}    // closed by Close: the reader stops
	fallback string           // why polling ("" with a subscription)
	wg       sync.WaitGroup
	once     sync.Once
}

// streamEvent is one event of an AgentWatch's subscription, or the error that ended it.
type streamEvent struct {
	ev  Event
	err error
}

// AgentReady is what AgentWatch.Wait saw.
type AgentReady struct {
	// Ready is true once the pane showed a settled agent status (AgentSettled).
	Ready bool
	// Gone is true when the pane closed during the wait (pane.get: pane_not_found).
	Gone bool
	// Agent is the detected agent kind ("" when none was reported), Status the pane's last
	// agent_status seen ("" when never read).
	Agent, Status string
	// Via is ViaEvents or ViaPolling: how the state that ended the wait was learnt.
	Via string
	// Fallback says why Via is ViaPolling ("" with events).
	Fallback string
	// Took is how long Wait ran.
	Took time.Duration
}

// WatchAgent starts watching pane paneID for an agent: ping (for the protocol), then, when
// the protocol has the push methods, events.subscribe on the pane. It never fails: a herdr
// without the methods, or a subscription refused, leaves the watch polling (AgentReady.Fallback
// says why). The subscription lives until Close or ctx ends.
func (c *Client) WatchAgent(ctx context.Context, paneID string) *AgentWatch {
	w := &AgentWatch{c: c, paneID: paneID}
	pong, err := c.Ping(ctx)
	switch {
	case err != nil:
		w.fallback = fmt.Sprintf("ping failed (%v)", err)
		return w
	case !HasPush(pong.Protocol):
		w.fallback = fmt.Sprintf("herdr %s speaks protocol %d, which has no event subscription (from protocol 20)", pong.Version, pong.Protocol)
		return w
	}
	s, err := c.Subscribe(ctx, agentSubs(paneID, pong.Protocol))
	switch {
	case IsMethodMissing(err):
		w.fallback = "herdr answered events.subscribe as a method it does not know"
		return w
	case err != nil:
		w.fallback = fmt.Sprintf("events.subscribe failed (%v)", err)
		return w
	}
	w.stream = s
	w.events, w.quit = make(chan streamEvent, 16), make(chan struct{})
	w.wg.Go(func() {
		for {
			ev, err := s.Next()
			select {
			case w.events <- streamEvent{ev, err}:
			case <-w.quit:
				return
			}
			if err != nil {
				return
			}
		}
	})
	return w
}

// Close ends the subscription, if any, and waits for its reader. Safe to call more than once.
func (w *AgentWatch) Close() {
	w.once.Do(func() {
		if w.stream == nil {
			return
		}
		close(w.quit)
		_ = w.stream.Close()
		w.wg.Wait()
	})
}

// Wait blocks until the pane shows a settled agent status, the pane goes, timeout passes (Ready
// and Gone both false) or ctx ends (ctx's error). With a subscription it reads the pane once
// and then follows events (and reads it every AgentBackstop); a subscription that ends early (events_lost, herdr closing it)
// turns the rest of the wait into polling, said in Fallback. Other pane.get errors than
// pane_not_found are retried until timeout. Wait is called once per AgentWatch.
func (w *AgentWatch) Wait(ctx context.Context, timeout time.Duration) (AgentReady, error) {
	t0 := time.Now()
	r := AgentReady{Via: ViaEvents, Fallback: w.fallback}
	if w.stream == nil {
		r.Via = ViaPolling
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	done := func() (AgentReady, error) { r.Took = time.Since(t0); return r, nil }
	// look reads the pane now and reports whether that ends the wait.
	look := func() bool {
		p, err := w.c.PaneGet(ctx, w.paneID)
		if IsCode(err, "pane_not_found") {
			r.Gone = true
			return true
		}
		if err != nil {
			return false
		}
		r.Status = p.AgentStatus
		if p.Agent != "" {
			r.Agent = p.Agent
		}
		r.Ready = AgentSettled(p.AgentStatus)
		return r.Ready
	}
	if look() {
		return done()
	}
	events := w.events
	every := AgentPollInterval
	if events != nil {
		every = AgentBackstop
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	poll := tk.C
	for {
		select {
		case <-ctx.Done():
			r.Took = time.Since(t0)
			return r, ctx.Err()
		case <-deadline.C:
			return done()
		case <-poll:
			if look() {
				return done()
			}
		case it := <-events:
			if it.err != nil {
				r.Via, r.Fallback, events = ViaPolling, fmt.Sprintf("the subscription ended (%v)", it.err), nil
				tk.Reset(AgentPollInterval)
				if look() {
					return done()
				}
				continue
			}
			d, err := it.ev.Decode()
			if err != nil || d.PaneID != w.paneID {
				continue
			}
			switch it.ev.Kind() {
			case KindAgentStatus:
				r.Status = d.AgentStatus
				if d.Agent != "" {
					r.Agent = d.Agent
				}
				if AgentSettled(d.AgentStatus) {
					r.Ready = true
					return done()
				}
			case KindPaneAgentDetected:
				// Detected; its status follows as its own event (a newly detected agent
				// reads unknown until its prompt settles).
				if d.Agent != "" {
					r.Agent = d.Agent
				}
			case KindPaneClosed, KindPaneExited:
				// Only subscribed where live-only; pane.get confirms all the same.
				if look() {
					return done()
				}
			}
		}
	}
}
