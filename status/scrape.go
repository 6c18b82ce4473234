package status

import (
	"slices"

	"github.com/fleetmgr/fleetmgr/lifecycle"
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

// keepShells remembers each member's shell from this report (rep.Fleets
// and roots aligned, as Collect builds them), so ResourcesNow can read
// members without asking herdr. A fleet in rep replaces what was kept
// for it; fleets not in rep keep theirs.
func (c *Collector) keepShells(rep *Report, roots []procRoots, snap *resources.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memberShells == nil {
		c.memberShells = map[string][]memberShell{}
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
		c.memberShells[f.Name] = ms
	}
}

// ResourcesNow reads /proc once (a snapshot of its own sampler, apart from
// status's, so a scrape never shortens a status's CPU interval) and
// returns every local running fleet's resources, sorted by name, with at
// most maxMembers members each (the first by ID; members are those the
// last status saw, whose shell still runs: none before a first status).
// For /metrics: it asks neither fleetd nor herdr. Nil when /proc cannot
// be read.
func (c *Collector) ResourcesNow(maxMembers int) []FleetUsage {
	if c.scrapeRes == nil {
		return nil
	}
	type want struct {
		name          string
		fleetd, herdr int
	}
	var ws []want
	for _, name := range c.opt.Manager.Names() {
		f, err := c.opt.Manager.Fleet(name)
		if err != nil || !c.IsLocal(f.Host) {
			continue
		}
		st, err := c.opt.Manager.State(name)
		if err != nil || st.Shown.Phase != lifecycle.PhaseRunning {
			continue
		}
		var w want
		w.name = name
		if st.Fleetd != nil {
			w.fleetd = st.Fleetd.PID
		}
		if st.Herdr != nil {
			w.herdr = st.Herdr.PID
		}
		if w.fleetd != 0 || w.herdr != 0 {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	var pids []int
	for _, w := range ws {
		pids = append(pids, w.fleetd, w.herdr)
	}
	snap, err := c.scrapeRes.Take(pids...)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	shells := make(map[string][]memberShell, len(ws))
	for _, w := range ws {
		shells[w.name] = slices.Clone(c.memberShells[w.name])
	}
	c.mu.Unlock()
	out := make([]FleetUsage, 0, len(ws))
	for _, w := range ws {
		pids := snap.Tree(w.fleetd, w.herdr)
		if len(pids) == 0 {
			continue
		}
		fu := FleetUsage{Fleet: w.name, Usage: snap.Usage(pids)}
		ms := shells[w.name]
		slices.SortFunc(ms, func(a, b memberShell) int {
			if a.id < b.id {
				return -1
			}
			if a.id > b.id {
				return 1
			}
			return 0
		})
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
	slices.SortFunc(out, func(a, b FleetUsage) int {
		if a.Fleet < b.Fleet {
			return -1
		}
		if a.Fleet > b.Fleet {
			return 1
		}
		return 0
	})
	return out
}
