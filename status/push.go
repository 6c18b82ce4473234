package status

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// Updates modes (HerdrUpdates.Mode): how fleetmgr learns a fleet's herdr state.
const (
	// UpdatesEvents: herdr pushes it (events.subscribe), after one session.snapshot.
	UpdatesEvents = "events"
	// UpdatesSampling: fleetmgr asks herdr on every status (ping, pane.list, pane.read).
	UpdatesSampling = "sampling"
)

// LabelSource is the source fleetmgr reports its verdict labels under
// (pane.report_metadata), and the label's key.
const LabelSource = "fleetmgr"

// TrackerOptions configure a Tracker.
type TrackerOptions struct {
	// Refresh is how often the tracker looks for fleets started or stopped
	// and re-reads their rosters (which pane holds a member); zero means
	// 10 s. A pane created or closed in a fleet's session also re-reads
	// its roster.
	Refresh time.Duration
	// Changes, when set, says a fleet's state may have changed (serve
	// sends on every state file written): the tracker looks at once.
	Changes <-chan struct{}
	// Backstop is how often a pushed fleet's session.snapshot is taken
	// anyway, for anything an event did not say; zero means 60 s.
	Backstop time.Duration
	// Labels reports each member's verdict to herdr (pane.report_metadata,
	// e.g. "STALLED 3m"), shown in herdr's own sidebar ([manager]
	// herdr_labels). A herdr lacking the method is left alone.
	Labels bool
	// OnVerdict, when set, is called each time a tracked member's verdict
	// changes (for a journal). It is called from the tracker's goroutines,
	// in order for one fleet, and must not block.
	OnVerdict func(VerdictChange)
	// Log receives the tracker's news (subscribed, re-subscribed and why,
	// fell back to sampling and why); nil means the Collector's log.
	Log *slog.Logger
}

// VerdictChange is one member's verdict moving, as the Tracker saw it.
type VerdictChange struct {
	// Fleet, Member and PaneID name the member.
	Fleet, Member, PaneID string
	// From is the previous verdict ("" for the first), To the new one.
	From, To Verdict
	// Reason explains To.
	Reason string
	// At is when the tracker saw it.
	At time.Time
}

// Tracker keeps every running local fleet's herdr state from what herdr
// pushes instead of asking for it on every status (docs/ARCHITECTURE.md
// "Status from herdr's push"). Per fleet it holds one subscription to pane
// lifecycle events and one to the agent status of the panes that hold a
// member, both taken before a session.snapshot; events are applied at
// once. An events_lost line, a closed connection or herdr restarting makes
// it subscribe again and take a new snapshot (logged, counted in
// HerdrUpdates.Resyncs); a snapshot every Backstop catches anything
// missed. What herdr cannot push, a busy member's output (herdr has no
// output signal and pane.read's revision is always 0), it reads every
// [status] interval, for busy members only. A herdr whose protocol lacks
// the methods (herdr.HasPush, from ping) is left to the Collector's
// sampling, as is every fleet until its first snapshot.
type Tracker struct {
	c   *Collector
	opt TrackerOptions
	log *slog.Logger

	changed chan struct{} // signalled on every verdict change

	mu     sync.Mutex
	fleets map[string]*track
}

// track is one fleet's herdr state. Fields after mu's comment are guarded
// by Tracker.mu.
type track struct {
	name    string
	socket  string
	cancel  context.CancelFunc
	done    chan struct{}
	members chan struct{} // the member panes changed: re-subscribe
	roster  chan struct{} // re-read the roster
	relook  chan struct{} // a member's liveStatus changed: judge again, look if busy

	// Guarded by Tracker.mu.
	alive    bool
	err      string
	version  string
	protocol int
	mode     string
	reason   string
	since    time.Time
	resyncs  int
	ready    bool // subscribed, snapshot applied
	panes    map[string]herdr.PaneInfo
	rows     map[string]RosterRow // pane → member
	looks    map[string]*lookMemo // pane → output looks
	verdicts map[string]Member    // pane → last judgement
	labels   map[string]string    // pane → label last reported
	noLabels bool                 // herdr lacks pane.report_metadata
	seq      uint64
	heard    time.Time // when herdr last answered or sent an event (Tracker.Heard)
}

