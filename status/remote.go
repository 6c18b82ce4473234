package status

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// Federation is a Report's "federation" object: this manager's place
// among the managers sharing a broker (docs/FEDERATION.md) and what it
// last heard of each peer. Present only in a report of a fleetmgr serve
// that federates.
type Federation struct {
	// Host is this manager's host id ([federation] host).
	Host string `json:"host"`
	// Connected is true while the broker connection is up.
	Connected bool `json:"connected"`
	// Error is the last connection or provisioning failure.
	Error string `json:"error,omitempty"`
	// Hosts are the peers heard from and the trusted ones, sorted by
	// host; never null.
	Hosts []RemoteHost `json:"hosts"`
}

// RemoteHost is one peer as presence shows it.
type RemoteHost struct {
	// Host is the peer's host id.
	Host string `json:"host"`
	// State is online (a beat within 3 of its heartbeats), expired (3
	// beats missed: killed, partitioned, stuck), offline (it announced a
	// clean stop) or never-seen (trusted, silent since this manager
	// started). Counted on this manager's clock.
	State string `json:"state"`
	// LastSeen is when its last presence (or offline) arrived here (UTC);
	// absent when never.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// BeatAgeS is the seconds since then; absent when never.
	BeatAgeS *float64 `json:"beat_age_s,omitempty"`
	// HeartbeatMS is the peer's announced heartbeat.
	HeartbeatMS int64 `json:"heartbeat_ms,omitempty"`
	// Fleets counts the fleets it last reported.
	Fleets int `json:"fleets"`
	// Truncated counts fleets it left out of its presence (past 256).
	Truncated int `json:"truncated,omitempty"`
	// Calls are this manager's tool calls to the peer's fleets since its
	// serve started, with their round-trip times; absent when none.
	Calls *RemoteCalls `json:"calls,omitempty"`
	// ClockSkewMS is how far the peer's clock is ahead of this host's
	// (negative: behind), measured from its beats; absent when within a
	// second or never measured.
	ClockSkewMS int64 `json:"clock_skew_ms,omitempty"`
	// Clock says it ("beta's clock is 10m0s ahead: its requests are
	// refused …", federation.SkewWords); absent when within a second.
	Clock string `json:"clock,omitempty"`
}

// RemoteCalls are the tool calls one manager sent to one peer's fleets
// (NAME@HOST through the federation) since its serve started.
type RemoteCalls struct {
	// Calls is how many calls were sent to the host.
	Calls uint64 `json:"calls"`
	// Answered is how many got an answer (a result, a tool error or a
	// JSON-RPC error of the remote fleet's); the others were refused,
	// timed out, lost with the host or cancelled.
	Answered uint64 `json:"answered"`
	// RTTLastMS is the round trip of the last answered call in
	// milliseconds: from sending the signed call request to its reply,
	// the remote fleet's own time included.
	RTTLastMS float64 `json:"rtt_last_ms"`
	// RTTP50MS and RTTP99MS are the median and 99th percentile of the
	// round trips of the last RTTSamples answered calls.
	RTTP50MS float64 `json:"rtt_p50_ms"`
	RTTP99MS float64 `json:"rtt_p99_ms"`
	// RTTSamples is how many round trips the percentiles are over (the
	// last 256 at most).
	RTTSamples int `json:"rtt_samples"`
	// LastCall is when the last call was sent (UTC).
	LastCall time.Time `json:"last_call"`
}

// RemoteFleet is a Fleet row's "remote" object: where a fleet of another
// host was seen. The row's other fields are what that host's presence
// said: state, uptime, restarts, crash loop, member count and verdict
// counts (Summary; those are the host's own last status report of the
// fleet, VerdictsAgeS old when it was sent, not a sampling per beat).
type RemoteFleet struct {
	// HostState is the host's state (RemoteHost.State). Unless it is
	// online, the row is UNKNOWN and its state unknown: the fleet is kept
	// as last reported, never dropped.
	HostState string `json:"host_state"`
	// LastSeen and BeatAgeS are the host's last beat, as in RemoteHost.
	LastSeen time.Time `json:"last_seen,omitzero"`
	BeatAgeS *float64  `json:"beat_age_s,omitempty"`
	// ReportedState is the fleet's state as the host last reported it
	// (any word a newer peer may use; State is it when known here).
	ReportedState string `json:"reported_state"`
	// VerdictsAgeS is the age of the member and verdict counts when the
	// host sent them; absent when it had none for the fleet's current run.
	VerdictsAgeS *int64 `json:"verdicts_age_s,omitempty"`
	// Catalogue is the SHA-256 of the fleet's tool catalogue there.
	Catalogue string `json:"catalogue,omitempty"`
}

