package status

import "slices"

// Rows returns the rows Collect starts from, for the named fleets (every
// configured fleet when names is empty), sorted by name: what the config
// and each fleet's lifecycle state say (state files and /proc), without
// probing /healthz, herdr, the broker or the roster. It costs microseconds
// per fleet and never waits on a fleet, so a live view can read it often
// (the dashboard does, every half second while a page is open) and leave
// the sampling of members to Collect.
//
// A running fleet's row has PID and UptimeS, no Health, Herdr or Broker,
// and MemberCount -1 (its roster was not read); other rows are exactly what
// Collect reports for them (stopped: 0 members; starting, restarting,
// failed, remote, unknown: -1). An unknown fleet name is an error listing
// the valid ones.
func (c *Collector) Rows(names []string) ([]Fleet, error) {
	cfg := c.opt.Manager.Config()
	if len(names) == 0 {
		names = cfg.Names()
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	rows := make([]Fleet, 0, len(names))
	for _, n := range names {
		f, err := cfg.Fleet(n)
		if err != nil {
			return nil, err
		}
		row, st := c.stateRow(f)
		if st != nil { // running here: Collect would probe it
			row.MemberCount = -1
		}
		rows = append(rows, row)
	}
	return rows, nil
}
