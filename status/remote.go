package status

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// shownStates are the fleet states a report's state takes (the local
// phases); a peer's other words show as unknown.
var shownStates = []string{string(lifecycle.PhaseRunning), string(lifecycle.PhaseStarting), string(lifecycle.PhaseRestarting),
	string(lifecycle.PhaseStopping), string(lifecycle.PhaseFailed), string(lifecycle.PhaseStopped), string(lifecycle.PhaseUnknown)}

// knownVerdicts are the verdicts a member may have; a peer's other words
// are counted as UNKNOWN.
var knownVerdicts = []Verdict{Working, Stalled, Idle, Blocked, Unknown}

// AddRemote adds v to rep: the "federation" object, and a row per fleet
// of every peer in the view, named NAME@HOST. A fleet fleets.toml
// declares with host = PEER (a REMOTE row: never probed) is filled in
// from PEER's presence instead, under its own name, when PEER is in the
// view. With names not nil (a status of some fleets), only the NAME@HOST
// rows whose name is in names are added (none for an empty list). Rows stay sorted by name. now is the report's time
// (the age of each beat is counted to it).
func AddRemote(rep *Report, v peerview.Snapshot, names []string, now time.Time) {
	rep.Federation = v.Federation(now)
	// Declared rows first: a fleet fleets.toml puts on a peer.
	declared := map[string]bool{}
	for i := range rep.Fleets {
		row := &rep.Fleets[i]
		if row.Verdict != Remote {
			continue
		}
		hv := v.Host(row.Host)
		if hv == nil {
			continue
		}
		declared[row.Name+"@"+row.Host] = true
		*row = remoteRow(row.Name, hv, hv.Fleet(row.Name), now)
	}
	for i := range v.Hosts {
		hv := &v.Hosts[i]
		for _, fs := range hv.Fleets {
			name := fs.Name + "@" + hv.Host
			if declared[name] || names != nil && !slices.Contains(names, name) {
				continue
			}
			rep.Fleets = append(rep.Fleets, remoteRow(name, hv, &fs, now))
		}
	}
	sort.SliceStable(rep.Fleets, func(i, j int) bool { return rep.Fleets[i].Name < rep.Fleets[j].Name })
}

// remoteRow is the row of a peer's fleet (fs nil: the peer does not
// report it).
func remoteRow(name string, hv *peerview.HostView, fs *wire.FleetSummary, now time.Time) Fleet {
	row := Fleet{Name: name, Host: hv.Host, State: string(lifecycle.PhaseUnknown), MemberCount: -1, Members: []Member{}, Summary: map[Verdict]int{}}
	rf := peerview.FleetOf(hv, fs, now)
	row.Remote = rf
	if fs == nil {
		row.Verdict = Unknown
		row.Error = fmt.Sprintf("host %s does not report this fleet (host %s)", hv.Host, hostWords(hv, now))
		return row
	}
	row.Restarts, row.CrashLoop = fs.Restarts, fs.CrashLoop
	if hv.State != peerview.HostOnline {
		row.Verdict = Unknown
		row.Error = fmt.Sprintf("host %s %s; last reported %s", hv.Host, hostWords(hv, now), fs.State)
		return row
	}
	if slices.Contains(shownStates, fs.State) {
		row.State = fs.State
	}
	if fs.State == string(lifecycle.PhaseRunning) && fs.UptimeS > 0 {
		row.UptimeS = float64(fs.UptimeS) // as of the beat, plus the beat's age
		if rf.BeatAgeS != nil {
			row.UptimeS += float64(int64(*rf.BeatAgeS))
		}
	}
	if fs.VerdictsAgeS != nil {
		row.MemberCount = fs.Members
		for k, n := range fs.Verdicts {
			if n <= 0 {
				continue
			}
			v := Verdict(k)
			if !slices.Contains(knownVerdicts, v) {
				v = Unknown
			}
			row.Summary[v] += n
		}
	}
	return row
}

// hostWords says a peer's state for a row's error: "online", "expired
// (last beat 12s ago)", "offline since 16:04:05 (clean stop)",
// "never seen".
func hostWords(hv *peerview.HostView, now time.Time) string {
	switch hv.State {
	case peerview.HostOnline:
		return "online"
	case peerview.HostNeverSeen:
		return "never seen since this manager started"
	case peerview.HostOffline:
		return "offline since " + hv.LastSeen.Local().Format("15:04:05") + " (it stopped cleanly)"
	}
	return fmt.Sprintf("expired: no beat for %s (last seen %s)", fmtAge(*peerview.AgeOf(hv.LastSeen, now)), hv.LastSeen.Local().Format("15:04:05"))
}

// renderFederation writes the peers' lines under the table: one per host,
// "beta: online, 2 fleets, last beat 0.4s ago".
func renderFederation(w io.Writer, f *peerview.Federation) {
	if f == nil {
		return
	}
	conn := "connected"
	if !f.Connected {
		conn = "not connected"
		if f.Error != "" {
			conn += " (" + termtext.Cell(oneLine(f.Error)) + ")"
		}
	}
	fmt.Fprintf(w, "federation: this host is %s, %s; %d peer(s)\n", f.Host, conn, len(f.Hosts))
	for _, h := range f.Hosts {
		var parts []string
		parts = append(parts, h.State)
		parts = append(parts, fmt.Sprintf("%d fleet(s)", h.Fleets))
		if h.BeatAgeS != nil {
			parts = append(parts, "last beat "+fmtAge(*h.BeatAgeS)+" ago")
		}
		if c := h.Calls; c != nil {
			calls := fmt.Sprintf("%d call(s)", c.Calls)
			if c.RTTSamples > 0 {
				calls += fmt.Sprintf(", round trip p50 %s p99 %s (last %d)", fmtMS(c.RTTP50MS), fmtMS(c.RTTP99MS), c.RTTSamples)
			}
			if n := c.Calls - c.Answered; n > 0 {
				calls += fmt.Sprintf(", %d unanswered", n)
			}
			parts = append(parts, calls)
		}
		if h.Clock != "" {
			parts = append(parts, h.Clock)
		}
		fmt.Fprintf(w, "  %s: %s\n", h.Host, termtext.Cell(strings.Join(parts, ", ")))
	}
}

// Empty is the report of no local fleet (sampled nothing): what a status
// of only other hosts' fleets starts from.
func (c *Collector) Empty(interval time.Duration) *Report {
	if interval <= 0 {
		interval = c.opt.Interval
	}
	return &Report{SchemaVersion: SchemaVersion, GeneratedAt: time.Now().UTC(), Host: c.hostname, IntervalMS: interval.Milliseconds(),
		Via: c.opt.Via, Fleets: []Fleet{}}
}

// fmtMS formats milliseconds for the table: "0.84ms", "12ms", "1.3s".
func fmtMS(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.1fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.2fms", ms)
}
