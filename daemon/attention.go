//lint:file-ignore SA1019 the mcp sink is MCP logging (notifications/message after logging/setLevel), which #25 asks for; MCP deprecates logging from protocol 2026-07-28 (SEP-2577) but keeps it working for at least twelve months, and clients of earlier protocol versions show it

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/notify"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/toolpolicy"
)

// attention is serve's journal and notifications (issue 25; package
// journal, package notify): the hooks serve's parts call, each of which
// appends to the journal without blocking, and the goroutines that turn
// what serve sees (state files, status reports) into journal events and
// notification episodes. Serve owns it: start, run, close.
type attention struct {
	m        *lifecycle.Manager
	log      *slog.Logger
	j        *journal.Journal // nil when the journal could not be opened (logged)
	n        *notify.Notifier
	callArgs bool
	jstop    context.CancelFunc
	jdone    chan struct{}

	mu       sync.Mutex
	fleets   map[string]fleetSnap             // guarded by mu: the last state seen per fleet
	verdicts map[string]map[string]memberSeen // guarded by mu: fleet → member → verdict last seen
	mcp      func() []*mcp.ServerSession      // set by Serve once the proxy exists
	// logLevels (guarded by mu) are the levels sessions set with
	// logging/setLevel: the go-sdk sends a session no log message before
	// it sets one, so the mcp sink counts only sessions that did.
	logLevels map[*mcp.ServerSession]mcp.LoggingLevel
	// onNotify, set by Serve once the dashboard exists, is told of each
	// notification as its delivery begins (the page's browser notification).
	onNotify atomic.Pointer[func(notify.Event)]
	remote   proxy.Remote // set by Serve when it federates (nil otherwise): peers' journals, host.offline
}

// fleetSnap is what the state differ remembers of a fleet.
type fleetSnap struct {
	phase       lifecycle.Phase
	desired     lifecycle.Desired
	restartAt   time.Time
	membersLost int
	startedAt   time.Time
	cause       string // why the restart under way began ("" when none is)
	// reason is the stored phase's reason (State.PhaseReason): a failed
	// fleet failed anew (the supervisor giving up after start_retries)
	// changes it, not its phase.
	reason string
}

// openJournal opens serve's journal, or returns nil (logged) when
// [manager] journal = false or the file cannot be opened.
func openJournal(cfg *registry.Config, log *slog.Logger) *journal.Journal {
	if !cfg.Manager.Journal {
		log.Info("journal: off ([manager] journal = false): no events, no dashboard history from it")
		return nil
	}
	j, err := journal.Open(journal.Options{Path: serveapi.JournalPath(cfg), MaxBytes: int64(cfg.Manager.JournalMaxMB) << 20,
		MaxAge: cfg.Manager.JournalMaxAge.Duration, KeepFree: true, Log: log})
	if err != nil {
		log.Error("journal: not kept this serve; supervision and calls go on", "err", err)
		return nil
	}
	return j
}

// newAttention opens the journal (a failure is logged: serve runs without
// one; [manager] journal = false opens none) and the notifier, and starts
// the journal's writer.
func newAttention(cfg *registry.Config, m *lifecycle.Manager, log *slog.Logger) *attention {
	a := &attention{m: m, log: log, callArgs: cfg.Manager.JournalCallArguments,
		fleets: map[string]fleetSnap{}, verdicts: map[string]map[string]memberSeen{}, jdone: make(chan struct{})}
	if a.j = openJournal(cfg, log); a.j == nil {
		close(a.jdone)
	} else {
		ctx, cancel := context.WithCancel(context.Background())
		a.jstop = cancel
		go func() { defer close(a.jdone); a.j.Run(ctx) }()
	}
	confDir := herdr.ConfigDir(os.Getenv)
	a.n = notify.New(notify.Options{
		Rules: func() []registry.Notify { return m.Config().Notify },
		Path:  filepath.Join(cfg.Manager.StateDir, "notify.json"),
		Log:   log,
		Sinks: notify.Senders(&notify.SinkEnv{
			HerdrSockets: func() []string {
				var out []string
				for _, s := range m.Config().Guard.OperatorSessions {
					out = append(out, herdr.SocketPath(confDir, s))
				}
				return out
			},
			MCP: a.mcpNotify,
		}),
		Delivering: func(e notify.Event) {
			if f := a.onNotify.Load(); f != nil {
				(*f)(e)
			}
		},
		Attempted: func(at notify.Attempt) {
			out := "sent"
			if at.Err != nil {
				out = "failed: " + at.Err.Error()
			}
			data := map[string]any{"sink": at.Sink, "tries": at.Tries, "event_kind": at.Event.Kind}
			if at.Event.Host != "" {
				data["host"] = at.Event.Host
			}
			a.append(journal.Event{Fleet: at.Event.Fleet, Member: at.Event.Member, Kind: journal.KindNotify, Origin: at.Event.Rule,
				Outcome: out, Detail: at.Event.Text, Data: data})
		},
	})
	return a
}

