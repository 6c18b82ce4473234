package status

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/resources"
)

// minResourceInterval is the shortest interval a status's CPU percentages
// cover: Collect reads /proc when it starts and again at least this long
// after (the probes usually take longer).
const minResourceInterval = time.Second

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

// shellPIDs asks herdr for each member's pane's shell pid (pane.
// process_info), all in parallel; 0 where it cannot be had.
func shellPIDs(ctx context.Context, hc *herdr.Client, roster []RosterRow) []int {
	out := make([]int, len(roster))
	var wg sync.WaitGroup
	for i, m := range roster {
		if m.PaneID == "" {
			continue
		}
		wg.Go(func() {
			if pi, err := hc.PaneProcessInfo(ctx, m.PaneID); err == nil {
				out[i] = pi.ShellPID
			}
		})
	}
	wg.Wait()
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
			if st, err := procfs.ReadStat(r.shells[j]); err == nil && since > 0 {
				age := max(0, (since - st.StartedSinceBoot()).Truncate(time.Second).Seconds())
				f.Members[j].PaneAgeS = &age
			}
		}
	}
}
