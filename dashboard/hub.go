package dashboard

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/status"
)

// RestartMark is one supervisor restart on a fleet's time axis.
type RestartMark struct {
	// At is when the restart was seen (or recorded by the supervisor).
	At time.Time `json:"at"`
	// Reason is the restart's reason when known (from the journal: its
	// cause and the members it ended).
	Reason string `json:"reason,omitempty"`

	seq uint64 // the journal event's Seq (0: not from the journal)
}

// FleetMeta is what the page needs beside a fleet's status row.
type FleetMeta struct {
	// AsOf is when the row's durations (uptime_s, each member's
	// last_change_age_s) were measured; the page adds the time since.
	AsOf time.Time `json:"as_of"`
	// SampledAt is when the fleet's members were last sampled (zero: not
	// yet since this serve started).
	SampledAt time.Time `json:"sampled_at,omitzero"`
	// Restarts are the restarts on the time axis, oldest first, at most
	// Options.RestartMarks.
	Restarts []RestartMark `json:"restarts"`
	// VerdictSince is, per member id, its verdict and when it took it
	// (the page's "Last change" column): the member's last verdict
	// change, not the age of the sample nor of its last file or output
	// activity (issue 24 item 16).
	VerdictSince map[string]VerdictSince `json:"verdict_since,omitempty"`
}

// VerdictSince is when a member took its current verdict.
type VerdictSince struct {
	// Verdict is the member's verdict.
	Verdict status.Verdict `json:"verdict"`
	// At is when serve saw the member take it: herdr's push
	// (Server.VerdictChanged) to the moment, else the first status
	// report that showed it (every report serve makes reaches the
	// dashboard through Server.Observe).
	At time.Time `json:"at"`
	// AtLeast says the member already had the verdict when this serve
	// first saw it: the change was at or before At.
	AtLeast bool `json:"at_least,omitempty"`
}

// timelineJSON is one fleet's verdict timeline on the wire: the sample
// times (Unix ms, oldest first) and, per member, one letter per sample
// (verdictLetter; '-' where the member was not in that sample); and, per
// sample, the fleet's CPU % (null when not measured) and resident bytes
// (status.Fleet.Resources: fleetd, herdr and every pane's process tree),
// the card's resource sparkline.
type timelineJSON struct {
	Times   []int64           `json:"times"`
	Members map[string]string `json:"members"`
	CPU     []*float64        `json:"cpu_percent"`
	RSS     []uint64          `json:"rss_bytes"`
}

// callsJSON is the sparkline history: point times (Unix ms) and, per
// fleet, one value per point (p50 null when the period had no call).
type callsJSON struct {
	Times    []int64                     `json:"times"`
	PeriodMS int64                       `json:"period_ms"`
	Fleets   map[string]*fleetCallSeries `json:"fleets"`
}

type fleetCallSeries struct {
	Calls  []uint64   `json:"calls"`
	Errors []uint64   `json:"errors"`
	P50MS  []*float64 `json:"p50_ms"`
}

// callPoint is one fleet's sparkline point in a "calls" event.
type callPoint struct {
	Calls  uint64   `json:"calls"`
	Errors uint64   `json:"errors"`
	P50MS  *float64 `json:"p50_ms"`
}

// snapshot is GET /api/snapshot and the SSE "snapshot" event: everything
// the page draws. Report follows docs/status-schema.json.
type snapshot struct {
	EventID   string                   `json:"event_id"`
	Report    *status.Report           `json:"report"`
	Meta      map[string]*FleetMeta    `json:"meta"`
	Timelines map[string]*timelineJSON `json:"timelines"`
	Calls     *callsJSON               `json:"calls"`
	Limits    map[string]int           `json:"limits"`
}

// verdictLetter is a verdict's letter in a timeline string.
var verdictLetter = map[status.Verdict]byte{
	status.Working: 'W', status.Stalled: 'S', status.Idle: 'I',
	status.Blocked: 'B', status.Unknown: 'U', status.Remote: 'R',
}