// lookMemo is what the tracker's reads of one busy member's pane saw.
type lookMemo struct {
	n          int       // looks taken
	hash       [32]byte  // output of the last look
	at, prevAt time.Time // the last two looks
	outChanged bool      // output differed between the last two looks
	outSince   time.Time // when the output was last seen to change (zero: not seen)
	files      fileSample
	prevFiles  fileSample
}

// NewTracker returns a Tracker feeding c: while it runs, c's reports of a
// pushed fleet use its state instead of sampling herdr.
func (c *Collector) NewTracker(opt TrackerOptions) *Tracker {
	if opt.Refresh <= 0 {
		opt.Refresh = 10 * time.Second
	}
	if opt.Backstop <= 0 {
		opt.Backstop = 60 * time.Second
	}
	log := opt.Log
	if log == nil {
		log = c.opt.Log
	}
	t := &Tracker{c: c, opt: opt, log: log, changed: make(chan struct{}, 1), fleets: map[string]*track{}}
	c.mu.Lock()
	c.tracker = t
	c.mu.Unlock()
	return t
}

// Changes is signalled (at most one pending) whenever a member's verdict
// changes, so a reader (the dashboard) can collect at once.
func (t *Tracker) Changes() <-chan struct{} { return t.changed }

// Run tracks the running local fleets until ctx ends; it owns one
// goroutine per tracked fleet and waits for them before returning.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.opt.Refresh)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		t.refresh(ctx, &wg)
		select {
		case <-ctx.Done():
			t.mu.Lock()
			for _, tr := range t.fleets {
				tr.cancel()
			}
			t.mu.Unlock()
			return
		case <-tick.C:
		case <-t.opt.Changes: // nil: never
		}
	}
}

// refresh starts a track for each running local fleet that has none (or
// whose socket moved), stops those of fleets no longer running (a fleet
// starting or restarting keeps its track: its herdr coming back is a
// re-subscription), and asks every track to re-read its roster.
func (t *Tracker) refresh(ctx context.Context, wg *sync.WaitGroup) {
	m := t.c.opt.Manager
	want := map[string]string{}
	keep := map[string]bool{}
	for _, n := range m.Names() {
		f, err := m.Fleet(n)
		if err != nil || !t.c.IsLocal(f.Host) {
			continue
		}
		st, err := m.State(n)
		if err != nil {
			continue
		}
		if ph := st.Shown.Phase; ph == lifecycle.PhaseStarting || ph == lifecycle.PhaseRestarting {
			keep[n] = true
		}
		if st.Shown.Phase != lifecycle.PhaseRunning {
			continue
		}
		sock := st.HerdrSocket
		if sock == "" {
			sock = m.HerdrSocket(f)
		}
		want[n] = sock
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for n, tr := range t.fleets {
		if keep[n] {
			continue
		}
		if want[n] != tr.socket {
			tr.cancel()
			delete(t.fleets, n)
		}
	}
	for n, sock := range want {
		if tr, ok := t.fleets[n]; ok {
			signal(tr.roster)
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		tr := &track{name: n, socket: sock, cancel: cancel, done: make(chan struct{}),
			members: make(chan struct{}, 1), roster: make(chan struct{}, 1), relook: make(chan struct{}, 1),
			panes: map[string]herdr.PaneInfo{}, rows: map[string]RosterRow{}, looks: map[string]*lookMemo{},
			verdicts: map[string]Member{}, labels: map[string]string{}}
		t.fleets[n] = tr
		signal(tr.roster)
		wg.Go(func() {
			defer close(tr.done)
			t.runFleet(fctx, tr)
		})
		wg.Go(func() { t.runRoster(fctx, tr) })
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// runRoster re-reads a fleet's roster whenever asked, until ctx ends.
func (t *Tracker) runRoster(ctx context.Context, tr *track) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tr.roster:
		}
		f, err := t.c.opt.Manager.Fleet(tr.name)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, t.c.opt.FleetTimeout+t.c.opt.Interval)
		rows, err := t.c.opt.Roster(rctx, f)
		cancel()
		if err != nil {
			t.log.Warn("herdr updates: roster not read; member panes unchanged", "fleet", tr.name, "err", err)
			continue
		}
		t.noteRoster(tr.name, rows)
	}
}