// RemoteView is what AddRemote shows: this manager's federation as the
// serve daemon knows it.
type RemoteView struct {
	// Self is this manager's host id.
	Self string
	// Status is the broker connection's state.
	Status federation.Status
	// Hosts is the union view (federation.Federation.View).
	Hosts []federation.HostView
	// Calls are this manager's calls to each peer's fleets, by host
	// (proxy.Proxy.RemoteCalls); a host without an entry was not called.
	Calls map[string]RemoteCalls
}

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
func AddRemote(rep *Report, v RemoteView, names []string, now time.Time) {
	fed := &Federation{Host: v.Self, Connected: v.Status.Connected, Error: v.Status.LastError, Hosts: []RemoteHost{}}
	byHost := map[string]*federation.HostView{}
	for i := range v.Hosts {
		hv := &v.Hosts[i]
		byHost[hv.Host] = hv
		rh := RemoteHost{Host: hv.Host, State: string(hv.State), HeartbeatMS: hv.Heartbeat.Milliseconds(), Fleets: len(hv.Fleets), Truncated: hv.Truncated}
		if !hv.LastSeen.IsZero() {
			rh.LastSeen, rh.BeatAgeS = hv.LastSeen.UTC(), ageOf(hv.LastSeen, now)
		}
		if c, ok := v.Calls[hv.Host]; ok {
			rh.Calls = &c
		}
		if hv.ClockNote != "" {
			rh.ClockSkewMS, rh.Clock = hv.Skew.Milliseconds(), hv.ClockNote
		}
		fed.Hosts = append(fed.Hosts, rh)
	}
	rep.Federation = fed
	// Declared rows first: a fleet fleets.toml puts on a peer.
	declared := map[string]bool{}
	for i := range rep.Fleets {
		row := &rep.Fleets[i]
		if row.Verdict != Remote {
			continue
		}
		hv := byHost[row.Host]
		if hv == nil {
			continue
		}
		declared[row.Name+"@"+row.Host] = true
		*row = remoteRow(row.Name, hv, findFleet(hv, row.Name), now)
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

// findFleet is hv's summary of fleet name, nil when it reports none.
func findFleet(hv *federation.HostView, name string) *wire.FleetSummary {
	for i := range hv.Fleets {
		if hv.Fleets[i].Name == name {
			return &hv.Fleets[i]
		}
	}
	return nil
}

// ageOf is the seconds from t to now, to 0.1 s, never negative.
func ageOf(t, now time.Time) *float64 {
	a := float64(max(0, now.Sub(t))/(100*time.Millisecond)) / 10
	return &a
}

// remoteRow is the row of a peer's fleet (fs nil: the peer does not
// report it).
func remoteRow(name string, hv *federation.HostView, fs *wire.FleetSummary, now time.Time) Fleet {
	row := Fleet{Name: name, Host: hv.Host, State: string(lifecycle.PhaseUnknown), MemberCount: -1, Members: []Member{}, Summary: map[Verdict]int{}}
	rf := &RemoteFleet{HostState: string(hv.State)}
	if !hv.LastSeen.IsZero() {
		rf.LastSeen, rf.BeatAgeS = hv.LastSeen.UTC(), ageOf(hv.LastSeen, now)
	}
	row.Remote = rf
	if fs == nil {
		row.Verdict = Unknown
		row.Error = fmt.Sprintf("host %s does not report this fleet (host %s)", hv.Host, hostWords(hv, now))
		return row
	}
	rf.ReportedState, rf.VerdictsAgeS, rf.Catalogue = fs.State, fs.VerdictsAgeS, fs.Catalogue
	row.Restarts, row.CrashLoop = fs.Restarts, fs.CrashLoop
	if hv.State != federation.HostOnline {
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
func hostWords(hv *federation.HostView, now time.Time) string {
	switch hv.State {
	case federation.HostOnline:
		return "online"
	case federation.HostNeverSeen:
		return "never seen since this manager started"
	case federation.HostOffline:
		return "offline since " + hv.LastSeen.Local().Format("15:04:05") + " (it stopped cleanly)"
	}
	return fmt.Sprintf("expired: no beat for %s (last seen %s)", fmtAge(*ageOf(hv.LastSeen, now)), hv.LastSeen.Local().Format("15:04:05"))
}

// renderFederation writes the peers' lines under the table: one per host,
// "beta: online, 2 fleets, last beat 0.4s ago".
func renderFederation(w io.Writer, f *Federation) {
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
