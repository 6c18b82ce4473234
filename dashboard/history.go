package dashboard

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/status"
)

// Journal is what the dashboard reads of serve's journal (package journal;
// *journal.Journal implements it): the per-fleet newest-N query, and a
// subscription to the events written from now on.
type Journal interface {
	// Query returns the newest q.Limit events q selects, oldest first.
	Query(q journal.Query) ([]journal.Event, error)
	// Subscribe returns a channel of every event written from now on (an
	// event the reader was too slow for is dropped: a gap in Seq) and a
	// function that ends the subscription.
	Subscribe() (<-chan journal.Event, func())
}

// RestartSpan is how far back the restart marks are read from the journal:
// the page's time axis spans the last hour.
const RestartSpan = time.Hour

// history is what the journal says of the fleets: per fleet the restart
// marks within RestartSpan and the sparkline points of the last Timeline
// periods, binned from its call events.
type history struct {
	restarts map[string][]RestartMark
	times    []time.Time // point times, oldest first (the end of each period)
	calls    map[string]*fleetCallSeries
	upTo     time.Time // the restarts were read up to then
	read     int       // events read (for the log and the benchmark)
	// verdicts are the member verdict timelines the journal's verdict
	// changes give (readVerdicts), per fleet with any.
	verdicts map[string]*verdictTimeline
}

// verdictTimeline is one fleet's verdict samples rebuilt from the
// journal: sample times (oldest first) and per member one letter per
// sample, as fleetState keeps them.
type verdictTimeline struct {
	times   []time.Time
	members map[string][]byte
}

// VerdictSpan is how far back readVerdicts reads a fleet's verdict
// changes: a member's verdict at the start of the timeline is its last
// change before it, if within this span.
const VerdictSpan = 24 * time.Hour

// readVerdicts rebuilds each fleet's verdict timeline from the journal's
// member.verdict events (the newest perFleet of the last VerdictSpan): a
// sample every `every` up to now, at most timeline of them, beginning at
// the first change (or timeline samples back, when that is later); each
// member's letter in a sample is the verdict of its last change at or
// before it ('-' before its first, and after "gone"). Fleets with no
// verdict change get none.
func readVerdicts(j Journal, names []string, now time.Time, every time.Duration, timeline, perFleet int) (map[string]*verdictTimeline, int, error) {
	out := map[string]*verdictTimeline{}
	read := 0
	for _, n := range names {
		evs, err := j.Query(journal.Query{Fleets: []string{n}, Kinds: []string{journal.KindVerdict}, Since: now.Add(-VerdictSpan), Until: now.Add(time.Millisecond), Limit: perFleet})
		if err != nil {
			return nil, read, err
		}
		read += len(evs)
		if len(evs) == 0 {
			continue
		}
		start := now.Add(-time.Duration(timeline-1) * every)
		if first := evs[0].Time; first.After(start) {
			start = first
		}
		var times []time.Time
		for t := now; !t.Before(start) && len(times) < timeline; t = t.Add(-every) {
			times = append(times, t)
		}
		slices.Reverse(times)
		tl := &verdictTimeline{times: times, members: map[string][]byte{}}
		cur := map[string]byte{}
		k := 0
		for i, t := range times {
			for ; k < len(evs) && !evs[k].Time.After(t); k++ {
				e := evs[k]
				if e.Member == "" {
					continue
				}
				l, ok := verdictLetter[status.Verdict(e.Outcome)]
				if !ok {
					l = '-' // gone, or a verdict this page has no letter for
				}
				cur[e.Member] = l
				if _, seen := tl.members[e.Member]; !seen {
					b := make([]byte, i, len(times))
					for x := range b {
						b[x] = '-'
					}
					tl.members[e.Member] = b
				}
			}
			for id, b := range tl.members {
				tl.members[id] = append(b, cur[id])
			}
		}
		for id, b := range tl.members {
			if allAbsent(b) {
				delete(tl.members, id)
			}
		}
		if len(tl.members) > 0 {
			out[n] = tl
		}
	}
	return out, read, nil
}

// restartOverlap is how far before the time restarts were last read up
// to a new read starts: an event is journalled when it is appended but
// written a moment later, so one stamped just before the last read may
// have been missed by it (a mark read twice is merged once).
const restartOverlap = 10 * time.Second

// restartsSince is where a read of the restarts starts: RestartSpan before
// now, or restartOverlap before upTo (the time restarts were read up to
// before; zero: never) when that is later.
func restartsSince(now, upTo time.Time) time.Time {
	since := now.Add(-RestartSpan)
	if a := upTo.Add(-restartOverlap); a.After(since) {
		return a
	}
	return since
}