// close stops the journal's writer once it has written what is queued
// (serve calls it last, after every part that appends has stopped).
func (a *attention) close() {
	if a.jstop != nil {
		a.jstop()
	}
	<-a.jdone
}

func (a *attention) append(e journal.Event) {
	if a.j != nil {
		a.j.Append(e)
	}
}

// run follows the fleets' states (changes: the state dir's writes; a look
// every 2 s besides), samples the members of fleets a member.* rule
// watches, and runs the notifier, until ctx ends.
func (a *attention) run(ctx context.Context, changes <-chan struct{}, col *status.Collector) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { a.n.Run(ctx) })
	wg.Go(func() { a.sampleMembers(ctx, col) })
	if a.remote != nil {
		wg.Go(func() { a.watchHosts(ctx) })
	}
	a.look(true)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes: // nil without inotify
		case <-t.C:
		}
		a.look(false)
	}
}

// look reads every fleet's state and journals what changed since the
// last look: phase transitions (with their reason), restarts (with their
// cause and the members they ended); and reports the fleets' failed/down
// states to the notifier. first only records the states.
func (a *attention) look(first bool) {
	for _, n := range a.m.Names() {
		st, err := a.m.State(n)
		if err != nil {
			continue
		}
		if st.Shown.Undecided || st.Shown.Condition == lifecycle.CondStartRetryPending {
			// A failed start the supervisor decides on in a moment (a
			// retry, or giving up): its record is journalled, so that a
			// retried start is never journalled failed and a failure is
			// journalled once (lifecycle/shown.go retryPending).
			continue
		}
		a.mu.Lock()
		old, seen := a.fleets[n]
		cur := fleetSnap{phase: st.Shown.Phase, desired: st.Desired, restartAt: st.LastRestartAt, membersLost: st.MembersLost, startedAt: st.StartedAt, cause: old.cause, reason: st.PhaseReason}
		if !first && seen {
			// A restart the supervisor decided (LastRestartAt moved) is
			// journalled even when the fleet read restarting before: the
			// next retry of a start decided while the last one's start
			// was still recorded restarting.
			decided := cur.phase == lifecycle.PhaseRestarting && !cur.restartAt.Equal(old.restartAt)
			if cur.phase != old.phase || (cur.phase == lifecycle.PhaseFailed && cur.reason != old.reason) || decided {
				a.append(journal.Event{Fleet: n, Kind: journal.KindPhase, Outcome: string(cur.phase), Detail: st.PhaseReason,
					Data: map[string]any{"from": string(old.phase)}})
				if cur.phase == lifecycle.PhaseRestarting && cur.cause == "" {
					cur.cause = st.PhaseReason
				}
			}
			if !cur.restartAt.Equal(old.restartAt) && st.LastRestartReason != "" {
				cur.cause = "supervisor: " + st.LastRestartReason
			}
			// A new fleetd of a fleet that ran (its restarting phase may
			// have come and gone between two looks) is a restart too.
			if cur.cause == "" && !cur.startedAt.Equal(old.startedAt) && !old.startedAt.IsZero() &&
				old.phase != lifecycle.PhaseStopped && old.phase != lifecycle.PhaseFailed {
				cur.cause = st.PhaseReason
			}
			if cur.phase == lifecycle.PhaseRunning && (cur.cause != "" || cur.membersLost != old.membersLost) {
				ended := len(st.LastLost)
				if cur.membersLost == old.membersLost {
					ended = 0
				}
				cause := cur.cause
				if cause == "" {
					cause = st.PhaseReason
				}
				a.append(journal.Event{Fleet: n, Kind: journal.KindRestart, Outcome: "running",
					Detail: fmt.Sprintf("%s; ended %d members", cause, ended),
					Data:   map[string]any{"cause": cause, "members_ended": ended, "members": st.LastLost}})
				cur.cause = ""
			}
		}
		a.fleets[n] = cur
		a.mu.Unlock()
		active := map[notify.Subject]string{}
		if cur.phase == lifecycle.PhaseFailed {
			active[notify.Subject{Kind: "fleet.failed"}] = st.PhaseReason
		}
		if st.Desired == lifecycle.DesiredRunning && cur.phase != lifecycle.PhaseRunning && cur.phase != lifecycle.PhaseStarting {
			active[notify.Subject{Kind: "fleet.down"}] = string(cur.phase) + ": " + st.PhaseReason
		}
		a.n.Observe(n, []string{"fleet.failed", "fleet.down"}, active)
	}
}

