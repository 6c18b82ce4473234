package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// warmFor is how long after the last fleetmgr_status that asked for a
// cached answer (max_age_ms) serve keeps sampling in the background, so
// that the next such call answers at once from verdicts at most about
// two intervals old (the first such call samples anew).
const warmFor = 10 * time.Minute

// verdictCache is serve's last status report of every local fleet (at
// the default interval), which fleetmgr_status with max_age_ms answers
// from, and the background sampling that keeps it fresh while asked.
type verdictCache struct {
	mu      sync.Mutex
	rep     *status.Report // nil until the first full sampling
	at      time.Time      // when rep was generated (its sampling finished)
	began   time.Time      // when rep's sampling began: a verdict pushed after it may be missing from rep
	askedAt time.Time
	changed time.Time     // a verdict changed (herdr's push) at this time: older samplings are stale
	wake    chan struct{} // buffered 1: a cached answer was asked for
}

// changedNow marks every sampling made so far as stale (a member's verdict
// changed since, as herdr pushed it) and wakes the background sampling.
func (c *verdictCache) changedNow() {
	c.mu.Lock()
	c.changed = time.Now()
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func newVerdictCache() *verdictCache {
	return &verdictCache{wake: make(chan struct{}, 1)}
}

// store keeps rep, a full report whose sampling began at began, when it
// is newer than the one kept. A verdict pushed between began and rep's end
// may or may not be in rep, so get compares pushed changes with began.
func (c *verdictCache) store(rep *status.Report, began time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rep == nil || rep.GeneratedAt.After(c.at) {
		c.rep, c.at, c.began = rep, rep.GeneratedAt, began
	}
}

// pushedFunc gives a fleet's members as herdr's push has them now, by pane
// (status.Collector.PushedMembers): pushed false for a fleet not followed
// from herdr's push, ok false when it is but cannot say now.
type pushedFunc func(fleet string) (members map[string]status.Member, pushed, ok bool)

// get answers from the kept sampling when it is at most maxAge old: the
// lifecycle rows read now (fresh is the Collector's Rows for names, none:
// all), each running fleet with the members, verdicts and probes the
// sampling found for the same fleetd (pid). A verdict that changed since
// the sampling (herdr's push, changedNow) is taken from pushed: every
// running fleet that pushed knows gets its members' verdicts, evidence and
// reasons from it, provided it knows exactly the sampling's member panes.
// nil when there is no such sampling, a running fleet is not in it (a
// fleetd started since), or the sampling is older than a pushed change
// that pushed cannot give: the caller samples anew. Either way it marks
// the cache as asked for, waking the background sampling.
func (c *verdictCache) get(maxAge time.Duration, fresh []status.Fleet, pushed pushedFunc) *status.Report {
	c.mu.Lock()
	c.askedAt = time.Now()
	rep, at, began, changed := c.rep, c.at, c.began, c.changed
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if rep == nil || time.Since(at) > maxAge {
		return nil
	}
	// A verdict changed since the sampling began (not since it ended: one
	// pushed while it ran may be missing from it).
	overlay := !began.After(changed) && !changed.IsZero()
	if overlay && pushed == nil {
		return nil
	}
	sampled := make(map[string]status.Fleet, len(rep.Fleets))
	for _, f := range rep.Fleets {
		sampled[f.Name] = f
	}
	out := *rep
	out.Fleets = make([]status.Fleet, 0, len(fresh))
	for _, row := range fresh {
		s, ok := sampled[row.Name]
		if row.MemberCount < 0 && row.PID != 0 { // running: its members come from the sampling
			if !ok || s.PID != row.PID {
				return nil
			}
			row.Health, row.Herdr, row.Broker, row.MemberCount = s.Health, s.Herdr, s.Broker, s.MemberCount
			row.Members, row.Summary, row.Error = s.Members, s.Summary, s.Error
			if overlay {
				if !overlayPushed(&row, pushed) {
					return nil
				}
			}
		}
		if row.Members == nil {
			row.Members = []status.Member{}
		}
		if row.Summary == nil {
			row.Summary = map[status.Verdict]int{}
		}
		out.Fleets = append(out.Fleets, row)
	}
	out.AgeMS = max(0, time.Since(at).Milliseconds())
	out.Cached = true
	return &out
}

// overlayPushed replaces the verdicts of row's members (a copy of the
// sampling's) with what pushed has now, and recounts the summary. A fleet
// not followed from herdr's push is left as sampled, true (no pushed change
// was its); false when pushed cannot say now or knows other member panes
// than the sampling (a member spawned or gone since).
func overlayPushed(row *status.Fleet, pushed pushedFunc) bool {
	now, isPushed, ok := pushed(row.Name)
	if !isPushed {
		return true
	}
	if !ok {
		return false
	}
	if len(now) != len(row.Members) {
		return false
	}
	members := make([]status.Member, len(row.Members))
	summary := map[status.Verdict]int{}
	for i, m := range row.Members {
		p, ok := now[m.PaneID]
		if !ok || m.PaneID == "" || p.ID != m.ID {
			return false
		}
		m.State, m.LiveStatus, m.AgentStatus = p.State, p.LiveStatus, p.AgentStatus
		m.Verdict, m.Evidence, m.Reason, m.LastChangeAgeS = p.Verdict, p.Evidence, p.Reason, p.LastChangeAgeS
		m.Files, m.Output = p.Files, p.Output
		members[i] = m
		summary[m.Verdict]++
	}
	row.Members, row.Summary = members, summary
	return true
}

// keepWarm samples every local fleet back to back (each sampling takes
// about one interval) while the cache was asked for within warmFor,
// then waits to be asked again; until ctx ends. Its samplings judge
// verdicts only: they read no resources from /proc (nobody looks at
// them), which a cached answer reads for its caller when it is asked
// (status.Collector.AddResources).
func (p *Proxy) keepWarm(ctx context.Context) {
	c := p.verdicts
	for {
		c.mu.Lock()
		idle := time.Since(c.askedAt) > warmFor
		c.mu.Unlock()
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-c.wake:
				continue
			}
		}
		t0 := time.Now()
		rep, err := p.statusCol.Collect(ctx, status.Request{})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			NoteDrift(rep, p.Catalogue())
			c.store(rep, t0)
		}
		// A sampling that returned at once (nothing busy) is not
		// repeated more often than once an interval.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(t0.Add(p.statusCol.Interval()))):
		}
	}
}
