package status

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
)

// memberShell is a member's pane shell as the last status saw it: its pid
// with the start time that tells it from a later process given the pid.
type memberShell struct {
	id    string
	pid   int
	start uint64
}

// FleetUsage is one local running fleet's resources read now
// (ResourcesNow): the fleet's (fleetd and its herdr server's trees) and,
// for up to the asked number of members, each member's pane tree.
type FleetUsage struct {
	Fleet   string
	Usage   resources.Usage
	Members []MemberUsage // sorted by ID
}

// MemberUsage is one member's pane tree's resources.
type MemberUsage struct {
	ID    string
	Usage resources.Usage
}

// shellsLearnAge is how old a fleet's member shells (as the last status
// or scrape found them) may be before a scrape asks fleetd's roster and
// herdr again, to learn members spawned or removed since.
const shellsLearnAge = 30 * time.Second

// learnedShells are a fleet's members' shells, found under the herdr
// server herdr at at.
type learnedShells struct {
	herdr int
	at    time.Time
	ms    []memberShell
}

// keepShells remembers each member's shell from this report (rep.Fleets
// and roots aligned, as Collect builds them), so ResourcesNow can read
// members without asking herdr. A fleet in rep replaces what was kept
// for it; fleets not in rep keep theirs.
func (c *Collector) keepShells(rep *Report, roots []procRoots, snap *resources.Snapshot) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memberShells == nil {
		c.memberShells = map[string]learnedShells{}
	}
	for i, f := range rep.Fleets {
		var ms []memberShell
		for j, m := range f.Members {
			if j >= len(roots[i].shells) || roots[i].shells[j] == 0 {
				continue
			}
			pid := roots[i].shells[j]
			if start, ok := snap.StartTime(pid); ok {
				ms = append(ms, memberShell{id: m.ID, pid: pid, start: start})
			}
		}
		c.memberShells[f.Name] = learnedShells{herdr: roots[i].herdr, at: now, ms: ms}
	}
}

// scrapeFleet is a local running fleet as ResourcesNow reads it.
type scrapeFleet struct {
	f             *registry.Fleet
	st            *lifecycle.State
	fleetd, herdr int
	learn         bool        // its member shells are to be found now
	roster        []RosterRow // when learnt: the members, and
	shells        []int       // their shells' pids (0: not known)
}

// ResourcesNow reads the running local fleets' process trees once (a
// snapshot of its own sampler, apart from status's, so a scrape never
// shortens a status's CPU interval) and returns each fleet's resources,
// sorted by name, with at most maxMembers members each (the first by ID).
// Members are those the last status found, or, when that is unknown, older
// than shellsLearnAge or of an earlier herdr server, those the fleet's
// roster names now, their shells asked of herdr (once per pane, as a status
// does). A member whose shell no longer runs is left out. For /metrics;
// ctx bounds the roster and herdr requests. Nil when /proc cannot be read.
func (c *Collector) ResourcesNow(ctx context.Context, maxMembers int) []FleetUsage {
	if c.scrapeRes == nil {
		return nil
	}
	var ws []scrapeFleet
	c.mu.Lock()
	learned := maps.Clone(c.memberShells)
	c.mu.Unlock()
	for _, name := range c.opt.Manager.Names() {
		f, err := c.opt.Manager.Fleet(name)
		if err != nil || !c.IsLocal(f.Host) {
			continue
		}
		st, err := c.opt.Manager.State(name)
		if err != nil || st.Shown.Phase != lifecycle.PhaseRunning {
			continue
		}
		w := scrapeFleet{f: f, st: st}
		if st.Fleetd != nil {
			w.fleetd = st.Fleetd.PID
		}
		if st.Herdr != nil {
			w.herdr = st.Herdr.PID
		}
		l, ok := learned[name]
		w.learn = w.herdr != 0 && (!ok || l.herdr != w.herdr || time.Since(l.at) > shellsLearnAge)
		if w.fleetd != 0 || w.herdr != 0 {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	var wg sync.WaitGroup
	for i := range ws {
		if !ws[i].learn {
			continue
		}
		wg.Go(func() { c.learnShells(ctx, &ws[i]) })
	}
	wg.Wait()
	var pids []int
	for _, w := range ws {
		pids = append(pids, w.fleetd, w.herdr)
	}
	snap, err := c.scrapeRes.Take(pids...)
	if err != nil {
		return nil
	}
	now := time.Now()
	c.mu.Lock()
	if c.memberShells == nil {
		c.memberShells = map[string]learnedShells{}
	}
	shells := make(map[string][]memberShell, len(ws))
	for _, w := range ws {
		if w.learn && w.roster != nil {
			var ms []memberShell
			for j, r := range w.roster {
				if start, ok := snap.StartTime(w.shells[j]); ok && w.shells[j] != 0 {
					ms = append(ms, memberShell{id: r.ID, pid: w.shells[j], start: start})
				}
			}
			c.memberShells[w.f.Name] = learnedShells{herdr: w.herdr, at: now, ms: ms}
		}
		shells[w.f.Name] = slices.Clone(c.memberShells[w.f.Name].ms)
	}
	c.mu.Unlock()
	out := make([]FleetUsage, 0, len(ws))
	for _, w := range ws {
		pids := snap.Tree(w.fleetd, w.herdr)
		if len(pids) == 0 {
			continue
		}
		fu := FleetUsage{Fleet: w.f.Name, Usage: snap.Usage(pids)}
		ms := shells[w.f.Name]
		slices.SortFunc(ms, func(a, b memberShell) int { return strings.Compare(a.id, b.id) })
		for _, m := range ms {
			if len(fu.Members) >= maxMembers {
				break
			}
			if start, ok := snap.StartTime(m.pid); !ok || start != m.start {
				continue // gone, or the pid is another process's now
			}
			fu.Members = append(fu.Members, MemberUsage{ID: m.id, Usage: snap.Usage(snap.Tree(m.pid))})
		}
		out = append(out, fu)
	}
	slices.SortFunc(out, func(a, b FleetUsage) int { return strings.Compare(a.Fleet, b.Fleet) })
	return out
}

// learnShells asks w's fleetd for its roster and herdr for the shell of
// each member's pane (panes asked of before in this herdr server's run are
// not asked again). On a failed roster w.roster stays nil: what was known
// is kept.
func (c *Collector) learnShells(ctx context.Context, w *scrapeFleet) {
	roster, err := c.opt.Roster(ctx, w.f)
	if err != nil {
		return
	}
	sock := w.st.HerdrSocket
	if sock == "" {
		sock = c.opt.Manager.HerdrSocket(w.f)
	}
	hc := &herdr.Client{Socket: sock, Timeout: c.opt.FleetTimeout}
	w.shells = c.shellPIDs(ctx, hc, w.f.Name, w.herdr, roster)
	w.roster = roster
}