// noteInterrupted journals, once at serve's start (before its supervisor
// acts), each fleet whose record shows a start, restart or stop that the
// fleetmgr making it — a serve killed with kill -9, a CLI — left half-way
// (lifecycle.CondInterrupted): a control event with outcome
// "indeterminate", since what the action did before it died is not
// known; the supervisor then takes the fleet over (its fleet.phase and
// fleet.restart events follow).
func (a *attention) noteInterrupted() {
	for _, n := range a.m.Names() {
		st, err := a.m.State(n)
		if err != nil || st.Shown.Condition != lifecycle.CondInterrupted {
			continue
		}
		verb := map[lifecycle.Phase]string{lifecycle.PhaseStarting: "start", lifecycle.PhaseRestarting: "restart", lifecycle.PhaseStopping: "stop"}[st.Phase]
		if verb == "" {
			continue
		}
		a.append(journal.Event{Fleet: n, Kind: journal.KindControl, Origin: fmt.Sprintf("serve pid %d, at its start", os.Getpid()), Outcome: "indeterminate",
			Detail: fmt.Sprintf("%s interrupted: the fleetmgr making it (a serve or CLI) died mid-way, %s since %s; what it did is not known, serve's supervisor takes the fleet over",
				verb, st.Phase, st.PhaseAt.UTC().Format(time.RFC3339)),
			Data: map[string]any{"verb": verb, "phase": string(st.Phase), "phase_reason": st.PhaseReason, "since": st.PhaseAt.UTC()}})
	}
}

