// Package notify tells the operator when a member or a fleet needs them
// ([[notify]] rules of fleets.toml, registry.Notify). Serve reports what
// it sees (Observe: the subjects of some kinds of one fleet that are in
// that state now); a subject whose state has held for a rule's hold
// begins an episode, notified once through the rule's sinks, and a
// "resolved" message follows when it clears. A state that clears before
// the hold sends nothing (flapping is silent).
//
// Episodes are kept in a file (Options.Path) written before a
// notification is sent: a serve killed mid-episode and started again
// neither notifies twice nor forgets the episode (its resolution is sent
// when the new serve sees the state clear, the hold counted from when the
// first serve saw it begin). Delivery never blocks the caller of Observe:
// each notification is sent by a goroutine the Notifier owns, every
// attempt is reported (Options.Journal), and a sink that keeps failing is
// retried with backoff and reported by Health.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Event is what a sink is given: one notification. State is "firing"
// (the episode began and held), "resolved" (it cleared) or "test".
//
// Host is set for a host's own kinds (host.offline): the peer's host id;
// Fleet is then "".
type Event struct {
	Rule   string    `json:"rule"`
	Kind   string    `json:"kind"`
	Fleet  string    `json:"fleet"`
	Member string    `json:"member,omitempty"`
	Host   string    `json:"host,omitempty"`
	State  string    `json:"state"`
	Since  time.Time `json:"since"`
	At     time.Time `json:"at"`
	Detail string    `json:"detail,omitempty"`
	// Text is a one-line human message (what chat presets post).
	Text string `json:"text"`
}

// Episode states.
const (
	StateFiring   = "firing"
	StateResolved = "resolved"
	StateTest     = "test"
)

// Attempt is one delivery attempt's outcome (for the journal).
type Attempt struct {
	Event Event
	// Sink is the sink's type and index in its rule ("webhook#0").
	Sink string
	// Err is nil when the sink took it.
	Err error
	// Tries is how many tries it took (retries included).
	Tries int
}

// Options configure New.
type Options struct {
	// Rules returns the rules in force (the config's, re-read on reload).
	Rules func() []registry.Notify
	// Sinks builds the sender of one sink (nil: Senders).
	Sinks func(s registry.NotifySink) Sender
	// Path is the episodes file (serve: <state_dir>/notify.json).
	Path string
	// Attempted is told of every delivery attempt (serve: the journal).
	Attempted func(Attempt)
	// Delivering is told of each event once, as its delivery through the
	// rule's sinks begins (serve: the dashboard, which raises a browser
	// notification where the operator allowed it). It must not block.
	Delivering func(Event)
	// Log receives the notifier's own reports.
	Log *slog.Logger
	// Tick is how often held states are checked (default 250 ms).
	Tick time.Duration
}

// Sender delivers one event. It may block (the Notifier calls it from a
// goroutine of its own, with a deadline).
type Sender interface {
	Send(ctx context.Context, e Event) error
}

// episode is one subject in a state, as persisted.
type episode struct {
	Rule     string    `json:"rule"`
	Kind     string    `json:"kind"`
	Fleet    string    `json:"fleet"`
	Member   string    `json:"member,omitempty"`
	Host     string    `json:"host,omitempty"`
	Since    time.Time `json:"since"`
	Notified bool      `json:"notified"`
	Detail   string    `json:"detail,omitempty"`
}

func (e *episode) key() string {
	return e.Rule + "\x00" + e.Kind + "\x00" + e.Fleet + "\x00" + e.Member + "\x00" + e.Host
}

// SinkHealth is one sink's delivery record (Health).
type SinkHealth struct {
	Rule, Sink string
	// Failures counts consecutive failed deliveries (after retries);
	// LastError is the last one's error ("" once one succeeds).
	Failures  int
	LastError string
	LastOK    time.Time
	// Sent and Failed count deliveries since serve started.
	Sent, Failed int
}

// Notifier keeps episodes and delivers their notifications. Create with
// New; Run owns its goroutines.
type Notifier struct {
	opt Options
	log *slog.Logger

	mu       sync.Mutex
	episodes map[string]*episode
	health   map[string]*SinkHealth
	jobs     chan job
	dirty    bool
	// begun gets a signal (at most one pending) when an episode begins,
	// so Run ticks again: it checks held states every Tick only while an
	// episode waits for its hold (issue 26: a 4/s wakeup that found
	// nothing to do in an idle serve).
	begun chan struct{}
}

type job struct {
	ev    Event
	rule  registry.Notify
	sinks []int // indices into rule.Sinks (nil: all)
	done  chan []Attempt
}