// fleetState is the hub's memory of one fleet.
type fleetState struct {
	row  status.Fleet
	key  string // lifeKey(row)
	meta FleetMeta

	times   []time.Time       // verdict sample times, oldest first
	members map[string][]byte // member → one letter per sample time
	cpu     []*float64        // the fleet's CPU % per sample time (nil: not measured)
	rss     []uint64          // the fleet's resident bytes per sample time

	quiet  string    // quietKey of the last sampled row
	since  time.Time // when the last sampling of this fleet began
	probes []string  // worktrees Options.Files is asked about (see applyReport)
}

// hub holds the merged status of every fleet, the histories the pictures
// draw, the ring of recent events and the open event streams. All of it is
// guarded by mu; events are published under mu, so their order is the
// order of the changes.
type hub struct {
	opt   *Options
	epoch string
	host  string

	mu     sync.Mutex
	names  []string // sorted
	fleets map[string]*fleetState
	header status.Report // the last sampling's header fields (Fleets unused)
	fedKey string        // federationKey(header.Federation)

	rowsAt   time.Time               // when Rows was last read
	lastRows map[string]status.Fleet // what it said
	observed map[string]knownRow     // fleet → the newest row of a report serve made for anyone (Server.Observe)

	callTimes  []time.Time
	calls      map[string]*fleetCallSeries
	prevCalls  map[string]CallCounts
	callsBase  bool      // a first read of the counters was taken
	histAt     time.Time // when the history was last loaded (Server.loadHistory)
	restartsAt time.Time // the restart marks hold the journal's restarts up to then

	ring  eventRing
	subs  map[*subscriber]struct{}
	wake  chan struct{} // closed (and replaced) when a stream opens
	until time.Time     // sampling goes on until then after the last stream closed
	want  map[string]bool
	poke  chan struct{} // a sampling of want is asked for

	resumes, snapshots int // streams opened by resuming, and with a snapshot
}

// subscriber is one open /events stream.
type subscriber struct {
	ch   chan *event
	gone chan struct{} // closed when the hub drops it (too slow, or shutdown)
}

func newHub(opt *Options, epoch, host string) *hub {
	return &hub{
		opt: opt, epoch: epoch, host: host,
		fleets:    map[string]*fleetState{},
		lastRows:  map[string]status.Fleet{},
		observed:  map[string]knownRow{},
		calls:     map[string]*fleetCallSeries{},
		prevCalls: map[string]CallCounts{},
		ring:      eventRing{maxN: opt.EventRing, maxBytes: opt.EventRingBytes},
		subs:      map[*subscriber]struct{}{},
		wake:      make(chan struct{}),
		want:      map[string]bool{},
		poke:      make(chan struct{}, 1),
		header:    status.Report{SchemaVersion: status.SchemaVersion, Host: host, Via: "daemon"},
	}
}