// readRestarts reads the restart events since that time and returns the
// newest perFleet of each fleet named. It is one query of the whole
// journal by time, not one per fleet: a fleet's index holds only keys, so
// walking it costs a lookup per event, its calls included, where the
// time-ordered walk reads each record in place and skips other kinds by a
// byte search. Even so the walk costs about 1.7 µs per event
// (BenchmarkHistoryFromJournal: 0.5 s for an hour of 300,000), which is
// why the reads after the first start where the last one ended
// (restartsSince). Restarts are rare (a crash loop stops them), so the
// limit of 1000 (at least perFleet per fleet) is not reached in practice.
func readRestarts(j Journal, names []string, since time.Time, perFleet int) (map[string][]RestartMark, int, error) {
	evs, err := j.Query(journal.Query{Kinds: []string{journal.KindRestart}, Since: since, Limit: max(1000, perFleet*len(names))})
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string][]RestartMark, len(names))
	for _, n := range names {
		out[n] = []RestartMark{}
	}
	read := 0
	for _, e := range evs {
		if marks, ok := out[e.Fleet]; ok {
			out[e.Fleet] = append(marks, restartMark(e))
			read++
		}
	}
	for n, marks := range out {
		if k := len(marks) - perFleet; k > 0 {
			out[n] = marks[k:]
		}
	}
	return out, read, nil
}

// restartMark is a journal restart event as a mark: its time, and its
// detail (the cause and the members it ended) as the reason.
func restartMark(e journal.Event) RestartMark {
	return RestartMark{At: e.Time.UTC(), Reason: e.Detail, seq: e.Seq}
}

// readHistory reads from the journal what the page draws of the past: the
// restart marks since restartsFrom (restartsSince), and the call events of the last timeline periods (each
// period ends at now − k×period), the newest perFleet calls of each fleet
// (a fleet that made more within the window shows its newest perFleet,
// so its oldest period drawn may be short of some). Points begin at the
// first period any fleet had a call in; none when no fleet had one.
func readHistory(j Journal, names []string, now, restartsFrom time.Time, period time.Duration, timeline, perFleet, marks int) (*history, error) {
	h := &history{calls: map[string]*fleetCallSeries{}, upTo: now}
	var err error
	if h.restarts, h.read, err = readRestarts(j, names, restartsFrom, marks); err != nil {
		return nil, err
	}
	from := now.Add(-time.Duration(timeline) * period)
	type bin struct {
		calls, errors uint64
		ms            []float64
	}
	bins := map[string][]bin{}
	first := timeline
	for _, n := range names {
		evs, err := j.Query(journal.Query{Fleets: []string{n}, Kinds: []string{journal.KindCall}, Since: from, Until: now, Limit: perFleet})
		if err != nil {
			return nil, err
		}
		h.read += len(evs)
		bs := make([]bin, timeline)
		for _, e := range evs {
			if !e.Time.After(from) {
				continue // periods are (end−period, end]
			}
			i := int((e.Time.Sub(from) - 1) / period)
			if i < 0 || i >= timeline {
				continue
			}
			first = min(first, i)
			b := &bs[i]
			b.calls++
			if e.Outcome != "ok" {
				b.errors++
			}
			if ms, ok := e.Data["duration_ms"].(float64); ok {
				b.ms = append(b.ms, ms)
			}
		}
		bins[n] = bs
	}
	if first == timeline {
		return h, nil
	}
	for i := first; i < timeline; i++ {
		h.times = append(h.times, from.Add(time.Duration(i+1)*period))
	}
	for n, bs := range bins {
		s := &fleetCallSeries{}
		for _, b := range bs[first:] {
			s.Calls, s.Errors = append(s.Calls, b.calls), append(s.Errors, b.errors)
			s.P50MS = append(s.P50MS, medianMS(b.ms))
		}
		h.calls[n] = s
	}
	return h, nil
}

// medianMS is the median of ms (the lower of the two middle values of an
// even count), at µs precision as callDelta gives it; nil when empty.
func medianMS(ms []float64) *float64 {
	if len(ms) == 0 {
		return nil
	}
	slices.Sort(ms)
	m := float64(int64(ms[(len(ms)-1)/2]*1e3)) / 1e3
	return &m
}