// watchHosts follows the federation's view of the peers until ctx ends
// (at each change of the view, and every second): each peer's state
// change is journalled (federation.host), and the peers are reported to
// the notifier (host.offline: presence expired, or a clean stop
// announced). While this host itself is not connected to the broker
// every peer looks silent, so none is judged then (no episode begins or
// ends on this host's own outage).
func (a *attention) watchHosts(ctx context.Context) {
	changes := a.remote.Changes()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := map[string]federation.HostState{}
	for {
		view := a.remote.View()
		for _, h := range view {
			if from, ok := last[h.Host]; (ok || h.State != federation.HostNeverSeen) && from != h.State {
				if !ok {
					from = federation.HostNeverSeen
				}
				a.append(journal.Event{Kind: journal.KindHost, Origin: h.Host, Outcome: string(h.State), Detail: hostDetail(h),
					Data: map[string]any{"from": string(from)}})
			}
			last[h.Host] = h.State
		}
		if a.remote.Status().Connected {
			offline := map[string]string{}
			var online []string
			for _, h := range view {
				switch h.State {
				case federation.HostOnline:
					online = append(online, h.Host)
				case federation.HostExpired, federation.HostOffline:
					offline[h.Host] = hostDetail(h)
				}
			}
			a.n.ObserveHosts(offline, online)
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}

// hostDetail says why a peer is in its state, for the journal and a
// notification.
func hostDetail(h federation.HostView) string {
	seen := "never"
	if !h.LastSeen.IsZero() {
		seen = h.LastSeen.Local().Format(time.TimeOnly)
	}
	switch h.State {
	case federation.HostExpired:
		return "its presence expired (no beat for 3 heartbeats: killed, cut off, or lost the broker); last beat at " + seen
	case federation.HostOffline:
		return "it announced a clean stop of its fleetmgr serve at " + seen
	case federation.HostOnline:
		return "beats arriving"
	}
	return ""
}

// memberKinds are the notify kinds judged from member verdicts.
var memberKinds = []string{"member.blocked", "member.stalled", "member.done"}

// memberSeen is a member's verdict as last seen (by a status report or
// herdr's push), with its reason and whether herdr says it is done.
type memberSeen struct {
	verdict, reason string
	done            bool
}

// seenLocked records a member's verdict; a change is journalled (once,
// whichever of the two paths saw it first).
func (a *attention) seenLocked(fleet, member string, m memberSeen, at time.Time) {
	ms := a.verdicts[fleet]
	if ms == nil {
		ms = map[string]memberSeen{}
		a.verdicts[fleet] = ms
	}
	before, had := ms[member]
	ms[member] = m
	if !had || before.verdict != m.verdict {
		from := before.verdict
		if !had {
			from = "new"
		}
		a.append(journal.Event{Time: at, Fleet: fleet, Member: member, Kind: journal.KindVerdict, Outcome: m.verdict,
			Detail: m.reason, Data: map[string]any{"from": from}})
	}
}

// notifyFleet reports the fleet's member states to the notifier.
func (a *attention) notifyFleet(fleet string) {
	active := map[notify.Subject]string{}
	a.mu.Lock()
	for id, m := range a.verdicts[fleet] {
		switch status.Verdict(m.verdict) {
		case status.Blocked:
			active[notify.Subject{Kind: "member.blocked", Member: id}] = m.reason
		case status.Stalled:
			active[notify.Subject{Kind: "member.stalled", Member: id}] = m.reason
		}
		if m.done {
			active[notify.Subject{Kind: "member.done", Member: id}] = m.reason
		}
	}
	a.mu.Unlock()
	a.n.Observe(fleet, memberKinds, active)
}

// observe is the status collector's report hook: member verdict changes
// are journalled (members no longer listed as gone), and member states
// reported to the notifier.
func (a *attention) observe(rep *status.Report) {
	for i := range rep.Fleets {
		f := &rep.Fleets[i]
		if f.Verdict != "" || f.MemberCount < 0 { // not judged: leave what was seen
			continue
		}
		a.mu.Lock()
		listed := map[string]bool{}
		for _, mb := range f.Members {
			listed[mb.ID] = true
			a.seenLocked(f.Name, mb.ID, memberSeen{verdict: string(mb.Verdict), reason: mb.Reason, done: mb.AgentStatus == "done"}, rep.GeneratedAt)
		}
		for id, m := range a.verdicts[f.Name] {
			if !listed[id] {
				delete(a.verdicts[f.Name], id)
				a.append(journal.Event{Time: rep.GeneratedAt, Fleet: f.Name, Member: id, Kind: journal.KindVerdict, Outcome: "gone", Data: map[string]any{"from": m.verdict}})
			}
		}
		a.mu.Unlock()
		a.notifyFleet(f.Name)
	}
}

// onVerdict is the push tracker's verdict-change hook (status.Tracker):
// the change is journalled and the notifier told at once.
func (a *attention) onVerdict(v status.VerdictChange) {
	a.mu.Lock()
	done := a.verdicts[v.Fleet][v.Member].done
	a.seenLocked(v.Fleet, v.Member, memberSeen{verdict: string(v.To), reason: v.Reason, done: done}, v.At)
	a.mu.Unlock()
	a.notifyFleet(v.Fleet)
}

// sampleMembers judges the members of the running local fleets that a
// member.* rule watches, one Collect after another (each takes about
// [status] interval), so a member's state is seen without anyone asking
// for status. Without such rules it only waits.
func (a *attention) sampleMembers(ctx context.Context, col *status.Collector) {
	for {
		var due []string
		rules := a.m.Config().Notify
		for _, n := range a.m.Names() {
			f, err := a.m.Fleet(n)
			if err != nil || !col.IsLocal(f.Host) {
				continue
			}
			if !watchedForMembers(rules, n) {
				continue
			}
			if st, err := a.m.State(n); err == nil && st.Shown.Phase == lifecycle.PhaseRunning {
				due = append(due, n)
			}
		}
		if len(due) > 0 {
			_, _ = col.Collect(ctx, status.Request{Fleets: due})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func watchedForMembers(rules []registry.Notify, fleet string) bool {
	for _, r := range rules {
		if len(r.Fleets) > 0 && !contains(r.Fleets, fleet) {
			continue
		}
		for _, k := range r.On {
			if strings.HasPrefix(k, "member.") {
				return true
			}
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// onDecision journals the guard's refusals.
func (a *attention) onDecision(d guard.Decision) {
	if d.Allowed {
		return
	}
	a.append(journal.Event{Kind: journal.KindRefusal, Origin: decisionOrigin("", d), Outcome: "refused",
		Detail: fmt.Sprintf("rule %s: %s", d.Rule, d.Reason)})
}

// caller is what serve knows of one connection's client: where it came
// from (origin) and the name it gave in initialize.
type caller struct {
	origin string
	client atomic.Pointer[string]
}

type callerKey struct{}

type sessionIDKey struct{}

// withSessionID is the /mcp handler's wrapper that keeps the request's
// Mcp-Session-Id in its context: an HTTP client's calls may come on
// another connection than its initialize, so its name is found by session.
func withSessionID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			r = r.WithContext(context.WithValue(r.Context(), sessionIDKey{}, sid))
		}
		h.ServeHTTP(w, r)
	})
}

// withCaller attaches a connection's caller to ctx (origin "": resolved
// from the guard's decision, an HTTP connection's).
func withCaller(ctx context.Context, origin string) context.Context {
	return context.WithValue(ctx, callerKey{}, &caller{origin: origin})
}

// callerOf describes the caller whose request ctx is: "unix uid=… pid=…
// (exe) client NAME", "http …", or "" when unknown.
func (a *attention) callerOf(ctx context.Context, ss *mcp.ServerSession) string {
	c, _ := ctx.Value(callerKey{}).(*caller)
	origin := ""
	client := ""
	if c != nil {
		origin = c.origin
		if p := c.client.Load(); p != nil {
			client = *p
		}
	}
	if origin == "" {
		if d, ok := guard.DecisionOf(ctx); ok {
			origin = decisionOrigin("http", d)
		}
	}
	if sid, _ := ctx.Value(sessionIDKey{}).(string); ss == nil && sid != "" && a.mcp != nil {
		for _, s := range a.mcp() {
			if s.ID() == sid {
				ss = s
				break
			}
		}
	}
	if client == "" && ss != nil {
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil {
			client = ip.ClientInfo.Name
		}
	}
	if client != "" {
		if origin != "" {
			origin += " "
		}
		origin += "client " + client
	}
	return origin
}

func decisionOrigin(via string, d guard.Decision) string {
	s := fmt.Sprintf("uid=%d pid=%d", d.UID, d.PID)
	if d.Exe != "" {
		s += " (" + filepath.Base(d.Exe) + ")"
	}
	if via != "" {
		s = via + " " + s
	}
	return s
}

// controlTools are the manager tools whose calls are control actions.
var controlTools = map[string]bool{
	proxy.ManagerToolPrefix + "start": true, proxy.ManagerToolPrefix + "stop": true,
	proxy.ManagerToolPrefix + "restart": true, proxy.ReloadTool: true,
}

// middleware is the MCP server's receiving middleware: it keeps each
// connection's client name (initialize) and journals the control actions
// (fleetmgr_start, _stop, _restart, _reload) with their origin and
// outcome.
func (a *attention) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.InitializeRequest); ok && r.Params != nil && r.Params.ClientInfo != nil {
			if c, _ := ctx.Value(callerKey{}).(*caller); c != nil {
				name := r.Params.ClientInfo.Name
				c.client.Store(&name)
			}
		}
		if lr, ok := req.(*mcp.ServerRequest[*mcp.SetLoggingLevelParams]); ok && lr.Params != nil {
			res, err := next(ctx, method, req)
			if err == nil {
				a.mu.Lock()
				if a.logLevels == nil {
					a.logLevels = map[*mcp.ServerSession]mcp.LoggingLevel{}
				}
				a.logLevels[lr.Session] = lr.Params.Level
				a.mu.Unlock()
			}
			return res, err
		}
		r, ok := req.(*mcp.CallToolRequest)
		if ok && method == "tools/call" && r.Params != nil && r.Params.Name == proxy.ToolsTool && r.Params.Meta[proxy.ToolsChangeMeta] != nil {
			res, err := next(ctx, method, req)
			a.toolsChanged(ctx, r, res, err)
			return res, err
		}
		if !ok || method != "tools/call" || r.Params == nil || !controlTools[r.Params.Name] {
			return next(ctx, method, req)
		}
		t0 := time.Now()
		res, err := next(ctx, method, req)
		var args struct {
			Fleet string `json:"fleet"`
			Lead  bool   `json:"lead"`
		}
		_ = json.Unmarshal(r.Params.Arguments, &args)
		verb := strings.TrimPrefix(r.Params.Name, proxy.ManagerToolPrefix)
		e := journal.Event{Fleet: args.Fleet, Kind: journal.KindControl, Origin: a.callerOf(ctx, r.Session), Detail: verb,
			Outcome: outcomeOf(res, err), Data: map[string]any{"duration_ms": float64(time.Since(t0).Microseconds()) / 1e3}}
		if tr, ok := res.(*mcp.CallToolResult); ok && err == nil && tr.Meta[proxy.MetaOutcome] == proxy.OutcomeIndeterminate {
			// A peer's fleet: the request left and no answer came, so it
			// may have run there. Never recorded as a failure to retry
			// (issue 27 item 8); cause says how it ended.
			e.Data["cause"] = strings.TrimPrefix(e.Outcome, "error: ")
			e.Outcome = proxy.OutcomeIndeterminate
		}
		if args.Lead {
			e.Detail += " --lead"
		}
		a.append(e)
		return res, err
	}
}

// toolsChanged journals a `fleetmgr tools hide|show` (the fleetmgr_tools
// call that follows it, with proxy.ToolsChangeMeta) as a control action of
// the caller: "ok" when the report the call returns has each tool's
// override with that action on that fleet in force, otherwise why not.
func (a *attention) toolsChanged(ctx context.Context, r *mcp.CallToolRequest, res mcp.Result, err error) {
	var change proxy.ToolsChange
	if b, jerr := json.Marshal(r.Params.Meta[proxy.ToolsChangeMeta]); jerr == nil {
		_ = json.Unmarshal(b, &change)
	}
	var args struct {
		Fleet string `json:"fleet"`
	}
	_ = json.Unmarshal(r.Params.Arguments, &args)
	if change.Action != toolpolicy.ActionHide && change.Action != toolpolicy.ActionShow || len(change.Tools) == 0 || args.Fleet == "" {
		return // not a change the CLI makes: nothing to journal
	}
	out := outcomeOf(res, err)
	if out == "ok" {
		var rep struct {
			Overrides []toolpolicy.Override `json:"overrides"`
		}
		if tr, ok := res.(*mcp.CallToolResult); ok {
			if b, jerr := json.Marshal(tr.StructuredContent); jerr == nil {
				_ = json.Unmarshal(b, &rep)
			}
		}
		var missing []string
		for _, t := range change.Tools {
			if !slices.ContainsFunc(rep.Overrides, func(o toolpolicy.Override) bool {
				return o.Fleet == args.Fleet && o.Tool == t && o.Action == change.Action
			}) {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			out = "error: not in the overrides in force: " + strings.Join(missing, " ")
		}
	}
	a.append(journal.Event{Fleet: args.Fleet, Kind: journal.KindControl, Origin: a.callerOf(ctx, r.Session),
		Detail: "tools " + change.Action + " " + strings.Join(change.Tools, " "), Outcome: out,
		Data: map[string]any{"action": change.Action, "tools": change.Tools}})
}

// outcomeOf is "ok" or the error a tool call answered.
func outcomeOf(res mcp.Result, err error) string {
	if err != nil {
		return "error: " + firstLineOf(err.Error())
	}
	if tr, ok := res.(*mcp.CallToolResult); ok && tr.IsError {
		for _, c := range tr.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				return "error: " + firstLineOf(t.Text)
			}
		}
		return "error"
	}
	return "ok"
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// onCall journals one forwarded call of a fleet tool.
func (a *attention) onCall(ctx context.Context, c proxy.CallRecord) {
	origin := a.callerOf(ctx, nil)
	if c.Peer != "" {
		origin = "peer " + c.Peer
	}
	data := map[string]any{"tool": c.Tool, "duration_ms": float64(c.Duration.Microseconds()) / 1e3, "result_bytes": c.ResultBytes}
	if a.callArgs && len(c.Args) > 0 {
		data["arguments"] = json.RawMessage(append([]byte(nil), c.Args...))
	}
	out := c.Outcome
	if c.Indeterminate {
		// Sent and cut before its answer: it may have run. Never recorded
		// as a failure to retry (issue 27 item 8); cause says how it ended.
		out = proxy.OutcomeIndeterminate
		data["cause"] = c.Outcome
	}
	a.append(journal.Event{Fleet: c.Fleet, Kind: journal.KindCall, Origin: origin, Outcome: out, Detail: c.Tool, Data: data})
}

// reloaded journals a reload: its diff, or why it was not applied.
func (a *attention) reloaded(rep *lifecycle.ReloadReport, err error) {
	e := journal.Event{Kind: journal.KindReload, Outcome: "ok"}
	if err != nil {
		e.Outcome = "error: " + firstLineOf(err.Error())
	} else if rep != nil {
		lines := rep.Lines()
		e.Detail = strings.Join(lines, "; ")
		e.Data = map[string]any{"added": rep.Added, "removed": rep.Removed, "changed": rep.Changed, "generation": rep.Generation}
	}
	a.append(e)
}

// executor journals each federation control request a peer made of this
// host, executed or refused; it answers the events verb itself, from
// the journal (answerEvents), and hands every other verb to x.
func (a *attention) executor(x federation.Executor) federation.Executor {
	return federation.ExecutorFunc(func(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
		var res json.RawMessage
		var err error
		if verb == wire.VerbEvents {
			res, err = a.answerEvents(from, fleet, args) // the journal is this part's
		} else {
			res, err = x.Control(ctx, from, verb, fleet, args)
		}
		out := "executed"
		if err != nil {
			out = "refused: " + firstLineOf(err.Error())
		}
		var data map[string]any
		if exp, ok := federation.RequestExpiry(ctx); ok && time.Now().After(exp) && verb != wire.VerbEvents {
			// It ran here, but its answer comes after the sender stopped
			// waiting: the sender was told the outcome is unknown, so
			// this host records it so too, with what happened here
			// (issue 27 item 8).
			data = map[string]any{"cause": fmt.Sprintf("the answer came after %s stopped waiting (the request's expiry, %s)", from, exp.UTC().Format(time.RFC3339)),
				"result": out}
			out = proxy.OutcomeIndeterminate
		}
		a.append(journal.Event{Fleet: fleet, Kind: journal.KindFederation, Origin: "peer " + from, Outcome: out, Detail: verb, Data: data})
		return res, err
	})
}

// fedRefused journals a message the federation refused before any
// executor ran (a forged or unsigned one, an untrusted key, a replay, an
// expired or skewed one, a verified one not authorised); rate-limited by
// the federation as its log lines are. The origin is the host the
// message claims, said as claimed: it is unverified for refusals before
// the signature check.
func (a *attention) fedRefused(r federation.Refused) {
	data := map[string]any{"queue": r.Queue, "reason": string(r.Reason)}
	if r.ID != "" {
		data["id"] = r.ID
	}
	if r.Kind != "" {
		data["message_kind"] = string(r.Kind)
	}
	if r.NotLogged > 0 {
		data["not_journalled_since_last"] = r.NotLogged
	}
	origin := "unknown sender"
	if r.ClaimedFrom != "" {
		origin = "claimed peer " + r.ClaimedFrom
	}
	a.append(journal.Event{Kind: journal.KindFederation, Origin: origin, Outcome: "refused: " + string(r.Reason), Detail: firstLineOf(r.Detail), Data: data})
}

// dashboardAction journals the page's lifecycle actions.
func (a *attention) dashboardAction(verb, fleet string, lead bool, err error) {
	out := "ok"
	var data map[string]any
	if err != nil {
		out = "error: " + firstLineOf(err.Error())
	}
	if federation.IsIndeterminate(err) {
		// As the middleware's: it may have run on the peer.
		out, data = proxy.OutcomeIndeterminate, map[string]any{"cause": firstLineOf(err.Error())}
	}
	d := verb
	if lead {
		d += " --lead"
	}
	a.append(journal.Event{Fleet: fleet, Kind: journal.KindControl, Origin: "dashboard", Outcome: out, Detail: d, Data: data})
}

// mcpNotify is the mcp sink: notifications/message to every connected
// session that asked for log messages (logging/setLevel).
func (a *attention) mcpNotify(ctx context.Context, e notify.Event) (int, error) {
	if a.mcp == nil {
		return 0, nil
	}
	sessions := a.mcp()
	a.mu.Lock()
	levels := make(map[*mcp.ServerSession]mcp.LoggingLevel, len(sessions))
	for _, ss := range sessions {
		if l, ok := a.logLevels[ss]; ok {
			levels[ss] = l
		}
	}
	a.logLevels = levels // sessions gone are forgotten
	a.mu.Unlock()
	n := 0
	for _, ss := range sessions {
		if !logsWarnings(levels[ss]) {
			continue // no level set (the go-sdk would send nothing), or above warning
		}
		if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "fleetmgr.notify", Data: e}); err == nil {
			n++
		}
	}
	return n, nil
}

