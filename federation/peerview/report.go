package peerview

import (
	"time"

	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Snapshot is this manager's federation as its serve knows it at one
// moment: what the proxy hands to status (status.AddRemote) and to
// fleetmgr_list, and what every report of other hosts' fleets is made
// from. The runtime (federation.Federation) gives Hosts and the
// connection; the proxy adds its calls.
type Snapshot struct {
	// Self is this manager's host id ([federation] host).
	Self string
	// Connected is true while the broker connection is up; Error is the
	// last connection or provisioning failure.
	Connected bool
	Error     string
	// Hosts is the union view (federation.Federation.View): every peer
	// heard from and every trusted peer, sorted by host, Self excluded.
	Hosts []HostView
	// Calls are this manager's calls to each peer's fleets, by host; a
	// host without an entry was not called.
	Calls map[string]Calls
}

// Federation is a report's "federation" object (status --json, list):
// this manager's place among the managers sharing a broker
// (docs/FEDERATION.md) and what it last heard of each peer. JSON as in
// docs/status-schema.json's "federation".
type Federation struct {
	// Host is this manager's host id ([federation] host).
	Host string `json:"host"`
	// Connected is true while the broker connection is up.
	Connected bool `json:"connected"`
	// Error is the last connection or provisioning failure.
	Error string `json:"error,omitempty"`
	// Hosts are the peers heard from and the trusted ones, sorted by
	// host; never null.
	Hosts []Host `json:"hosts"`
}

// Host is one peer as presence shows it, in a Federation.
type Host struct {
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
	Calls *Calls `json:"calls,omitempty"`
	// ClockSkewMS is how far the peer's clock is ahead of this host's
	// (negative: behind), measured from its beats; absent when within a
	// second or never measured.
	ClockSkewMS int64 `json:"clock_skew_ms,omitempty"`
	// Clock says it ("beta's clock is 10m0s ahead: its requests are
	// refused …", federation.SkewWords); absent when within a second.
	Clock string `json:"clock,omitempty"`
}

// Calls are the tool calls one manager sent to one peer's fleets
// (NAME@HOST through the federation) since its serve started.
type Calls struct {
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

// Fleet is the "remote" object of a row of another host's fleet, in
// status --json and in list --json: where and when the fleet was seen.
// The row's other fields are what that host's presence said: state,
// uptime, restarts, crash loop, member count and verdict counts (those
// are the host's own last status report of the fleet, VerdictsAgeS old
// when it was sent, not a sampling per beat).
type Fleet struct {
	// HostState is the host's state (Host.State). Unless it is online,
	// the row is UNKNOWN and its state unknown: the fleet is kept as last
	// reported, never dropped.
	HostState string `json:"host_state"`
	// LastSeen and BeatAgeS are the host's last beat, as in Host.
	LastSeen time.Time `json:"last_seen,omitzero"`
	BeatAgeS *float64  `json:"beat_age_s,omitempty"`
	// ReportedState is the fleet's state as the host last reported it
	// (any word a newer peer may use; the row's state is it when known
	// here).
	ReportedState string `json:"reported_state"`
	// VerdictsAgeS is the age of the member and verdict counts when the
	// host sent them; absent when it had none for the fleet's current run.
	VerdictsAgeS *int64 `json:"verdicts_age_s,omitempty"`
	// Catalogue is the SHA-256 of the fleet's tool catalogue there.
	Catalogue string `json:"catalogue,omitempty"`
}

// Federation is s's "federation" object; now is the report's time (the
// age of each beat is counted to it).
func (s Snapshot) Federation(now time.Time) *Federation {
	fed := &Federation{Host: s.Self, Connected: s.Connected, Error: s.Error, Hosts: []Host{}}
	for i := range s.Hosts {
		hv := &s.Hosts[i]
		h := Host{Host: hv.Host, State: string(hv.State), HeartbeatMS: hv.Heartbeat.Milliseconds(), Fleets: len(hv.Fleets), Truncated: hv.Truncated}
		if !hv.LastSeen.IsZero() {
			h.LastSeen, h.BeatAgeS = hv.LastSeen.UTC(), AgeOf(hv.LastSeen, now)
		}
		if c, ok := s.Calls[hv.Host]; ok {
			h.Calls = &c
		}
		if hv.ClockNote != "" {
			h.ClockSkewMS, h.Clock = hv.Skew.Milliseconds(), hv.ClockNote
		}
		fed.Hosts = append(fed.Hosts, h)
	}
	return fed
}

// Host is the view of host, nil when it is not in s.
func (s Snapshot) Host(host string) *HostView {
	for i := range s.Hosts {
		if s.Hosts[i].Host == host {
			return &s.Hosts[i]
		}
	}
	return nil
}

// Fleet is hv's summary of fleet name, nil when it reports none.
func (hv *HostView) Fleet(name string) *wire.FleetSummary {
	for i := range hv.Fleets {
		if hv.Fleets[i].Name == name {
			return &hv.Fleets[i]
		}
	}
	return nil
}

// FleetOf is the "remote" object of fs, a fleet hv reports (fs nil: hv
// does not report it), as of now.
func FleetOf(hv *HostView, fs *wire.FleetSummary, now time.Time) *Fleet {
	f := &Fleet{HostState: string(hv.State)}
	if !hv.LastSeen.IsZero() {
		f.LastSeen, f.BeatAgeS = hv.LastSeen.UTC(), AgeOf(hv.LastSeen, now)
	}
	if fs != nil {
		f.ReportedState, f.VerdictsAgeS, f.Catalogue = fs.State, fs.VerdictsAgeS, fs.Catalogue
	}
	return f
}

// AgeOf is the seconds from t to now, to 0.1 s, never negative.
func AgeOf(t, now time.Time) *float64 {
	a := float64(max(0, now.Sub(t))/(100*time.Millisecond)) / 10
	return &a
}
