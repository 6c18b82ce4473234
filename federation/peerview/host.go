package peerview

import (
	"time"

	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// HostState is a peer's state in the union view.
type HostState string

// The host states.
const (
	// HostOnline: a beat arrived within ExpiryBeats heartbeats.
	HostOnline HostState = "online"
	// HostExpired: ExpiryBeats heartbeats missed (killed, partitioned,
	// stuck); the fleets are the last reported and unknown now.
	HostExpired HostState = "expired"
	// HostOffline: the host announced a clean stop.
	HostOffline HostState = "offline"
	// HostNeverSeen: trusted, but no presence since this manager started.
	HostNeverSeen HostState = "never-seen"
)

// HostView is one peer in the union view.
type HostView struct {
	// Host is the peer's host id.
	Host string `json:"host"`
	// State is online, expired, offline or never-seen.
	State HostState `json:"state"`
	// Online is State == HostOnline.
	Online bool `json:"online"`
	// LastSeen is when the last presence (or offline message) of the host
	// arrived, on this manager's clock; zero when never.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Heartbeat is the host's announced heartbeat interval.
	Heartbeat time.Duration `json:"heartbeat_ns,omitempty"`
	// Started is when the host's federation started, as it says.
	Started time.Time `json:"started,omitzero"`
	// Fleets are the host's fleets as last reported, sorted by name. When
	// the host is not online they are kept (never silently dropped) and
	// their State is what it was: show them as unknown.
	Fleets []wire.FleetSummary `json:"fleets"`
	// Truncated is how many fleets the host left out of its presence.
	Truncated int `json:"truncated,omitempty"`
	// Skew is how far the host's clock is ahead of this manager's
	// (negative: behind), measured from its recent beats as the largest
	// of issued − arrival (the broker's delay only makes a sample
	// smaller); 0 when never measured.
	Skew time.Duration `json:"skew_ns,omitempty"`
	// SkewRefused: |Skew| is more than the skew requests are allowed
	// (federation.Config.ClockSkew), so requests between the two hosts are refused
	// at either end; SkewWords says it.
	SkewRefused bool `json:"skew_refused,omitempty"`
	// ClockNote is federation.SkewWords of the host's skew: "" when within a second.
	ClockNote string `json:"clock_note,omitempty"`
}