// logsWarnings reports whether a session that set level l (logging/setLevel;
// "" for none) takes a message of level warning (RFC 5424 order, as MCP's).
func logsWarnings(l mcp.LoggingLevel) bool {
	switch l {
	case "debug", "info", "notice", "warning":
		return true
	}
	return false
}

// failingSinks are the notification sinks whose last delivery failed
// (status and check show them; proxy.Options.NotifyFailing).
func (a *attention) failingSinks() []status.FailingSink {
	var out []status.FailingSink
	for _, h := range a.n.Health() {
		if h.Failures > 0 {
			out = append(out, status.FailingSink{Rule: h.Rule, Sink: h.Sink, Failures: h.Failures, LastError: h.LastError, LastOK: h.LastOK})
		}
	}
	return out
}

// attentionCollector exposes the journal's and the notifier's counters:
//
//	fleetmgr_journal_events_written_total        events written to the journal (its log, then the file)
//	fleetmgr_journal_events_dropped_total        events lost (buffer full, or a failed write)
//	fleetmgr_journal_write_errors_total{reason}  failed writes and commits (reason disk_full or other)
//	fleetmgr_journal_files_set_aside_total       corrupt journal files set aside
//	fleetmgr_notify_sent_total{rule,sink}        notifications delivered
//	fleetmgr_notify_failed_total{rule,sink}      deliveries that failed after their retries
//	fleetmgr_notify_sink_failing{rule,sink}      1 while a sink's last delivery failed
//	fleetmgr_state_reserve_released_total        state dir space reserves released on a full disk
type attentionCollector struct {
	a                                                             *attention
	written, dropped, errs, aside, sent, failed, failing, reserve *prometheus.Desc
}

