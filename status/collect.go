package status

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
)

// OutputLines is how many of a pane's most recent lines (pane.read source
// recent, ANSI stripped) are hashed as output evidence: new output always
// lands at the end, and the bound keeps 80 members × 2 reads small.
const OutputLines = 200

// Options configure a Collector.
type Options struct {
	// Manager gives the fleets' config and lifecycle state (required).
	Manager *lifecycle.Manager
	// Interval is the default time between a busy member's two samples;
	// zero means [status] interval from the config.
	Interval time.Duration
	// FleetTimeout is how long past Interval one fleet may take before it
	// is UNKNOWN: timeout; zero means [status] fleet_timeout.
	FleetTimeout time.Duration
	// Files is the file evidence; nil means a Walker pruning
	// [status] ignore.
	Files FileClock
	// Roster reads a fleet's roster; nil means MCPRoster.
	Roster RosterFunc
	// Broker probes a fleet's broker; nil means ManagerBroker(Manager),
	// which reports "no broker configured" without a [broker] table.
	Broker BrokerProbe
	// Via is Report.Via ("daemon" or "cli"); default "cli".
	Via string
	// Version is fleetmgr's version, for the MCP client's implementation.
	Version string
	// Log receives debug detail; nil discards.
	Log *slog.Logger
	// Observe, if set, is given every report Collect makes, after Last
	// is updated: the point where member verdicts change (serve's journal
	// and notifications read them there). It must neither block nor
	// change the report.
	Observe func(*Report)
}

// Request is one Collect call.
type Request struct {
	// Fleets names the fleets to report; empty means all, sorted.
	Fleets []string
	// Interval overrides Options.Interval when positive.
	Interval time.Duration
	// Resources asks for the rows' resources (CPU, memory, processes,
	// fds, pane ages), read from /proc: set by a caller that shows them to
	// someone (a `status`, `top` or `--watch` frame, fleetmgr_status, a
	// dashboard page, another host's status request). Without it Collect
	// judges verdicts only and reads no resource from /proc, nor asks
	// herdr for the panes' shells: the samplings serve makes while nobody
	// looks (the notifier's member rules, federation presence, the
	// fleetmgr_status cache kept warm, the dashboard's warm-up) leave it
	// unset. Resources are read only when someone looks (package
	// resources).
	Resources bool
}

// Collector builds status Reports. It is safe for concurrent use. A
// long-lived Collector (the serve daemon's) also remembers when each pane's
// output last changed, so a STALLED age can count output, not only files.
type Collector struct {
	opt      Options
	http     *http.Client
	hostname string

	res       *resources.Sampler // nil: /proc unreadable, no resources
	scrapeRes *resources.Sampler // ResourcesNow's own (nil: /proc unreadable)

	mu      sync.Mutex
	outputs map[string]outputMemo // guarded by mu: fleet + "\x00" + pane → last seen output
	shells  map[shellKey]int      // guarded by mu: a member pane's shell pid (shellPIDs)
	last    map[string]Sample     // guarded by mu: fleet → its members as last judged (Last)
	tracker *Tracker              // guarded by mu: set by NewTracker (serve), nil otherwise

	memberShells map[string]learnedShells // guarded by mu: fleet → its members' shells at the last status or scrape (keepShells, ResourcesNow)
}

// trackerOf returns c's Tracker, nil when none.
func (c *Collector) trackerOf() *Tracker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker
}

type outputMemo struct {
	hash  [32]byte
	since time.Time // when this hash was first seen (zero: unknown)
	seen  time.Time // last sample
}