// New loads the episodes file (a missing file is no episodes; an
// unreadable one is logged and started afresh).
func New(o Options) *Notifier {
	if o.Tick <= 0 {
		o.Tick = 250 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Sinks == nil {
		o.Sinks = Senders(nil)
	}
	n := &Notifier{opt: o, log: o.Log, episodes: map[string]*episode{}, health: map[string]*SinkHealth{}, jobs: make(chan job, 256), begun: make(chan struct{}, 1)}
	if o.Path != "" {
		b, err := atomicfile.Read(o.Path, 4<<20)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			n.log.Error("notify: episodes file unreadable; starting without episodes", "path", o.Path, "err", err)
		default:
			var eps []*episode
			if err := json.Unmarshal(b, &eps); err != nil {
				n.log.Error("notify: episodes file corrupt; starting without episodes", "path", o.Path, "err", err)
			}
			for _, e := range eps {
				n.episodes[e.key()] = e
			}
		}
	}
	return n
}

// Subject is one thing in a state: Member is "" for a fleet's own kinds.
type Subject struct{ Kind, Member string }

// Observe reports the subjects of kinds in fleet that are in their state
// now (with a detail for the message); every other subject of those kinds
// in fleet is not. It never blocks on delivery.
func (n *Notifier) Observe(fleet string, kinds []string, active map[Subject]string) {
	now := time.Now()
	rules := n.opt.Rules()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range rules {
		if !watches(r, fleet) {
			continue
		}
		for _, k := range kinds {
			if !slices.Contains(r.On, k) {
				continue
			}
			// Begin the episodes of subjects now active.
			for s, detail := range active {
				if s.Kind != k {
					continue
				}
				n.beginLocked(&episode{Rule: r.Name, Kind: k, Fleet: fleet, Member: s.Member}, detail, now)
			}
			// End those no longer active.
			for key, e := range n.episodes {
				if e.Rule != r.Name || e.Kind != k || e.Fleet != fleet {
					continue
				}
				if _, still := active[Subject{k, e.Member}]; still {
					continue
				}
				delete(n.episodes, key)
				n.dirty = true
				if e.Notified {
					n.enqueueLocked(r, e, StateResolved, now)
				}
			}
		}
	}
	n.checkLocked(rules, now)
}

// beginLocked opens e as an episode begun now with detail, or, when one
// is open under its key, updates that one's detail (its start stays).
func (n *Notifier) beginLocked(e *episode, detail string, now time.Time) {
	if old, ok := n.episodes[e.key()]; ok {
		old.Detail = detail
		return
	}
	e.Since, e.Detail = now.UTC(), detail
	n.episodes[e.key()] = e
	n.dirty = true
	select {
	case n.begun <- struct{}{}:
	default:
	}
}

// holdingLocked reports whether an episode waits for its hold (not
// notified yet): only then is there anything for Run's tick to fire.
func (n *Notifier) holdingLocked() bool {
	for _, e := range n.episodes {
		if !e.Notified {
			return true
		}
	}
	return false
}

// KindHostOffline is the kind of a peer host of the federation that is
// not online: its presence expired (killed, partitioned, its broker
// connection lost) or it announced a clean stop (ObserveHosts).
const KindHostOffline = "host.offline"

// ObserveHosts reports the federation's peers (kind host.offline):
// offline maps each peer now not online to a detail, online lists the
// peers now online. A peer in neither is not judged now (never heard
// from since serve started, or this host itself has lost the broker):
// its episode, if any, is left as it is, so a serve started again
// neither resolves nor repeats an episode it cannot judge yet. A rule
// watches a host when it names no fleets or names a fleet NAME@HOST of
// that host. It never blocks on delivery.
func (n *Notifier) ObserveHosts(offline map[string]string, online []string) {
	now := time.Now()
	rules := n.opt.Rules()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range rules {
		if !slices.Contains(r.On, KindHostOffline) {
			continue
		}
		for h, detail := range offline {
			if !watchesHost(r, h) {
				continue
			}
			n.beginLocked(&episode{Rule: r.Name, Kind: KindHostOffline, Host: h}, detail, now)
		}
		for _, h := range online {
			e := &episode{Rule: r.Name, Kind: KindHostOffline, Host: h}
			old, ok := n.episodes[e.key()]
			if !ok {
				continue
			}
			delete(n.episodes, e.key())
			n.dirty = true
			if old.Notified {
				n.enqueueLocked(r, old, StateResolved, now)
			}
		}
	}
	n.checkLocked(rules, now)
}

