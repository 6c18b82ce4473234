package status

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
)

// resourceIntervalMax is the longest interval a status's CPU percentages
// may cover: when the last read of /proc (the previous status, or serve's
// previous sampling) is older, Collect reads /proc once more when it
// starts, so the percentages cover this status's own probes. Collect never
// waits for the interval: percentages over less than 100 ms are left out
// (resources.Snapshot.Usage).
const resourceIntervalMax = time.Minute

// shellKey names a member's pane within one run of its herdr server: a
// pane id is unique for the server's life, so a restarted herdr (another
// pid) never reuses an entry.
type shellKey struct {
	fleet string
	herdr int
	pane  string
}

// probed is one fleet's probe: its row and where its resources are
// measured from.
type probed struct {
	row   Fleet
	roots procRoots
}

// procRoots are the processes a fleet row's and its members' resources
// are measured from, found while probing.
type procRoots struct {
	fleetd, herdr int
	shells        []int // per member, as Fleet.Members; 0: not known
}

// shellPIDs returns each member's pane's shell pid (0 where it cannot be
// had). A pane's shell is the pane's for its whole life, so herdr is asked
// (pane.process_info, all in parallel) only for panes not asked of before
// in this herdr server's run; the answers are kept in c.shells and those
// of panes no longer on the roster dropped.
func (c *Collector) shellPIDs(ctx context.Context, hc *herdr.Client, fleet string, herdrPID int, roster []RosterRow) []int {
	out := make([]int, len(roster))
	var ask []int
	c.mu.Lock()
	if c.shells == nil {
		c.shells = map[shellKey]int{}
	}
	for i, m := range roster {
		if pid, ok := c.shells[shellKey{fleet, herdrPID, m.PaneID}]; ok && m.PaneID != "" {
			out[i] = pid
		} else if m.PaneID != "" {
			ask = append(ask, i)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, i := range ask {
		wg.Go(func() {
			if pi, err := hc.PaneProcessInfo(ctx, roster[i].PaneID); err == nil {
				out[i] = pi.ShellPID
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	onRoster := map[string]bool{}
	for i, m := range roster {
		onRoster[m.PaneID] = true
		if out[i] != 0 {
			c.shells[shellKey{fleet, herdrPID, m.PaneID}] = out[i]
		}
	}
	for k := range c.shells {
		if k.fleet == fleet && (k.herdr != herdrPID || !onRoster[k.pane]) {
			delete(c.shells, k)
		}
	}
	return out
}

// addResources fills rep's fleet and member resources from snap: a fleet
// from fleetd's and its herdr server's process trees, a member from its
// pane shell's, with the pane's age.
func addResources(rep *Report, roots []procRoots, snap *resources.Snapshot) {
	since, _ := procfs.SinceBoot()
	for i := range rep.Fleets {
		r := roots[i]
		if r.fleetd == 0 && r.herdr == 0 {
			continue
		}
		f := &rep.Fleets[i]
		if pids := snap.Tree(r.fleetd, r.herdr); len(pids) > 0 {
			u := snap.Usage(pids)
			f.Resources = &u
		}
		for j := range f.Members {
			if j >= len(r.shells) || r.shells[j] == 0 {
				continue
			}
			pids := snap.Tree(r.shells[j])
			if len(pids) == 0 {
				continue
			}
			u := snap.Usage(pids)
			f.Members[j].Resources = &u
			if start, ok := snap.StartTime(r.shells[j]); ok && since > 0 {
				started := time.Duration(start) * (time.Second / procfs.ClockTicks)
				age := max(0, (since - started).Truncate(time.Second).Seconds())
				f.Members[j].PaneAgeS = &age
			}
		}
	}
}

// recordedRoots returns the fleetd and herdr server pids the state files
// of fleets' local running fleets name (a fleet whose state cannot be
// read is left out): the roots of the process trees a status measures.
func (c *Collector) recordedRoots(fleets []*registry.Fleet) []int {
	var pids []int
	for _, f := range fleets {
		if !c.IsLocal(f.Host) {
			continue
		}
		st, err := c.opt.Manager.State(f.Name)
		if err != nil || st.Shown.Phase != lifecycle.PhaseRunning {
			continue
		}
		if st.Fleetd != nil {
			pids = append(pids, st.Fleetd.PID)
		}
		if st.Herdr != nil {
			pids = append(pids, st.Herdr.PID)
		}
	}
	return pids
}