// noteRoster records which panes hold a member of fleet (from any roster
// read, the Collector's too); a changed set makes the fleet's status
// subscription be taken again.
func (t *Tracker) noteRoster(fleet string, rows []RosterRow) {
	t.mu.Lock()
	tr := t.fleets[fleet]
	if tr == nil {
		t.mu.Unlock()
		return
	}
	next := map[string]RosterRow{}
	for _, r := range rows {
		if r.PaneID != "" {
			next[r.PaneID] = r
		}
	}
	changed := !slices.Equal(slices.Sorted(maps.Keys(next)), slices.Sorted(maps.Keys(tr.rows)))
	live := false // fleetd's liveStatus of a member moved (busy or not, without a herdr event)
	for p, r := range next {
		if old, ok := tr.rows[p]; ok && old.LiveStatus != r.LiveStatus {
			live = true
		}
	}
	tr.rows = next
	t.mu.Unlock()
	if changed {
		signal(tr.members)
	}
	if live {
		signal(tr.relook)
	}
}

// streamItem is one event, or the error that ended a stream.
type streamItem struct {
	ev  herdr.Event
	err error
	gen int // which status subscription it came from (0: lifecycle)
}

// runFleet keeps one fleet's subscriptions until ctx ends: each session
// runs until something breaks, then it starts again (re-subscribe, new
// snapshot).
func (t *Tracker) runFleet(ctx context.Context, tr *track) {
	hc := &herdr.Client{Socket: tr.socket, Timeout: 5 * time.Second}
	wait := 200 * time.Millisecond
	for {
		err := t.session(ctx, tr, hc)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		tr.ready = false
		was := tr.mode
		if err != nil {
			tr.resyncs++
		}
		t.mu.Unlock()
		if err != nil && was == UpdatesEvents {
			t.log.Info("herdr updates: subscriptions lost; re-subscribing and taking a new snapshot", "fleet", tr.name, "why", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
		if err == nil {
			wait = 200 * time.Millisecond
		}
	}
}

// lifecycleSubs are the pane lifecycle events a fleet's tracker follows.
var lifecycleSubs = []herdr.Subscription{
	{Type: herdr.SubPaneCreated}, {Type: herdr.SubPaneClosed}, {Type: herdr.SubPaneExited},
	{Type: herdr.SubPaneAgentDetected},
}

// session runs one subscribed session of tr: ping, subscribe (lifecycle,
// then member panes' status), snapshot, then events until something
// breaks (returned) or ctx ends.
func (t *Tracker) session(ctx context.Context, tr *track, hc *herdr.Client) error {
	pong, err := hc.Ping(ctx)
	t.mu.Lock()
	if err != nil {
		tr.alive, tr.err = false, err.Error()
		t.mu.Unlock()
		return fmt.Errorf("ping: %w", err)
	}
	tr.alive, tr.err, tr.version, tr.protocol, tr.heard = true, "", pong.Version, pong.Protocol, time.Now()
	t.mu.Unlock()
	if !herdr.HasPush(pong.Protocol) {
		t.sampling(tr, fmt.Sprintf("herdr %s speaks protocol %d, which has no event subscription (from protocol 20, herdr 0.8.1)", pong.Version, pong.Protocol))
		return t.idle(ctx, tr)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan streamItem, 64)
	var pumps sync.WaitGroup
	defer pumps.Wait()
	defer cancel()
	pump := func(s *herdr.Stream, gen int) {
		pumps.Go(func() {
			defer s.Close()
			for {
				ev, err := s.Next()
				select {
				case items <- streamItem{ev: ev, err: err, gen: gen}:
				case <-sctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		})
	}
	life, err := hc.Subscribe(sctx, lifecycleSubs)
	if err != nil {
		if herdr.IsMethodMissing(err) {
			t.sampling(tr, "herdr answered events.subscribe as a method it does not know")
			return t.idle(ctx, tr)
		}
		return fmt.Errorf("subscribe: %w", err)
	}
	pump(life, 0)
	gen := 0
	var statusStream *herdr.Stream
	subscribeMembers := func() error {
		if statusStream != nil {
			statusStream.Close()
			statusStream = nil
		}
		gen++
		t.mu.Lock()
		panes := slices.Sorted(maps.Keys(tr.rows))
		t.mu.Unlock()
		if len(panes) == 0 {
			return nil
		}
		subs := make([]herdr.Subscription, len(panes))
		for i, p := range panes {
			subs[i] = herdr.Subscription{Type: herdr.SubAgentStatus, PaneID: p}
		}
		s, err := hc.Subscribe(sctx, subs)
		if herdr.IsCode(err, "pane_not_found") {
			// A member's pane went before the roster said so: follow
			// the others; the roster is read again.
			signal(tr.roster)
			return nil
		}
		if err != nil {
			return fmt.Errorf("subscribe member panes: %w", err)
		}
		statusStream = s
		pump(s, gen)
		return nil
	}
	if err := subscribeMembers(); err != nil {
		return err
	}
	if err := t.snapshot(ctx, tr, hc); err != nil {
		if herdr.IsMethodMissing(err) {
			t.sampling(tr, "herdr answered session.snapshot as a method it does not know")
			return t.idle(ctx, tr)
		}
		return err
	}
	t.mu.Lock()
	first := tr.mode != UpdatesEvents
	tr.mode, tr.reason, tr.ready = UpdatesEvents, "", true
	if first {
		tr.since = time.Now()
	}
	nPanes, nMembers := len(tr.panes), len(tr.rows)
	t.mu.Unlock()
	t.log.Info("herdr updates: subscribed", "fleet", tr.name, "protocol", pong.Protocol, "panes", nPanes, "member_panes", nMembers)
	t.judgeAll(ctx, tr, hc)

	backstop := time.NewTicker(t.opt.Backstop)
	defer backstop.Stop()
	// Output is read every interval only while a member is busy: an idle
	// fleet costs no wakeup (issue 26). A member turning busy starts it
	// again, with a first read at once.
	look := time.NewTicker(t.c.opt.Interval)
	defer look.Stop()
	looking := t.look(ctx, tr, hc)
	if !looking {
		look.Stop()
	}
	busyNow := func() {
		if looking {
			return
		}
		t.mu.Lock()
		busy := tr.anyBusyLocked()
		t.mu.Unlock()
		if busy {
			look.Reset(t.c.opt.Interval)
			looking = t.look(ctx, tr, hc)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case it := <-items:
			if it.err != nil {
				if it.gen != 0 && it.gen != gen {
					continue // a status stream replaced meanwhile
				}
				if herdr.IsCode(it.err, herdr.CodeEventsLost) {
					return errors.New("herdr said events_lost (this subscriber lagged)")
				}
				return fmt.Errorf("subscription closed: %w", it.err)
			}
			t.noteHeard(tr)
			t.apply(ctx, tr, hc, it.ev)
			busyNow()
		case <-tr.members:
			if err := subscribeMembers(); err != nil {
				return err
			}
			// Panes that became members meanwhile: their status now.
			if err := t.snapshot(ctx, tr, hc); err != nil {
				return err
			}
			t.judgeAll(ctx, tr, hc)
			busyNow()
		case <-backstop.C:
			if err := t.snapshot(ctx, tr, hc); err != nil {
				return err
			}
			t.judgeAll(ctx, tr, hc)
			busyNow()
		case <-tr.relook:
			t.judgeAll(ctx, tr, hc)
			busyNow()
		case <-look.C:
			if looking = t.look(ctx, tr, hc); !looking {
				look.Stop()
			}
		}
	}
}

// sampling records that tr's fleet is left to the Collector's sampling.
func (t *Tracker) sampling(tr *track, why string) {
	t.mu.Lock()
	was := tr.mode
	tr.mode, tr.reason, tr.ready = UpdatesSampling, why, false
	if was != UpdatesSampling {
		tr.since = time.Now()
	}
	t.mu.Unlock()
	if was != UpdatesSampling {
		t.log.Info("herdr updates: sampling (no push)", "fleet", tr.name, "why", why)
	}
}

// idle waits one Backstop (a sampled fleet's herdr may be replaced by
// one that pushes) or until ctx ends.
func (t *Tracker) idle(ctx context.Context, tr *track) error {
	select {
	case <-ctx.Done():
	case <-time.After(t.opt.Backstop):
	}
	return nil
}

// snapshot takes session.snapshot and makes it tr's pane table.
func (t *Tracker) snapshot(ctx context.Context, tr *track, hc *herdr.Client) error {
	snap, err := hc.SessionSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	panes := make(map[string]herdr.PaneInfo, len(snap.Panes))
	for _, p := range snap.Panes {
		panes[p.PaneID] = p
	}
	t.mu.Lock()
	tr.panes = panes
	tr.version, tr.protocol, tr.heard = snap.Version, snap.Protocol, time.Now()
	t.mu.Unlock()
	return nil
}

// noteHeard records that tr's herdr answered or sent an event just now.
func (t *Tracker) noteHeard(tr *track) {
	t.mu.Lock()
	tr.heard = time.Now()
	t.mu.Unlock()
}

// Heard returns when the herdr server at socket last answered the tracker
// or sent it an event (zero: never, or no fleet tracked there). The
// supervisor counts it as a ping that answered (lifecycle
// Supervisor.HeardFrom), so a fleet whose herdr is talking is not pinged
// as well. A subscription's silence says nothing: an idle herdr and a
// hung one are both silent.
func (t *Tracker) Heard(socket string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	for _, tr := range t.fleets {
		if tr.socket == socket && tr.heard.After(last) {
			last = tr.heard
		}
	}
	return last
}

// apply updates tr from one event and judges the pane it concerns.
func (t *Tracker) apply(ctx context.Context, tr *track, hc *herdr.Client, ev herdr.Event) {
	d, err := ev.Decode()
	if err != nil {
		t.log.Debug("herdr updates: event not understood", "fleet", tr.name, "err", err)
		return
	}
	t.mu.Lock()
	reroster := false
	switch ev.Kind() {
	case herdr.KindAgentStatus:
		p, ok := tr.panes[d.PaneID]
		if !ok {
			p = herdr.PaneInfo{PaneID: d.PaneID, WorkspaceID: d.WorkspaceID}
		}
		p.AgentStatus = d.AgentStatus
		if d.Agent != "" {
			p.Agent = d.Agent
		}
		tr.panes[d.PaneID] = p
	case herdr.KindPaneAgentDetected:
		if p, ok := tr.panes[d.PaneID]; ok && d.Agent != "" {
			p.Agent = d.Agent
			tr.panes[d.PaneID] = p
		}
	case herdr.KindPaneCreated:
		if d.Pane != nil {
			if _, known := tr.panes[d.PaneID]; !known {
				tr.panes[d.PaneID] = *d.Pane
			}
		}
		reroster = true
	case herdr.KindPaneClosed, herdr.KindPaneExited:
		delete(tr.panes, d.PaneID)
		_, member := tr.rows[d.PaneID]
		reroster = member
	}
	t.mu.Unlock()
	if reroster {
		signal(tr.roster)
	}
	t.judge(ctx, tr, hc, d.PaneID)
}

// busyLocked reports whether the member r (in pane) claims busy: its
// output is then read every interval (look). Tracker.mu held.
func (tr *track) busyLocked(pane string, r RosterRow) bool {
	p, ok := tr.panes[pane]
	return ok && p.AgentStatus != herdr.StatusBlocked && (r.LiveStatus == herdr.StatusWorking || p.AgentStatus == herdr.StatusWorking)
}

// anyBusyLocked reports whether any member of tr claims busy. Tracker.mu
// held.
func (tr *track) anyBusyLocked() bool {
	for pane, r := range tr.rows {
		if tr.busyLocked(pane, r) {
			return true
		}
	}
	return false
}

// look reads the output of every busy member's pane (what herdr cannot
// push) and judges them all. It reports whether any member was busy
// (false: nothing to read until one is).
func (t *Tracker) look(ctx context.Context, tr *track, hc *herdr.Client) bool {
	t.mu.Lock()
	var busy []RosterRow
	for pane, r := range tr.rows {
		if tr.busyLocked(pane, r) {
			busy = append(busy, r)
		} else {
			delete(tr.looks, pane) // not busy: a later busy spell starts afresh
		}
	}
	t.mu.Unlock()
	for _, r := range busy {
		var fsm fileSample
		if r.Worktree != "" {
			fsm.at, fsm.source, fsm.err = t.c.opt.Files.LastChange(ctx, r.Worktree)
		}
		res, err := hc.PaneRead(ctx, herdr.PaneReadParams{PaneID: r.PaneID, Source: herdr.SourceRecent, Lines: OutputLines, StripANSI: true})
		if err != nil {
			continue // judged from the pane table; a gone pane's close event follows
		}
		h := sha256.Sum256([]byte(res.Text))
		now := time.Now()
		t.mu.Lock()
		tr.heard = now
		lm := tr.looks[r.PaneID]
		if lm == nil {
			lm = &lookMemo{}
			tr.looks[r.PaneID] = lm
		}
		lm.outChanged = lm.n > 0 && h != lm.hash
		if lm.outChanged {
			lm.outSince = now
		}
		lm.n++
		lm.hash, lm.prevAt, lm.at = h, lm.at, now
		lm.prevFiles, lm.files = lm.files, fsm
		t.mu.Unlock()
	}
	t.judgeAll(ctx, tr, hc)
	return len(busy) > 0
}

// judgeAll judges every member of tr.
func (t *Tracker) judgeAll(ctx context.Context, tr *track, hc *herdr.Client) {
	t.mu.Lock()
	panes := slices.Sorted(maps.Keys(tr.rows))
	t.mu.Unlock()
	for _, p := range panes {
		t.judge(ctx, tr, hc, p)
	}
}

// judge computes the verdict of the member in pane (if any); a change is
// handed to OnVerdict and Changes, and the label in herdr follows.
func (t *Tracker) judge(ctx context.Context, tr *track, hc *herdr.Client, pane string) {
	t.mu.Lock()
	r, ok := tr.rows[pane]
	if !ok || !tr.ready {
		t.mu.Unlock()
		return
	}
	m, known := tr.memberLocked(r, time.Now())
	if !known {
		// Busy, output not yet looked at twice: no verdict yet.
		t.mu.Unlock()
		return
	}
	prev, had := tr.verdicts[pane]
	tr.verdicts[pane] = m
	label := labelOf(m)
	sendLabel := t.opt.Labels && !tr.noLabels && tr.labels[pane] != label
	if sendLabel {
		tr.labels[pane] = label
		tr.seq++
	}
	seq := tr.seq
	t.mu.Unlock()
	if !had || prev.Verdict != m.Verdict {
		signal(t.changed)
		if t.opt.OnVerdict != nil {
			t.opt.OnVerdict(VerdictChange{Fleet: tr.name, Member: m.ID, PaneID: pane, From: prev.Verdict, To: m.Verdict, Reason: m.Reason, At: time.Now().UTC()})
		}
	}
	if sendLabel {
		err := hc.ReportMetadata(ctx, herdr.ReportMetadataParams{PaneID: pane, Source: LabelSource,
			StateLabels: map[string]string{LabelSource: label}, Seq: seq})
		switch {
		case err == nil:
		case herdr.IsMethodMissing(err):
			t.mu.Lock()
			tr.noLabels = true
			t.mu.Unlock()
			t.log.Info("herdr updates: herdr shows no labels (no pane.report_metadata); not reporting them", "fleet", tr.name)
		default:
			t.mu.Lock()
			delete(tr.labels, pane) // try again on the next judgement
			t.mu.Unlock()
			t.log.Debug("herdr updates: label not reported", "fleet", tr.name, "pane", pane, "err", err)
		}
	}
}

// labelOf is the label fleetmgr shows in herdr for a judged member: the
// verdict, and for STALLED how long nothing changed ("STALLED 3m").
func labelOf(m Member) string {
	if m.Verdict == Stalled && m.LastChangeAgeS != nil {
		return string(m.Verdict) + " " + shortAge(time.Duration(*m.LastChangeAgeS*float64(time.Second)))
	}
	return string(m.Verdict)
}

// shortAge writes d as "45s", "3m" or "2h".
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	default:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
}

// memberLocked judges r from tr's state (Tracker.mu held). known is false
// for a busy member whose output has not been looked at twice yet.
func (tr *track) memberLocked(r RosterRow, now time.Time) (m Member, known bool) {
	m = Member{ID: r.ID, PaneID: r.PaneID, Worktree: r.Worktree, State: r.State, LiveStatus: r.LiveStatus}
	p, ok := tr.panes[r.PaneID]
	if !ok {
		m.Verdict, m.Reason = Unknown, "pane "+r.PaneID+" gone"
		return m, true
	}
	m.AgentStatus = p.AgentStatus
	if p.AgentStatus == herdr.StatusBlocked {
		m.Verdict, m.Reason = Blocked, "herdr agent_status blocked: waiting for a human"
		return m, true
	}
	if r.LiveStatus != herdr.StatusWorking && p.AgentStatus != herdr.StatusWorking {
		m.Verdict = Idle
		m.Reason = fmt.Sprintf("not busy (liveStatus %s, agent_status %s)", orDash(r.LiveStatus), orDash(p.AgentStatus))
		return m, true
	}
	lm := tr.looks[r.PaneID]
	if lm == nil || lm.n < 2 {
		return m, false
	}
	for _, s := range []fileSample{lm.prevFiles, lm.files} {
		if s.err != nil {
			if errors.Is(s.err, fs.ErrNotExist) {
				m.Verdict, m.Reason = Unknown, "worktree "+r.Worktree+" gone"
			} else {
				m.Verdict, m.Reason = Unknown, "worktree: "+s.err.Error()
			}
			return m, true
		}
	}
	if r.Worktree != "" {
		m.Files = &FileEvidence{Source: lm.files.source, Changed: lm.files.at.After(lm.prevFiles.at), LastChange: lm.files.at.UTC()}
	}
	m.Output = &OutputEvidence{Changed: lm.outChanged, LastChange: lm.outSince.UTC()}
	if m.Files != nil && m.Files.Changed {
		m.Evidence = append(m.Evidence, EvidenceFiles)
	}
	if m.Output.Changed {
		m.Evidence = append(m.Evidence, EvidenceOutput)
	}
	last := lm.outSince
	if m.Files != nil && m.Files.LastChange.After(last) {
		last = m.Files.LastChange
	}
	if !last.IsZero() {
		age := max(0, now.Sub(last).Seconds())
		age = float64(int64(age*10)) / 10
		m.LastChangeAgeS = &age
	}
	if len(m.Evidence) > 0 {
		m.Verdict = Working
		return m, true
	}
	m.Verdict = Stalled
	gap := lm.at.Sub(lm.prevAt).Round(100 * time.Millisecond)
	if last.IsZero() {
		m.Reason = "claims busy, but output unchanged over " + gap.String() + " (herdr push; output read every interval)"
	} else {
		m.Reason = "claims busy, but nothing changed for " + now.Sub(last).Round(time.Second).String()
	}
	return m, true
}

// liveView is what a tracked, pushed fleet's report uses instead of
// sampling: the check, the pane table, and the tracker's judgement of each
// member.
type liveView struct {
	check *HerdrCheck
	panes map[string]herdr.PaneInfo
	tr    *track
	t     *Tracker
}

// view returns the tracker's state of fleet (whose socket is sock) for a
// report: ok is false when the fleet is not tracked on that socket. A
// fleet whose updates are events, with herdr answering, has panes;
// otherwise only check (with its Updates) is set, and the Collector
// samples as before.
func (t *Tracker) view(fleet, session, sock string) (liveView, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.fleets[fleet]
	if tr == nil || tr.socket != sock || tr.mode == "" {
		return liveView{}, false
	}
	up := &HerdrUpdates{Mode: tr.mode, Reason: tr.reason, Since: tr.since.UTC(), Resyncs: tr.resyncs}
	v := liveView{tr: tr, t: t, check: &HerdrCheck{Session: session, Alive: tr.alive, Error: tr.err,
		Version: tr.version, Protocol: tr.protocol, Updates: up}}
	if tr.alive {
		if c := herdr.CheckCompat(tr.version, tr.protocol); !c.Tested {
			v.check.Warning = c.Note
		}
	}
	// While it re-subscribes (ready false for a moment), a pushed fleet's
	// last table stands: the new snapshot replaces it.
	if tr.mode == UpdatesEvents && tr.alive {
		v.panes = maps.Clone(tr.panes)
	}
	return v, true
}

// member is the tracker's judgement of r now, false when it has none (a
// busy member not looked at twice yet).
func (v liveView) member(r RosterRow) (Member, bool) {
	v.t.mu.Lock()
	defer v.t.mu.Unlock()
	if _, ok := v.tr.rows[r.PaneID]; !ok {
		return Member{}, false // not (yet) known as a member: sample it
	}
	if _, ok := v.tr.panes[r.PaneID]; !ok {
		// A member the roster names whose pane-created event is not applied
		// yet (the collector found the pane itself: one that is gone never
		// gets here): sample it rather than call it gone.
		return Member{}, false
	}
	return v.tr.memberLocked(r, time.Now())
}

// PushedMembers returns fleet's members as serve's Tracker judges them now,
// by pane id. pushed is false when the fleet's herdr state does not come
// from herdr's push (no tracker, a fleet not tracked, a sampled one). ok is
// true when it does and every member the tracker knows has a judgement and
// a pane in its table; false while it cannot say (a re-subscription under
// way, herdr not answering, a pane-created event not applied, a busy member
// not looked at twice yet), and the caller samples. It asks herdr nothing.
func (c *Collector) PushedMembers(fleet string) (members map[string]Member, pushed, ok bool) {
	t := c.trackerOf()
	if t == nil {
		return nil, false, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.fleets[fleet]
	if tr == nil || tr.mode != UpdatesEvents {
		return nil, false, false
	}
	if !tr.ready || !tr.alive {
		return nil, true, false
	}
	now := time.Now()
	members = make(map[string]Member, len(tr.rows))
	for pane, r := range tr.rows {
		if _, ok := tr.panes[pane]; !ok {
			return nil, true, false // its pane-created event not applied yet
		}
		m, known := tr.memberLocked(r, now)
		if !known {
			return nil, true, false
		}
		members[pane] = m
	}
	return members, true, true
}