func (a *attention) collector() prometheus.Collector {
	return &attentionCollector{a: a,
		written: prometheus.NewDesc("fleetmgr_journal_events_written_total", "Events written to the journal (<state_dir>/journal.db, through its write-ahead log journal.db-wal) by this serve.", nil, nil),
		dropped: prometheus.NewDesc("fleetmgr_journal_events_dropped_total", "Events the journal lost: its buffer was full, or their write failed (a full disk among them).", nil, nil),
		errs:    prometheus.NewDesc("fleetmgr_journal_write_errors_total", "Journal writes (to its log) and commits (to the file) that failed, by reason (disk_full: ENOSPC; other).", []string{"reason"}, nil),
		aside:   prometheus.NewDesc("fleetmgr_journal_files_set_aside_total", "Corrupt journal files set aside (a new one was started).", nil, nil),
		sent:    prometheus.NewDesc("fleetmgr_notify_sent_total", "Notifications delivered, by rule and sink.", []string{"rule", "sink"}, nil),
		failed:  prometheus.NewDesc("fleetmgr_notify_failed_total", "Notification deliveries that failed after their retries, by rule and sink.", []string{"rule", "sink"}, nil),
		failing: prometheus.NewDesc("fleetmgr_notify_sink_failing", "1 while a sink's last delivery failed, else 0.", []string{"rule", "sink"}, nil),
		reserve: prometheus.NewDesc("fleetmgr_state_reserve_released_total", "Times a fleet's record met a full disk and the state dir's space reserve (<state_dir>/.reserve) was released so it could be written.", nil, nil),
	}
}

// Describe sends the descriptors.
func (c *attentionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.written, c.dropped, c.errs, c.aside, c.sent, c.failed, c.failing, c.reserve} {
		ch <- d
	}
}

// Collect sends the current values.
func (c *attentionCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.reserve, prometheus.CounterValue, float64(c.a.m.Reserve().Released()))
	if j := c.a.j; j != nil {
		s := j.Stats()
		ch <- prometheus.MustNewConstMetric(c.written, prometheus.CounterValue, float64(s.Written))
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(s.Dropped))
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.DiskFull), "disk_full")
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.WriteErrors-s.DiskFull), "other")
		ch <- prometheus.MustNewConstMetric(c.aside, prometheus.CounterValue, float64(s.SetAside))
	}
	for _, h := range c.a.n.Health() {
		failing := 0.0
		if h.Failures > 0 {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(h.Sent), h.Rule, h.Sink)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(h.Failed), h.Rule, h.Sink)
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, failing, h.Rule, h.Sink)
	}
}