// lifeKey is the part of a row that Rows reads (lifecycle and config),
// without uptime_s (it grows every read) and, for a running fleet, without
// what only a sampling fills in (health, herdr, broker, members, verdict,
// error, resources): two rows with the same key show the same lifecycle.
func lifeKey(r status.Fleet) string {
	r.UptimeS, r.SchemaDrift = 0, nil // drift comes from the catalogue with each sampling
	if r.Remote != nil {
		// Another host's fleet, all from its presence: everything counts
		// but the ages (the page ages last_seen itself) and the error,
		// which names them.
		rf := *r.Remote
		rf.BeatAgeS, rf.VerdictsAgeS = nil, nil
		r.Remote, r.Error = &rf, ""
		b, _ := json.Marshal(r)
		return string(b)
	}
	if r.State == "running" {
		r.Health, r.Herdr, r.Broker, r.Members, r.Summary = nil, nil, nil, nil, nil
		r.MemberCount, r.Verdict, r.Error, r.Resources = 0, "", "", nil
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// merge combines a fleet's current row with a newer lifecycle row r: while
// the same fleetd runs, what the last sampling found (health, herdr,
// broker, members, resources) stays; otherwise r replaces the row (a fleet that
// stopped, restarts or failed has no roster, as status reports it). The
// schema drift the daemon notes on each sampling stays unless r has its
// own.
func merge(cur, r status.Fleet) status.Fleet {
	if r.Remote != nil {
		return r // another host's fleet: presence says it all
	}
	if r.State == "running" && cur.State == "running" && r.PID == cur.PID {
		r.Health, r.Herdr, r.Broker = cur.Health, cur.Herdr, cur.Broker
		r.Members, r.Summary, r.MemberCount = cur.Members, cur.Summary, cur.MemberCount
		r.Verdict, r.Error, r.Resources = cur.Verdict, cur.Error, cur.Resources
	}
	if r.SchemaDrift == nil {
		r.SchemaDrift = cur.SchemaDrift
	}
	return r
}

// federationKey is f without the ages (the page counts from last_seen).
func federationKey(f *peerview.Federation) string {
	if f == nil {
		return ""
	}
	g := *f
	g.Hosts = slices.Clone(f.Hosts)
	for i := range g.Hosts {
		g.Hosts[i].BeatAgeS = nil
	}
	b, _ := json.Marshal(g)
	return string(b)
}

// applyFederation takes a report's federation object (nil: serve does
// not federate): when it changed (a host came, went offline or expired,
// the connection dropped), a "federation" event carries it.
func (h *hub) applyFederation(f *peerview.Federation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applyFederationLocked(f)
}

func (h *hub) applyFederationLocked(f *peerview.Federation) {
	if k := federationKey(f); k != h.fedKey {
		h.header.Federation, h.fedKey = f, k
		h.publishLocked("federation", struct {
			Federation *peerview.Federation `json:"federation"`
		}{f})
		return
	}
	h.header.Federation = f // the same, with fresher ages for the next snapshot
}

// setNamesLocked makes the fleet set exactly names (a config reload adds
// or removes fleets) and reports whether it changed.
func (h *hub) setNamesLocked(names []string) bool {
	names = slices.Sorted(slices.Values(names))
	if slices.Equal(names, h.names) {
		return false
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
		if h.fleets[n] == nil {
			h.fleets[n] = &fleetState{row: status.Fleet{Name: n, Members: []status.Member{}, Summary: map[status.Verdict]int{}},
				members: map[string][]byte{}, meta: FleetMeta{Restarts: []RestartMark{}}}
		}
	}
	for n := range h.fleets {
		if !keep[n] {
			delete(h.fleets, n)
			delete(h.lastRows, n)
			delete(h.observed, n)
			delete(h.calls, n)
			delete(h.prevCalls, n)
		}
	}
	h.names = names
	return true
}

// noteRestartLocked adds restart marks when a fleet's restart count grew.
// A growth by one is one mark now with the row's reason; a larger jump
// (restarts while nobody watched) takes the supervisor's recorded restart
// times when Options.RestartTimes gives them.
//
// With Options.Journal the marks come from the journal alone (loadHistory,
// followJournal), so this does nothing.
func (h *hub) noteRestartLocked(fs *fleetState, prev, r status.Fleet, at time.Time, seen bool) {
	if h.opt.Journal != nil {
		return
	}
	grew := r.Restarts - prev.Restarts
	if !seen {
		grew = r.Restarts // first sight since this serve started
	}
	if grew <= 0 {
		return
	}
	var marks []RestartMark
	if (grew > 1 || !seen) && h.opt.RestartTimes != nil {
		// The recorded times after the newest mark (a mark is placed when
		// a restart is seen, which is after the supervisor recorded it),
		// at most as many as the count grew by.
		var after time.Time
		if n := len(fs.meta.Restarts); n > 0 {
			after = fs.meta.Restarts[n-1].At
		}
		for _, t := range h.opt.RestartTimes(r.Name) {
			if t.After(after) {
				marks = append(marks, RestartMark{At: t.UTC()})
			}
		}
		if n := len(marks) - grew; n > 0 {
			marks = marks[n:]
		}
		if n := len(marks); n > 0 {
			marks[n-1].Reason = r.LastRestartReason
		}
	} else if seen {
		marks = []RestartMark{{At: at.UTC(), Reason: r.LastRestartReason}}
	}
	all := append(fs.meta.Restarts, marks...)
	slices.SortStableFunc(all, func(a, b RestartMark) int { return a.At.Compare(b.At) })
	if n := len(all) - h.opt.RestartMarks; n > 0 {
		all = all[n:]
	}
	fs.meta.Restarts = all
}

// applyRows takes a fresh read of the lifecycle rows: every fleet whose
// lifecycle changed gets a "fleet" event (or, when the fleet set changed,
// one "snapshot" event). It returns the fleets that started running (or
// run another fleetd) and so want their members sampled now (not at first
// sight: Run's first sampling covers those).
func (h *hub) applyRows(rows []status.Fleet, at time.Time) (sampleNow []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Name
	}
	reshaped := h.setNamesLocked(names)
	h.rowsAt = at
	for _, r := range rows {
		fs := h.fleets[r.Name]
		_, seen := h.lastRows[r.Name]
		h.lastRows[r.Name] = r
		k := lifeKey(r)
		if k == fs.key {
			continue
		}
		prev := fs.row
		h.noteRestartLocked(fs, prev, r, at, seen && prev.State != "")
		fs.row = merge(prev, r)
		fs.key = k
		fs.meta.AsOf = at
		if fs.row.PID != prev.PID {
			fs.meta.VerdictSince = nil // another fleetd (or none): its members are new
		}
		if prev.State != "" && r.State == "running" && (prev.State != "running" || prev.PID != r.PID) {
			sampleNow = append(sampleNow, r.Name)
		}
		if !reshaped {
			h.publishLocked("fleet", struct {
				Row  status.Fleet `json:"row"`
				Meta FleetMeta    `json:"meta"`
			}{fs.row, fs.meta})
		}
	}
	if reshaped {
		h.publishLocked("snapshot", h.snapshotLocked())
	}
	return sampleNow
}

// quietKey is what of a sampled row counts as a change for the sampling
// cadence (Options.SampleIdle): the lifecycle, the probes' outcomes, queue
// depths, and per member its id, pane, verdict, evidence, claims and
// reason. Ages and latencies are left out (they change every sampling, and
// the page ages them itself), and so is a STALLED member's reason, which
// names its age.
func quietKey(r status.Fleet) string {
	type mk struct {
		ID, Pane, Verdict, Live, Agent, Reason string
		Evidence                               []string
	}
	k := struct {
		State, Verdict, Error string
		PID, Restarts, Count  int
		Health, Herdr, Broker []any
		Inboxes               map[string]int
		Drift                 []string
		Members               []mk
	}{State: r.State, Verdict: string(r.Verdict), Error: r.Error, PID: r.PID, Restarts: r.Restarts, Count: r.MemberCount, Drift: r.SchemaDrift}
	if r.Health != nil {
		k.Health = []any{r.Health.OK, r.Health.Error}
	}
	if r.Herdr != nil {
		k.Herdr = []any{r.Herdr.Alive, r.Herdr.Error}
	}
	if r.Broker != nil {
		k.Broker = []any{r.Broker.Configured, r.Broker.Reachable, r.Broker.Note}
		k.Inboxes = r.Broker.Inboxes
	}
	for _, m := range r.Members {
		reason := m.Reason
		if m.Verdict == status.Stalled {
			reason = ""
		}
		k.Members = append(k.Members, mk{m.ID, m.PaneID, string(m.Verdict), m.LiveStatus, m.AgentStatus, reason, m.Evidence})
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// fileProbes are the worktrees of r's members that Options.Files is asked
// about until the fleet's next sampling: those of a running fleet's
// members not already WORKING on files (a change under one of those could
// change its verdict).
func fileProbes(r status.Fleet) []string {
	if r.State != "running" {
		return nil
	}
	var out []string
	for _, m := range r.Members {
		if m.Worktree == "" || m.Verdict == status.Working && slices.Contains(m.Evidence, "files") {
			continue
		}
		out = append(out, m.Worktree)
	}
	return out
}

// applyReport takes a sampling that began at started. A fleet whose
// lifecycle rows read after started say otherwise keeps that lifecycle
// (the newer read wins; members go when fleetd did). Each sampled fleet
// gets a verdict sample per member; one "report" event carries the rows.
// It reports whether any sampled fleet's quietKey changed (a fleet's
// first sampling is a change).
func (h *hub) applyReport(rep *status.Report, started time.Time) (changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header.GeneratedAt, h.header.IntervalMS, h.header.ElapsedMS = rep.GeneratedAt, rep.IntervalMS, rep.ElapsedMS
	if rep.Host != "" {
		h.header.Host = rep.Host
	}
	if rep.Via != "" {
		h.header.Via = rep.Via
	}
	h.header.Supervised, h.header.ServePID, h.header.Supervision = rep.Supervised, rep.ServePID, rep.Supervision
	h.header.ConfigError = rep.ConfigError
	if rep.Federation != nil {
		h.applyFederationLocked(rep.Federation)
	}
	out := h.header
	out.Fleets = make([]status.Fleet, 0, len(rep.Fleets))
	meta := map[string]FleetMeta{}
	for _, r := range rep.Fleets {
		fs := h.fleets[r.Name]
		if fs == nil {
			continue // removed by a reload while it was sampled
		}
		if lr, ok := h.lastRows[r.Name]; ok && h.rowsAt.After(started) && lifeKey(lr) != lifeKey(r) {
			r = merge(r, lr)
		}
		h.noteRestartLocked(fs, fs.row, r, rep.GeneratedAt, fs.row.State != "")
		fs.row, fs.key = r, lifeKey(r)
		if q := quietKey(r); q != fs.quiet {
			fs.quiet, changed = q, true
		}
		fs.since, fs.probes = started, fileProbes(r)
		fs.meta.AsOf, fs.meta.SampledAt = rep.GeneratedAt, rep.GeneratedAt
		noteVerdictsLocked(fs, r, started, rep.GeneratedAt)
		h.sampleLocked(fs, rep.GeneratedAt)
		out.Fleets = append(out.Fleets, r)
		meta[r.Name] = fs.meta
	}
	h.publishLocked("report", struct {
		Report *status.Report       `json:"report"`
		Meta   map[string]FleetMeta `json:"meta"`
	}{&out, meta})
	return changed
}

// filesChanged asks f about every running fleet's file probes and returns
// the fleets where something changed since their last sampling began. A
// probe f cannot answer from memory is dropped until that fleet's next
// sampling.
func (h *hub) filesChanged(f FileActivity) []string {
	type probe struct {
		fleet string
		since time.Time
		dirs  []string
	}
	h.mu.Lock()
	var ps []probe
	for _, n := range h.names {
		fs := h.fleets[n]
		if len(fs.probes) > 0 && fs.row.State == "running" {
			ps = append(ps, probe{n, fs.since, fs.probes})
		}
	}
	h.mu.Unlock()
	var out []string
	for _, p := range ps {
		var unknown []string
		for _, d := range p.dirs {
			ch, known := f.ChangedSince(d, p.since)
			if !known {
				unknown = append(unknown, d)
				continue
			}
			if ch {
				out = append(out, p.fleet)
				break
			}
		}
		if len(unknown) > 0 {
			h.mu.Lock()
			if fs := h.fleets[p.fleet]; fs != nil && fs.since.Equal(p.since) {
				fs.probes = slices.DeleteFunc(fs.probes, func(d string) bool { return slices.Contains(unknown, d) })
			}
			h.mu.Unlock()
		}
	}
	return out
}

// sampleLocked appends one verdict sample per member of fs.row at t,
// '-' for members known from earlier samples and absent now; members
// absent from every kept sample are forgotten, so memory stays bounded by
// Timeline samples × the members seen within them.
func (h *hub) sampleLocked(fs *fleetState, t time.Time) {
	n := len(fs.times)
	fs.times = append(fs.times, t)
	if u := fs.row.Resources; u != nil {
		fs.cpu, fs.rss = append(fs.cpu, u.CPUPercent), append(fs.rss, u.RSSBytes)
	} else {
		fs.cpu, fs.rss = append(fs.cpu, nil), append(fs.rss, 0)
	}
	present := map[string]bool{}
	for _, m := range fs.row.Members {
		l, ok := verdictLetter[m.Verdict]
		if !ok {
			l = '?'
		}
		if present[m.ID] {
			continue // a duplicate id in a roster counts once
		}
		present[m.ID] = true
		s, ok := fs.members[m.ID]
		if !ok {
			s = make([]byte, n, n+1)
			for i := range s {
				s[i] = '-'
			}
		}
		fs.members[m.ID] = append(s, l)
	}
	for id, s := range fs.members {
		if !present[id] {
			fs.members[id] = append(s, '-')
		}
	}
	if drop := len(fs.times) - h.opt.Timeline; drop > 0 {
		fs.times, fs.cpu, fs.rss = fs.times[drop:], fs.cpu[drop:], fs.rss[drop:]
		for id, s := range fs.members {
			s = s[drop:]
			if allAbsent(s) {
				delete(fs.members, id)
				continue
			}
			fs.members[id] = s
		}
	}
}

// mergeVerdictsLocked puts the journal's verdict samples tl before the
// ones fs kept: all of them when fs has none or only older ones (no page
// looked since), else those older than fs's first sample (a sampling of
// the page that opened may come first). The journal holds every change,
// the samples only what a page saw. The resource sparkline has no journal
// (resources are not measured while nobody looks): its points are empty
// there. At most Timeline samples are kept, the newest.
func (h *hub) mergeVerdictsLocked(fs *fleetState, tl *verdictTimeline) {
	if len(tl.times) == 0 {
		return
	}
	if len(fs.times) == 0 || fs.times[len(fs.times)-1].Before(tl.times[0]) {
		fs.times, fs.members = tl.times, tl.members
		fs.cpu, fs.rss = make([]*float64, len(tl.times)), make([]uint64, len(tl.times))
		return
	}
	k := 0
	for k < len(tl.times) && tl.times[k].Before(fs.times[0]) {
		k++
	}
	if k == 0 {
		return
	}
	live := len(fs.times)
	members := map[string][]byte{}
	for id, b := range tl.members {
		if !allAbsent(b[:k]) {
			members[id] = append(slices.Clone(b[:k]), bytes.Repeat([]byte{'-'}, live)...)
		}
	}
	for id, b := range fs.members {
		m, ok := members[id]
		if !ok {
			m = bytes.Repeat([]byte{'-'}, k)
		} else {
			m = m[:k]
		}
		members[id] = append(m, b...)
	}
	fs.times = append(slices.Clone(tl.times[:k]), fs.times...)
	fs.cpu = append(make([]*float64, k), fs.cpu...)
	fs.rss = append(make([]uint64, k), fs.rss...)
	fs.members = members
	if drop := len(fs.times) - h.opt.Timeline; drop > 0 {
		fs.times, fs.cpu, fs.rss = fs.times[drop:], fs.cpu[drop:], fs.rss[drop:]
		for id, b := range fs.members {
			if b = b[drop:]; allAbsent(b) {
				delete(fs.members, id)
			} else {
				fs.members[id] = b
			}
		}
	}
}

func allAbsent(s []byte) bool {
	for _, c := range s {
		if c != '-' {
			return false
		}
	}
	return true
}

// applyCalls takes one read of the call counters at t: each fleet's point
// is the difference from the previous read (a counter that went down, a
// new daemon's, counts from zero). The first read only sets the baseline.
func (h *hub) applyCalls(counts map[string]CallCounts, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.callsBase
	h.callsBase = true
	defer func() {
		h.prevCalls = map[string]CallCounts{}
		for n, c := range counts {
			if h.fleets[n] != nil {
				h.prevCalls[n] = c
			}
		}
	}()
	if first {
		return
	}
	points := map[string]callPoint{}
	h.callTimes = append(h.callTimes, t)
	for _, n := range h.names {
		p := callPoint{}
		if c, ok := counts[n]; ok {
			p = callDelta(h.prevCalls[n], c)
		}
		points[n] = p
		s := h.calls[n]
		if s == nil {
			// A fleet new to the sparklines: zeros for the earlier points.
			k := len(h.callTimes) - 1
			s = &fleetCallSeries{Calls: make([]uint64, k), Errors: make([]uint64, k), P50MS: make([]*float64, k)}
			h.calls[n] = s
		}
		s.Calls, s.Errors, s.P50MS = append(s.Calls, p.Calls), append(s.Errors, p.Errors), append(s.P50MS, p.P50MS)
	}
	if drop := len(h.callTimes) - h.opt.Timeline; drop > 0 {
		h.callTimes = h.callTimes[drop:]
		for _, s := range h.calls {
			s.Calls, s.Errors, s.P50MS = s.Calls[drop:], s.Errors[drop:], s.P50MS[drop:]
		}
	}
	h.publishLocked("calls", struct {
		T      int64                `json:"t"`
		Fleets map[string]callPoint `json:"fleets"`
	}{t.UnixMilli(), points})
}

// historyStale reports whether the history must be loaded again: never
// loaded since this serve started, or no page has been open (past Linger)
// since it was.
func (h *hub) historyStale(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.histAt.IsZero() || len(h.subs) == 0 && now.After(h.until) && h.until.After(h.histAt)
}

// applyHistory takes what loadHistory read at now: counts (nil: not read)
// are the counters' baseline, so the next read's point counts only the
// calls after now; hist (nil: no journal, or it failed) replaces the
// sparklines and merges its restart marks into each fleet's. Open streams
// (a page open while the history was stale) get a "snapshot" event.
func (h *hub) applyHistory(hist *history, counts map[string]CallCounts, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.histAt = now
	h.callsBase = counts != nil
	h.prevCalls = map[string]CallCounts{}
	for n, c := range counts {
		if h.fleets[n] != nil {
			h.prevCalls[n] = c
		}
	}
	if hist == nil {
		return
	}
	h.restartsAt = hist.upTo
	h.callTimes, h.calls = hist.times, map[string]*fleetCallSeries{}
	for n, c := range hist.calls {
		if h.fleets[n] != nil {
			h.calls[n] = c
		}
	}
	for n, marks := range hist.restarts {
		if fs := h.fleets[n]; fs != nil {
			fs.meta.Restarts = mergeMarks(fs.meta.Restarts, marks, h.opt.RestartMarks)
		}
	}
	for n, tl := range hist.verdicts {
		if fs := h.fleets[n]; fs != nil {
			h.mergeVerdictsLocked(fs, tl)
		}
	}
	if len(h.subs) > 0 {
		h.publishLocked("snapshot", h.snapshotLocked())
	}
}

// restartsRead is the time the restart marks hold the journal's restarts
// up to (zero: never read).
func (h *hub) restartsRead() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.restartsAt
}

// noteRestartsRead records that the marks hold the journal's restarts up
// to t.
func (h *hub) noteRestartsRead(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.After(h.restartsAt) {
		h.restartsAt = t
	}
}

// addRestarts merges restart marks from the journal (fleet → marks) into
// the fleets', and sends a "fleet" event for each fleet whose marks
// changed.
func (h *hub) addRestarts(marks map[string][]RestartMark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.names {
		fs := h.fleets[n]
		if len(marks[n]) == 0 {
			continue
		}
		merged := mergeMarks(fs.meta.Restarts, marks[n], h.opt.RestartMarks)
		if slices.Equal(merged, fs.meta.Restarts) {
			continue
		}
		fs.meta.Restarts = merged
		h.publishLocked("fleet", struct {
			Row  status.Fleet `json:"row"`
			Meta FleetMeta    `json:"meta"`
		}{fs.row, fs.meta})
	}
}

// callDelta is one period's point from two cumulative reads.
func callDelta(prev, cur CallCounts) callPoint {
	if cur.Calls < prev.Calls || cur.Errors < prev.Errors {
		prev = CallCounts{} // counters reset (another daemon)
	}
	p := callPoint{Calls: cur.Calls - prev.Calls, Errors: cur.Errors - prev.Errors}
	if q, ok := quantile(0.5, bucketDelta(prev.Buckets, cur.Buckets)); ok {
		ms := float64(int64(q*1e6)) / 1e3 // µs precision
		p.P50MS = &ms
	}
	return p
}

// snapshotLocked builds the full view.
func (h *hub) snapshotLocked() *snapshot {
	rep := h.header
	if rep.GeneratedAt.IsZero() {
		rep.GeneratedAt = h.rowsAt.UTC()
	}
	rep.Fleets = make([]status.Fleet, 0, len(h.names))
	s := &snapshot{
		EventID: eventID(h.epoch, h.ring.last), Report: &rep,
		Meta: map[string]*FleetMeta{}, Timelines: map[string]*timelineJSON{},
		Calls:  &callsJSON{Times: unixMillis(h.callTimes), PeriodMS: h.opt.CallsEvery.Milliseconds(), Fleets: map[string]*fleetCallSeries{}},
		Limits: map[string]int{"timeline": h.opt.Timeline, "restart_marks": h.opt.RestartMarks, "log_lines": h.opt.LogLines},
	}
	for _, n := range h.names {
		fs := h.fleets[n]
		rep.Fleets = append(rep.Fleets, fs.row)
		m := fs.meta
		s.Meta[n] = &m
		tl := &timelineJSON{Times: unixMillis(fs.times), Members: make(map[string]string, len(fs.members)),
			CPU: slices.Clone(fs.cpu), RSS: slices.Clone(fs.rss)}
		if tl.CPU == nil {
			tl.CPU, tl.RSS = []*float64{}, []uint64{}
		}
		for id, l := range fs.members {
			tl.Members[id] = string(l)
		}
		s.Timelines[n] = tl
		if c := h.calls[n]; c != nil {
			cp := *c
			s.Calls.Fleets[n] = &cp
		}
	}
	return s
}

func unixMillis(ts []time.Time) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.UnixMilli()
	}
	return out
}