// mergeMarks merges restart marks read from the journal into kept ones: a
// mark already kept (the same event: seq and time) is not added twice.
// The result is sorted by time and bounded to the newest max.
func mergeMarks(kept, from []RestartMark, max int) []RestartMark {
	out := slices.Clone(kept)
	for _, m := range from {
		if !slices.ContainsFunc(out, func(k RestartMark) bool { return k.seq == m.seq && k.At.Equal(m.At) }) {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b RestartMark) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.seq, b.seq)) })
	if n := len(out) - max; n > 0 {
		out = out[n:]
	}
	return out
}

// loadHistory reads the page's history from the journal when the hub's is
// stale (nothing read since this serve started, or no page was open for a
// while): the call counters' baseline first, then, from Options.Journal,
// the restart marks and the sparkline points up to that moment, so a call
// is counted once, by the journal or by the counters. Without a journal
// only the baseline is taken (calls made while no page was open are not
// drawn). It is called before a page's first snapshot and when the calls
// loop wakes; one at a time.
func (s *Server) loadHistory(ctx context.Context) {
	s.histMu.Lock()
	defer s.histMu.Unlock()
	if !s.hub.historyStale(time.Now()) {
		return
	}
	var counts map[string]CallCounts
	if s.opt.Calls != nil {
		var err error
		if counts, err = s.opt.Calls(); err != nil {
			s.opt.Log.Warn("dashboard: read call counters", "err", err)
			counts = nil
		}
	}
	now := time.Now()
	var h *history
	if s.opt.Journal != nil && ctx.Err() == nil {
		t0 := time.Now()
		var err error
		h, err = readHistory(s.opt.Journal, s.hub.knownNames(), now, restartsSince(now, s.hub.restartsRead()), s.opt.CallsEvery, s.opt.Timeline, s.opt.HistoryCalls, s.opt.RestartMarks)
		if err == nil {
			var n int
			h.verdicts, n, err = readVerdicts(s.opt.Journal, s.hub.knownNames(), now, s.opt.SampleEvery, s.opt.Timeline, 1000)
			h.read += n
		}
		if err != nil {
			s.opt.Log.Warn("dashboard: read history from the journal", "err", err)
			h = nil
		} else {
			s.opt.Log.Debug("dashboard: history read from the journal", "events", h.read, "elapsed", time.Since(t0))
		}
	}
	s.hub.applyHistory(h, counts, now)
}

// followJournal keeps the restart marks live from the journal while a page
// is open: it subscribes when one opens, reads the restarts written since
// they were last read (up to the page's snapshot, or before), then adds
// each restart event as it is written. A gap in the events' sequence (the
// subscription dropped some, as a flood of calls can make it) reads the
// restarts since the last event before the gap, at most once per
// CallsEvery. When no page is open (after Linger) it ends the subscription
// and waits.
func (s *Server) followJournal(ctx context.Context) {
	t := time.NewTicker(s.opt.CallsEvery)
	defer t.Stop()
	for {
		if ok, _ := s.waitActive(ctx); !ok {
			return
		}
		ch, stop := s.opt.Journal.Subscribe()
		upTo := s.reloadRestarts(s.hub.restartsRead()) // everything up to upTo is merged
		var last uint64
		gap := false
	follow:
		for {
			select {
			case <-ctx.Done():
				stop()
				return
			case e := <-ch:
				if last != 0 && e.Seq != last+1 {
					gap = true
				}
				last = e.Seq
				if e.Kind == journal.KindRestart {
					s.hub.addRestarts(map[string][]RestartMark{e.Fleet: {restartMark(e)}})
				}
				if !gap && e.Time.After(upTo) {
					upTo = e.Time
				}
			case <-t.C:
				if gap {
					gap = false
					upTo = s.reloadRestarts(upTo)
				}
				if on, _ := s.hub.active(); !on {
					break follow
				}
			}
		}
		stop()
		s.hub.noteRestartsRead(upTo)
	}
}

// reloadRestarts reads the restarts since a little before upTo (zero: the
// last RestartSpan), merges them in and returns the time they were read up
// to (upTo itself when the read failed).
func (s *Server) reloadRestarts(upTo time.Time) time.Time {
	now := time.Now()
	marks, _, err := readRestarts(s.opt.Journal, s.hub.knownNames(), restartsSince(now, upTo), s.opt.RestartMarks)
	if err != nil {
		s.opt.Log.Warn("dashboard: read restarts from the journal", "err", err)
		return upTo
	}
	s.hub.addRestarts(marks)
	s.hub.noteRestartsRead(now)
	return now
}
