package status

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
)

// resourceIntervalMax is the longest interval a status's CPU percentages
// may cover: they cover the time since the previous read of /proc by
// whoever looked last (a status, a watch or top frame, a page), and when
// that read is older, or there was none, /proc is read once more first.
// Collect reads it when it starts, so the percentages cover this status's
// own probes (about one interval); AddResources, which answers at once,
// reads it cpuWindow before its own read. Neither waits for a 1 s
// interval; percentages over less than 100 ms are left out
// (resources.Snapshot.Usage).
const resourceIntervalMax = time.Minute

// cpuWindow is the shortest interval AddResources's CPU percentages cover
// when nobody read /proc in the last resourceIntervalMax: it reads the
// trees twice, this far apart (CPU time is counted in 10 ms ticks, so a
// percentage over it is good to about 5 % of a core).
const cpuWindow = 200 * time.Millisecond

// ResourceReads is how many times this Collector has read the fleets'
// process trees from /proc, for status and for scrapes together
// (resources.Sampler.Reads): it grows only when someone looks (a status
// or page asking with Request.Resources, AddResources, ResourcesNow),
// never with the verdict-only samplings serve makes on its own.
func (c *Collector) ResourceReads() uint64 {
	var n uint64
	for _, s := range []*resources.Sampler{c.res, c.scrapeRes} {
		if s != nil {
			n += s.Reads()
		}
	}
	return n
}

// measure reads the trees of rep's fleets (roots aligned with
// rep.Fleets, as Collect and AddResources build them) once, fills the
// rows' resources and keeps the members' shells for scrapes (keepShells).
func (c *Collector) measure(rep *Report, roots []procRoots) {
	var pids []int
	for _, r := range roots {
		if r.fleetd != 0 || r.herdr != 0 {
			pids = append(pids, r.fleetd, r.herdr)
		}
	}
	if len(pids) == 0 {
		return
	}
	if snap, err := c.res.Take(pids...); err == nil {
		addResources(rep, roots, snap)
		c.keepShells(rep, roots, snap)
	}
}

// AddResources fills the resources of rep's local running fleets and
// their members, read from /proc now: for an answer made from an earlier
// verdict-only sampling (fleetmgr_status's cached answer, which `status`,
// `status --watch` and `top` ask for), whose caller shows them. A fleet's
// trees are those of the fleetd and herdr server its state file names
// (rows whose pid is not that fleetd's are left alone); a member's is its
// pane's shell's, asked of herdr once per pane (as Collect does). CPU
// percentages cover the time since the previous read of /proc, or, when
// nobody read it in the last resourceIntervalMax, cpuWindow: AddResources
// then reads twice, that far apart (ctx ending cuts the wait short and
// leaves the percentages out).
func (c *Collector) AddResources(ctx context.Context, rep *Report) {
	if c.res == nil {
		return
	}
	roots := make([]procRoots, len(rep.Fleets))
	var wg sync.WaitGroup
	for i := range rep.Fleets {
		f := &rep.Fleets[i]
		if f.State != string(lifecycle.PhaseRunning) || !c.IsLocal(f.Host) {
			continue
		}
		st, err := c.opt.Manager.State(f.Name)
		if err != nil || st.Fleetd == nil || st.Fleetd.PID != f.PID {
			continue
		}
		roots[i].fleetd = st.Fleetd.PID
		f.Members = slices.Clone(f.Members) // a cached report's rows may share them
		for j := range f.Members {          // what an earlier read found is not now's
			f.Members[j].Resources, f.Members[j].PaneAgeS = nil, nil
		}
		if st.Herdr == nil {
			continue
		}
		roots[i].herdr = st.Herdr.PID
		fl, err := c.opt.Manager.Fleet(f.Name)
		if err != nil || len(f.Members) == 0 {
			continue
		}
		sock := st.HerdrSocket
		if sock == "" {
			sock = c.opt.Manager.HerdrSocket(fl)
		}
		roster := make([]RosterRow, len(f.Members))
		for j, m := range f.Members {
			roster[j] = RosterRow{ID: m.ID, PaneID: m.PaneID}
		}
		wg.Go(func() {
			hc := &herdr.Client{Socket: sock, Timeout: c.opt.FleetTimeout}
			roots[i].shells = c.shellPIDs(ctx, hc, f.Name, roots[i].herdr, roster)
		})
	}
	wg.Wait()
	var pids []int
	for _, r := range roots {
		if r.fleetd != 0 || r.herdr != 0 {
			pids = append(pids, r.fleetd, r.herdr)
		}
	}
	if len(pids) == 0 {
		return
	}
	if time.Since(c.res.Last()) > resourceIntervalMax {
		_, _ = c.res.Take(pids...)
		select {
		case <-ctx.Done():
		case <-time.After(cpuWindow):
		}
	}
	c.measure(rep, roots)
}

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