// New returns a Collector. It panics if opt.Manager is nil (a programming
// error).
func New(opt Options) *Collector {
	if opt.Manager == nil {
		panic("status.New: nil Manager")
	}
	cfg := opt.Manager.Config()
	if opt.Interval <= 0 {
		opt.Interval = cfg.Status.Interval.Duration
	}
	if opt.Interval <= 0 {
		opt.Interval = registry.DefaultStatusInterval
	}
	if opt.FleetTimeout <= 0 {
		opt.FleetTimeout = cfg.Status.FleetTimeout.Duration
	}
	if opt.FleetTimeout <= 0 {
		opt.FleetTimeout = registry.DefaultStatusTimeout
	}
	if opt.Files == nil {
		opt.Files = &Walker{Prune: NewPruner(cfg.Status.Ignore)}
	}
	if opt.Roster == nil {
		opt.Roster = MCPRoster(opt.Version)
	}
	if opt.Broker == nil {
		opt.Broker = ManagerBroker(opt.Manager)
	}
	if opt.Via == "" {
		opt.Via = "cli"
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	res, _ := resources.New("")
	scrapeRes, _ := resources.New("")
	return &Collector{
		res:       res,
		scrapeRes: scrapeRes,
		opt:       opt,
		http:      &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		hostname:  host,
		outputs:   map[string]outputMemo{},
		last:      map[string]Sample{},
	}
}

// Interval is the default sample interval.
func (c *Collector) Interval() time.Duration { return c.opt.Interval }

// Collect samples the requested fleets, all in parallel, and returns the
// report. An unknown fleet name is an error (listing the valid ones);
// everything that goes wrong while probing a fleet is reported in the fleet's
// row instead. Each fleet gets Interval + FleetTimeout; one that overruns is
// reported as UNKNOWN: timeout without delaying the others.
func (c *Collector) Collect(ctx context.Context, req Request) (*Report, error) {
	t0 := time.Now()
	names := req.Fleets
	if len(names) == 0 {
		names = c.opt.Manager.Names() // also fleets removed from the file while they run
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	fleets := make([]*registry.Fleet, len(names))
	for i, n := range names {
		f, err := c.opt.Manager.Fleet(n)
		if err != nil {
			return nil, err
		}
		fleets[i] = f
	}
	interval := req.Interval
	if interval <= 0 {
		interval = c.opt.Interval
	}
	deadline := interval + c.opt.FleetTimeout
	rep := &Report{SchemaVersion: SchemaVersion, Host: c.hostname, IntervalMS: interval.Milliseconds(), Via: c.opt.Via,
		Fleets: make([]Fleet, len(fleets))}
	roots := make([]procRoots, len(fleets))
	measure := c.res != nil && req.Resources
	if measure && time.Since(c.res.Last()) > resourceIntervalMax {
		// The start of the interval the CPU percentages cover: the trees
		// of the fleetd and herdr servers the state files name.
		if pids := c.recordedRoots(fleets); len(pids) > 0 {
			_, _ = c.res.Take(pids...)
		}
	}
	var wg sync.WaitGroup
	for i, f := range fleets {
		wg.Go(func() {
			fctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			row, st := c.stateRow(f)
			if st == nil { // remote, or no readable state: nothing to probe
				rep.Fleets[i] = row
				return
			}
			done := make(chan probed, 1)
			go func() { // ends soon after fctx: every step honours it
				var p probed
				p.row = c.probe(fctx, f, row, st, interval, measure, &p.roots)
				done <- p
			}()
			hard := time.NewTimer(deadline + 500*time.Millisecond)
			defer hard.Stop()
			select {
			case p := <-done:
				rep.Fleets[i], roots[i] = p.row, p.roots
			case <-hard.C:
				// A step overran its context: report and move on; the
				// goroutine's result lands in the buffered channel.
				row.Verdict, row.Error, row.MemberCount = Unknown, "timeout", -1
				rep.Fleets[i] = row
			}
		})
	}
	wg.Wait()
	if measure {
		c.measure(rep, roots)
	}
	c.pruneMemo(t0)
	rep.GeneratedAt = time.Now().UTC()
	rep.ElapsedMS = time.Since(t0).Milliseconds()
	c.keepLast(rep)
	if c.opt.Observe != nil {
		c.opt.Observe(rep)
	}
	return rep, nil
}

// base is a fleet row with only what the config says.
func (c *Collector) base(f *registry.Fleet) Fleet {
	host := f.Host
	if host == "" {
		host = registry.LocalHost
	}
	return Fleet{Name: f.Name, Host: host, Port: f.Port, Members: []Member{}, Summary: map[Verdict]int{}, RestartPolicy: string(f.Restart.Mode)}
}

// IsLocal reports whether host names this host: "", "local", "localhost",
// or os.Hostname (full or up to the first dot). Any other host is REMOTE.
func (c *Collector) IsLocal(host string) bool { return isLocal(c.hostname, host) }

func isLocal(hostname, host string) bool {
	short, _, _ := strings.Cut(hostname, ".")
	switch host {
	case "", registry.LocalHost, "localhost", hostname, short:
		return true
	}
	return false
}

// reason turns an error into a short reason, "timeout" for a deadline.
func reason(ctx context.Context, what string, err error) string {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return "timeout"
	}
	return what + ": " + err.Error()
}

// stateRow fills a fleet's row from the config and its lifecycle state
// (local files and /proc: fast). It returns the state only when the fleet is
// running here and must be probed.
func (c *Collector) stateRow(f *registry.Fleet) (Fleet, *lifecycle.State) {
	row := c.base(f)
	if !c.IsLocal(f.Host) {
		row.Verdict, row.State, row.MemberCount = Remote, "remote", -1
		row.Error = "on host " + f.Host + ": not probed"
		return row, nil
	}
	st, err := c.opt.Manager.State(f.Name)
	if err != nil {
		row.Verdict, row.State, row.MemberCount, row.Error = Unknown, "unknown", -1, "state: "+err.Error()
		return row, nil
	}
	phase := st.Shown.Phase // as shown, not as stored (lifecycle/shown.go)
	row.State, row.Desired = string(phase), string(st.Desired)
	row.Restarts, row.LastExit, row.LastError = st.Restarts, st.LastExit, st.Shown.LastError
	row.LastRestartReason, row.CrashLoop = st.LastRestartReason, st.CrashLoop
	row.MembersLost, row.LastRestartLost = st.MembersLost, st.LastLost
	row.NotInConfig, row.RestartPending = st.Shown.NotInConfig, st.Shown.RestartPending
	row.WhatNext = st.Shown.Next
	if st.Shown.StartRetrying {
		left := st.Shown.StartRetriesLeft
		row.StartRetriesLeft = &left
	}
	if phase == lifecycle.PhaseRestarting && !st.Shown.NextRestartAt.IsZero() {
		row.NextRestartAt = st.Shown.NextRestartAt.UTC() // kept after the restart until the next health check: only pending counts
	}
	if st.Port != 0 {
		row.Port = st.Port
	}
	if phase != lifecycle.PhaseRunning {
		// Stopped: no member runs. Starting, restarting, failed: fleetd
		// cannot be asked, so the roster is unknown.
		row.MemberCount = -1
		if phase == lifecycle.PhaseStopped {
			row.MemberCount = 0
		}
		return row, nil
	}
	if st.Fleetd != nil {
		row.PID = st.Fleetd.PID
	}
	if !st.StartedAt.IsZero() {
		// A start in the future (the clock was set back since) is no
		// uptime at all: uptime_s is never negative.
		row.UptimeS = max(0, time.Since(st.StartedAt).Truncate(time.Second).Seconds())
	}
	return row, st
}

// probe checks a running fleet (health, herdr, broker, roster) and judges
// its members. Every step honours ctx.
//
// roots receives the pids resources are measured from (fleetd, the herdr
// server and, when measure, each member's pane shell, asked of herdr).
func (c *Collector) probe(ctx context.Context, f *registry.Fleet, row Fleet, st *lifecycle.State, interval time.Duration, measure bool, roots *procRoots) Fleet {
	var rr procRoots
	if st.Fleetd != nil {
		rr.fleetd = st.Fleetd.PID
	}
	if st.Herdr != nil {
		rr.herdr = st.Herdr.PID
	}
	*roots = rr
	row.Summary = map[Verdict]int{} // row is a copy; its map must not be shared
	sock := st.HerdrSocket
	if sock == "" {
		sock = c.opt.Manager.HerdrSocket(f)
	}
	hc := &herdr.Client{Socket: sock, Timeout: interval + c.opt.FleetTimeout}
	tracker := c.trackerOf()
	var live *liveView
	var sampled *HerdrUpdates // how a fleet not pushed is followed
	if tracker != nil {
		if v, ok := tracker.view(f.Name, f.HerdrSession, sock); ok {
			if v.panes != nil {
				live = &v
			} else {
				sampled = v.check.Updates
			}
		}
	}
	if sampled == nil {
		why := "sampled by this process (fleetmgr serve follows herdr's events)"
		if tracker != nil {
			why = "not followed yet (subscribing)"
		}
		sampled = &HerdrUpdates{Mode: UpdatesSampling, Reason: why}
	}

	var wg sync.WaitGroup
	var roster []RosterRow
	var rosterErr error
	wg.Go(func() {
		h, lat, err := lifecycle.Probe(ctx, c.http, row.Port)
		switch {
		case err != nil:
			row.Health = &Health{LatencyMS: durMS(lat), Error: reason(ctx, "healthz", err)}
		case h.Name != f.Name:
			row.Health = &Health{LatencyMS: durMS(lat), Error: fmt.Sprintf("port %d answers as fleet %q", row.Port, h.Name)}
		default:
			row.Health = &Health{OK: true, LatencyMS: durMS(lat)}
		}
	})
	var panes map[string]herdr.PaneInfo // one pane.list instead of a pane.get per member
	wg.Go(func() {
		if live != nil {
			// Pushed: the tracker's table, no request to herdr.
			row.Herdr, panes = live.check, live.panes
			return
		}
		row.Herdr = &HerdrCheck{Session: f.HerdrSession, Updates: sampled}
		pong, err := hc.Ping(ctx)
		if err != nil {
			row.Herdr.Error = reason(ctx, "ping", err)
			return
		}
		row.Herdr.Alive, row.Herdr.Version, row.Herdr.Protocol = true, pong.Version, pong.Protocol
		if c := herdr.CheckCompat(pong.Version, pong.Protocol); !c.Tested {
			row.Herdr.Warning = c.Note
		}
		if ps, err := hc.PaneList(ctx, ""); err == nil {
			panes = make(map[string]herdr.PaneInfo, len(ps))
			for _, p := range ps {
				panes[p.PaneID] = p
			}
		}
	})
	wg.Go(func() {
		if c.opt.Broker == nil {
			row.Broker = &Broker{Note: "no broker configured"}
			return
		}
		b, err := c.opt.Broker(ctx, f)
		switch {
		case err != nil:
			row.Broker = &Broker{Configured: true, Vhost: f.Vhost, Note: reason(ctx, "broker", err)}
		case b == nil:
			row.Broker = &Broker{Note: "no broker configured"}
		default:
			row.Broker = b
		}
	})
	wg.Go(func() { roster, rosterErr = c.opt.Roster(ctx, f) })
	wg.Wait()
	if rosterErr != nil {
		row.Verdict, row.MemberCount = Unknown, -1
		row.Error = reason(ctx, "fleet unreachable: "+RosterTool, rosterErr)
		return row
	}
	if tracker != nil {
		tracker.noteRoster(f.Name, roster)
	}
	row.MemberCount = len(roster)
	row.Members = make([]Member, len(roster))
	for i, r := range roster {
		wg.Go(func() { row.Members[i] = c.member(ctx, f.Name, hc, row.Herdr, panes, live, r, interval) })
	}
	var shells []int
	if measure && row.Herdr != nil && row.Herdr.Alive {
		wg.Go(func() { shells = c.shellPIDs(ctx, hc, f.Name, rr.herdr, roster) })
	}
	wg.Wait()
	rr.shells = shells
	*roots = rr
	for _, m := range row.Members {
		row.Summary[m.Verdict]++
	}
	return row
}

// member judges one roster row.
// panes is the session's pane list (nil when it could not be read); a pane
// missing from it is confirmed with pane.get, since the list may predate a
// member spawned meanwhile.
//
// live is the tracker's view of a pushed fleet (nil when sampled): a busy
// member it has judged from its own output reads is reported as judged,
// without sampling.
func (c *Collector) member(ctx context.Context, fleet string, hc *herdr.Client, hk *HerdrCheck, panes map[string]herdr.PaneInfo, live *liveView, r RosterRow, interval time.Duration) Member {
	m := Member{ID: r.ID, PaneID: r.PaneID, Worktree: r.Worktree, State: r.State, LiveStatus: r.LiveStatus}
	unknown := func(why string) Member { m.Verdict, m.Reason = Unknown, why; return m }
	if !hk.Alive {
		return unknown("herdr session " + hk.Session + " not answering (" + hk.Error + ")")
	}
	if r.PaneID == "" {
		return unknown("fleet_list gives no pane")
	}
	p, listed := panes[r.PaneID]
	var err error
	if !listed {
		var pp *herdr.PaneInfo
		if pp, err = hc.PaneGet(ctx, r.PaneID); err == nil {
			p = *pp
		}
	}
	if err != nil {
		if herdr.IsCode(err, "pane_not_found") {
			return unknown("pane " + r.PaneID + " gone")
		}
		return unknown(reason(ctx, "herdr pane.get", err))
	}
	m.AgentStatus = p.AgentStatus
	if r.Worktree != "" {
		if _, err := os.Stat(r.Worktree); errors.Is(err, fs.ErrNotExist) {
			return unknown("worktree " + r.Worktree + " gone")
		}
	}
	if p.AgentStatus == herdr.StatusBlocked {
		m.Verdict, m.Reason = Blocked, "herdr agent_status blocked: waiting for a human"
		return m
	}
	if r.LiveStatus != herdr.StatusWorking && p.AgentStatus != herdr.StatusWorking {
		m.Verdict = Idle
		m.Reason = fmt.Sprintf("not busy (liveStatus %s, agent_status %s)", orDash(r.LiveStatus), orDash(p.AgentStatus))
		return m
	}
	if live != nil {
		if lm, ok := live.member(r); ok {
			return lm
		}
		// Busy, not read twice by the tracker yet (it just turned busy):
		// sampled, but never over longer than the tracker's own reads.
		interval = min(interval, c.opt.Interval)
	}
	return c.sample(ctx, fleet, hc, m, interval)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fileSample is one look at a worktree.
type fileSample struct {
	at     time.Time
	source string
	err    error
}

// sample takes the two samples of a member that claims to be busy.
func (c *Collector) sample(ctx context.Context, fleet string, hc *herdr.Client, m Member, interval time.Duration) Member {
	look := func() (fileSample, [32]byte, error) {
		var fsm fileSample
		if m.Worktree != "" {
			fsm.at, fsm.source, fsm.err = c.opt.Files.LastChange(ctx, m.Worktree)
		}
		res, err := hc.PaneRead(ctx, herdr.PaneReadParams{PaneID: m.PaneID, Source: herdr.SourceRecent, Lines: OutputLines, StripANSI: true})
		if err != nil {
			return fsm, [32]byte{}, err
		}
		return fsm, sha256.Sum256([]byte(res.Text)), nil
	}
	unknown := func(why string) Member { m.Verdict, m.Reason = Unknown, why; return m }
	outErr := func(err error) Member {
		if herdr.IsCode(err, "pane_not_found") {
			return unknown("pane " + m.PaneID + " gone")
		}
		return unknown(reason(ctx, "herdr pane.read", err))
	}
	start := time.Now()
	f0, h0, err := look()
	if err != nil {
		return outErr(err)
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return unknown("timeout")
	case <-time.After(time.Until(start.Add(interval))):
	}
	f1, h1, err := look()
	if err != nil {
		return outErr(err)
	}
	t1 := time.Now()
	for _, s := range []fileSample{f0, f1} {
		if s.err != nil {
			if errors.Is(s.err, fs.ErrNotExist) {
				return unknown("worktree " + m.Worktree + " gone")
			}
			return unknown(reason(ctx, "worktree", s.err))
		}
	}
	outSince := c.remember(fleet, m.PaneID, h0, h1, t0, t1)
	if m.Worktree != "" {
		m.Files = &FileEvidence{Source: f1.source, Changed: f1.at.After(f0.at), LastChange: f1.at.UTC()}
	}
	m.Output = &OutputEvidence{Changed: h0 != h1, LastChange: outSince.UTC()}
	if m.Files != nil && m.Files.Changed {
		m.Evidence = append(m.Evidence, EvidenceFiles)
	}
	if m.Output.Changed {
		m.Evidence = append(m.Evidence, EvidenceOutput)
	}
	last := outSince
	if m.Files != nil && m.Files.LastChange.After(last) {
		last = m.Files.LastChange
	}
	if !last.IsZero() {
		age := time.Since(last).Seconds()
		if age < 0 {
			age = 0
		}
		age = float64(int64(age*10)) / 10
		m.LastChangeAgeS = &age
	}
	if len(m.Evidence) > 0 {
		m.Verdict = Working
		return m
	}
	m.Verdict = Stalled
	var why []string
	if m.Files != nil {
		if m.Files.LastChange.IsZero() {
			why = append(why, "worktree empty")
		} else {
			why = append(why, "no file change for "+ago(m.Files.LastChange))
		}
	}
	if outSince.IsZero() {
		why = append(why, "output unchanged over "+interval.String())
	} else {
		why = append(why, "output unchanged for "+ago(outSince))
	}
	m.Reason = "claims busy, but " + strings.Join(why, "; ")
	return m
}

// ago formats the time since t, rounded to a second (to 0.1 s below 10 s).
func ago(t time.Time) string {
	d := time.Since(t)
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// remember records a pane's output hashes and returns when its output was
// last seen to change (zero when unknown: first look, no change).
func (c *Collector) remember(fleet, pane string, h0, h1 [32]byte, t0, t1 time.Time) time.Time {
	key := fleet + "\x00" + pane
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.outputs[key]
	memo := outputMemo{hash: h1, seen: t1}
	switch {
	case h0 != h1:
		memo.since = t1
	case ok && old.hash == h0:
		memo.since = old.since // unchanged since the previous call too
	case ok:
		memo.since = t0 // changed between the previous call and this one
	}
	c.outputs[key] = memo
	return memo.since
}

// pruneMemo forgets panes not sampled for an hour, so the memo stays bounded.
func (c *Collector) pruneMemo(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.outputs {
		if now.Sub(v.seen) > time.Hour {
			delete(c.outputs, k)
		}
	}
}