// publishLocked encodes an event, keeps it in the ring and hands it to
// every stream. A stream whose buffer is full is dropped (closed): its
// browser reconnects with Last-Event-ID and resumes from the ring, or
// gets a snapshot.
func (h *hub) publishLocked(name string, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		h.opt.Log.Error("dashboard: encode event", "event", name, "err", err)
		return
	}
	seq := h.ring.last + 1
	ev := &event{seq: seq, frame: sseFrame(eventID(h.epoch, seq), name, data)}
	h.ring.push(ev)
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			h.dropLocked(s)
		}
	}
}

func (h *hub) dropLocked(s *subscriber) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	close(s.gone)
	if len(h.subs) == 0 {
		h.until = time.Now().Add(h.opt.Linger)
	}
}

// subscribe opens a stream resuming after lastID: the events it missed,
// or (lastID empty, unknown, from another serve or older than the ring) a
// snapshot frame.
func (h *hub) subscribe(lastID string) (*subscriber, [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &subscriber{ch: make(chan *event, 256), gone: make(chan struct{})}
	var first [][]byte
	seq, ok := parseEventID(h.epoch, lastID)
	var missed []*event
	if ok {
		missed, ok = h.ring.since(seq)
	}
	if ok {
		h.resumes++
		for _, ev := range missed {
			first = append(first, ev.frame)
		}
	} else {
		h.snapshots++
		h.applyKnownLocked()
		data, err := json.Marshal(h.snapshotLocked())
		if err == nil {
			first = append(first, sseFrame(eventID(h.epoch, h.ring.last), "snapshot", data))
		}
	}
	h.subs[s] = struct{}{}
	close(h.wake)
	h.wake = make(chan struct{})
	return s, first
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(s)
}

// closeAll ends every stream (the Server is stopping).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		h.dropLocked(s)
	}
}

// active reports whether sampling should go on: a stream is open, or the
// last one closed less than Linger ago. It also returns a channel closed
// when a stream opens.
func (h *hub) active() (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0 || time.Now().Before(h.until), h.wake
}

// streams is the number of open /events streams.
func (h *hub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// askSample asks the sampling loop for the named fleets now.
func (h *hub) askSample(names []string) {
	if len(names) == 0 {
		return
	}
	h.mu.Lock()
	for _, n := range names {
		h.want[n] = true
	}
	h.mu.Unlock()
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// takeWanted returns and clears the fleets asked for.
func (h *hub) takeWanted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Sorted(maps.Keys(h.want))
	clear(h.want)
	return out
}

// known reports whether name is a fleet of the current rows.
func (h *hub) known(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fleets[name] != nil
}

// remoteHost reports whether name is a fleet of another host as the rows
// show it (from presence, or declared there and never probed), and which.
func (h *hub) remoteHost(name string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fs := h.fleets[name]
	if fs == nil || fs.row.Remote == nil && fs.row.Verdict != status.Remote {
		return "", false
	}
	return fs.row.Host, true
}

// knownNames returns the current fleet names, sorted.
func (h *hub) knownNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.names)
}