// watchesHost reports whether rule r covers host: r names no fleets, or
// a fleet NAME@host.
func watchesHost(r registry.Notify, host string) bool {
	return len(r.Fleets) == 0 || slices.ContainsFunc(r.Fleets, func(f string) bool { return strings.HasSuffix(f, "@"+host) })
}

// watches reports whether rule r covers fleet (NAME or NAME@HOST).
func watches(r registry.Notify, fleet string) bool {
	return len(r.Fleets) == 0 || slices.Contains(r.Fleets, fleet)
}

// checkLocked fires episodes whose state held for their rule's hold; it
// persists the episodes (before anything is sent) when they changed.
func (n *Notifier) checkLocked(rules []registry.Notify, now time.Time) {
	byName := map[string]registry.Notify{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	var fire []*episode
	for key, e := range n.episodes {
		r, ok := byName[e.Rule]
		if !ok { // the rule is gone (reload): forget its episodes
			delete(n.episodes, key)
			n.dirty = true
			continue
		}
		if !e.Notified && now.Sub(e.Since) >= r.Hold.Duration {
			e.Notified = true
			n.dirty = true
			fire = append(fire, e)
		}
	}
	if n.dirty {
		n.saveLocked()
	}
	for _, e := range fire {
		n.enqueueLocked(byName[e.Rule], e, StateFiring, now)
	}
}

func (n *Notifier) saveLocked() {
	n.dirty = false
	if n.opt.Path == "" {
		return
	}
	eps := slices.SortedFunc(maps.Values(n.episodes), func(a, b *episode) int { return strings.Compare(a.key(), b.key()) })
	if eps == nil {
		eps = []*episode{}
	}
	b, _ := json.Marshal(eps)
	if err := atomicfile.Write(n.opt.Path, b, 0o600); err != nil {
		n.log.Error("notify: episodes not saved; a serve started after this one may notify them again", "path", n.opt.Path, "err", err)
		n.dirty = true
	}
}

// Text renders the one-line message of an event.
// A host's kinds name the host in fleet's place ("host beta").
func Text(kind, fleet, member, state, detail string, since, at time.Time) string {
	who := fleet
	if member != "" {
		who = member + " of " + fleet
	}
	if kind == KindHostOffline {
		who = "host " + fleet
	}
	what := map[string]string{
		"member.blocked": "is BLOCKED, waiting for a human", "member.stalled": "is STALLED",
		"member.done": "is done", "fleet.failed": "has failed", "fleet.down": "is down", "host.offline": "is offline",
	}[kind]
	if what == "" {
		what = "is " + kind
	}
	switch state {
	case StateResolved:
		return fmt.Sprintf("resolved: %s no longer %s (after %s)", who, strings.TrimPrefix(what, "is "), at.Sub(since).Round(time.Second))
	case StateTest:
		return "fleetmgr test notification (" + detail + ")"
	}
	s := fmt.Sprintf("%s %s (since %s)", who, what, since.Format(time.TimeOnly))
	if detail != "" {
		s += ": " + detail
	}
	return s
}

func (n *Notifier) enqueueLocked(r registry.Notify, e *episode, state string, now time.Time) {
	ev := Event{Rule: r.Name, Kind: e.Kind, Fleet: e.Fleet, Member: e.Member, Host: e.Host, State: state, Since: e.Since, At: now.UTC(), Detail: e.Detail}
	who := ev.Fleet
	if ev.Host != "" {
		who = ev.Host
	}
	ev.Text = Text(ev.Kind, who, ev.Member, state, ev.Detail, ev.Since, ev.At)
	select {
	case n.jobs <- job{ev: ev, rule: r}:
	default:
		n.log.Error("notify: delivery queue full; notification dropped", "rule", r.Name, "kind", e.Kind, "fleet", e.Fleet, "member", e.Member, "host", e.Host, "state", state)
	}
}

// Run checks held states every Tick (while an episode waits for its
// hold) and delivers notifications until ctx ends (a delivery under way gets its own deadline, then is abandoned).
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(n.opt.Tick)
	defer t.Stop()
	ticking := true
	for {
		// Tick only while an episode waits for its hold; an episode
		// beginning (begun) starts the tick again.
		n.mu.Lock()
		holding := n.holdingLocked()
		n.mu.Unlock()
		var tick <-chan time.Time
		switch {
		case holding && !ticking:
			t.Reset(n.opt.Tick)
			ticking = true
		case !holding && ticking:
			t.Stop()
			ticking = false
		}
		if ticking {
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-n.begun:
		case <-tick:
			n.mu.Lock()
			n.checkLocked(n.opt.Rules(), time.Now())
			n.mu.Unlock()
		case j := <-n.jobs:
			wg.Go(func() {
				at := n.deliver(ctx, j)
				if j.done != nil {
					j.done <- at
				}
			})
		}
	}
}

