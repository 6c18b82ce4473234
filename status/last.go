package status

import (
	"maps"
	"time"
)

// Sample is what a Collector's last report said of one fleet's members:
// how many fleet_list listed and how many got each verdict, and when the
// report was made. A long-lived Collector (the serve daemon's) keeps one
// per fleet, so a frequent reader (federation presence, every heartbeat)
// can say what the fleet's members were doing without sampling them.
type Sample struct {
	// At is when the report that judged them was generated (UTC).
	At time.Time
	// Members is the fleet's member count in that report (≥ 0).
	Members int
	// Verdicts counts members per verdict in that report (never nil).
	Verdicts map[Verdict]int
}

// Last returns the newest Sample of fleet name: from the last Collect
// that read its roster (a running fleet whose roster answered) or found
// it stopped (no members); false when no Collect did yet. Rows that could
// not be judged (UNKNOWN fleet, remote, starting …) leave the previous
// Sample in place: its At says how old it is. The map is a copy.
func (c *Collector) Last(name string) (Sample, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.last[name]
	if ok {
		s.Verdicts = maps.Clone(s.Verdicts)
	}
	return s, ok
}

// keepLast records rep's judged rows for Last.
func (c *Collector) keepLast(rep *Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range rep.Fleets {
		f := &rep.Fleets[i]
		if f.Verdict != "" || f.MemberCount < 0 {
			continue
		}
		v := make(map[Verdict]int, len(f.Summary))
		maps.Copy(v, f.Summary)
		c.last[f.Name] = Sample{At: rep.GeneratedAt, Members: f.MemberCount, Verdicts: v}
	}
}