// retry is the backoff between tries of one delivery: 3 tries, 1 s then
// 4 s apart (a webhook sink's own HTTP retries come on top).
var retry = []time.Duration{time.Second, 4 * time.Second}

// deliver sends j through each of its sinks (in parallel), each retried
// with backoff, and records the outcomes.
func (n *Notifier) deliver(ctx context.Context, j job) []Attempt {
	idx := j.sinks
	if idx == nil {
		for i := range j.rule.Sinks {
			idx = append(idx, i)
		}
	}
	if n.opt.Delivering != nil {
		n.opt.Delivering(j.ev)
	}
	out := make([]Attempt, len(idx))
	var wg sync.WaitGroup
	for o, i := range idx {
		sink := j.rule.Sinks[i]
		name := fmt.Sprintf("%s#%d", sink.Type, i)
		wg.Go(func() {
			s := n.opt.Sinks(sink)
			var err error
			tries := 0
			for {
				tries++
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err = s.Send(sctx, j.ev)
				cancel()
				if err == nil || tries > len(retry) || ctx.Err() != nil || j.ev.State == StateTest {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(retry[tries-1]):
				}
			}
			a := Attempt{Event: j.ev, Sink: name, Err: err, Tries: tries}
			out[o] = a
			n.record(j.rule.Name, name, err)
			if n.opt.Attempted != nil {
				n.opt.Attempted(a)
			}
			if err != nil {
				n.log.Error("notify: delivery failed", "rule", j.rule.Name, "sink", name, "tries", tries, "err", err)
			}
		})
	}
	wg.Wait()
	return out
}

func (n *Notifier) record(rule, sink string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.health[rule+"\x00"+sink]
	if h == nil {
		h = &SinkHealth{Rule: rule, Sink: sink}
		n.health[rule+"\x00"+sink] = h
	}
	if err != nil {
		h.Failures++
		h.Failed++
		h.LastError = err.Error()
		return
	}
	h.Failures, h.LastError, h.LastOK = 0, "", time.Now().UTC()
	h.Sent++
}

// Health returns every sink's delivery record, sorted by rule and sink.
func (n *Notifier) Health() []SinkHealth {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]SinkHealth, 0, len(n.health))
	for _, h := range n.health {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b SinkHealth) int { return strings.Compare(a.Rule+a.Sink, b.Rule+b.Sink) })
	return out
}

// Episodes returns the open episodes (for status), oldest first.
func (n *Notifier) Episodes() []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Event
	for _, e := range n.episodes {
		st := "holding"
		if e.Notified {
			st = StateFiring
		}
		out = append(out, Event{Rule: e.Rule, Kind: e.Kind, Fleet: e.Fleet, Member: e.Member, Host: e.Host, State: st, Since: e.Since, Detail: e.Detail})
	}
	slices.SortFunc(out, func(a, b Event) int { return a.Since.Compare(b.Since) })
	return out
}

// Test sends a test notification through every sink of rule (every
// rule's when rule is "") and returns each attempt once all are done; it
// needs Run running. An unknown rule is an error naming the rules.
func (n *Notifier) Test(ctx context.Context, rule string) ([]Attempt, error) {
	rules := n.opt.Rules()
	var pick []registry.Notify
	var names []string
	for _, r := range rules {
		names = append(names, r.Name)
		if rule == "" || r.Name == rule {
			pick = append(pick, r)
		}
	}
	if len(pick) == 0 {
		if len(rules) == 0 {
			return nil, errors.New("no [[notify]] rules in fleets.toml")
		}
		return nil, fmt.Errorf("no rule %q (rules: %s)", rule, strings.Join(names, ", "))
	}
	var all []Attempt
	for _, r := range pick {
		now := time.Now().UTC()
		ev := Event{Rule: r.Name, Kind: "test", Fleet: "-", State: StateTest, Since: now, At: now, Detail: "rule " + r.Name}
		ev.Text = Text(ev.Kind, ev.Fleet, "", StateTest, ev.Detail, now, now)
		done := make(chan []Attempt, 1)
		select {
		case n.jobs <- job{ev: ev, rule: r, done: done}:
		case <-ctx.Done():
			return all, ctx.Err()
		}
		select {
		case a := <-done:
			all = append(all, a...)
		case <-ctx.Done():
			return all, ctx.Err()
		}
	}
	return all, nil
}
