package federation

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Source gives the local fleets a heartbeat announces. It is called once
// per heartbeat with a context bounded by the heartbeat interval; it
// should answer from memory (the supervisor's and status collector's
// last knowledge), not probe. The summaries are sorted by name and cut to
// wire.MaxFleets by the caller; invalid entries are left out and logged.
type Source interface {
	LocalFleets(ctx context.Context) []wire.FleetSummary
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) []wire.FleetSummary

// LocalFleets calls f.
func (f SourceFunc) LocalFleets(ctx context.Context) []wire.FleetSummary { return f(ctx) }

// ExpiryBeats is how many heartbeats of a host may be missed before it is
// shown offline, counted on the receiver's clock.
const ExpiryBeats = 3

// HostState is a peer's state in the union view (peerview.HostState).
type HostState = peerview.HostState

// The host states (peerview.HostOnline …).
const (
	HostOnline    = peerview.HostOnline
	HostExpired   = peerview.HostExpired
	HostOffline   = peerview.HostOffline
	HostNeverSeen = peerview.HostNeverSeen
)

// HostView is one peer in the union view (peerview.HostView: the one view
// type that status, the proxy and the CLI read).
type HostView = peerview.HostView

// skewSamples is how many recent beats the skew is measured over.
const skewSamples = 8

// SkewWords says a peer's clock offset for status, check and the page:
// "beta's clock is 10m0s ahead: its requests are refused (30s allowed)",
// "beta's clock is 2.1s behind", or "" when it is within a second.
func SkewWords(host string, skew, allowed time.Duration) string {
	d, dir := skew, "ahead"
	if d < 0 {
		d, dir = -d, "behind"
	}
	if d < time.Second {
		return ""
	}
	s := fmt.Sprintf("%s's clock is %s %s", host, roundSkew(d), dir)
	if d > allowed {
		s += fmt.Sprintf(": its requests are refused, and so are this host's to it (%s allowed); set both clocks right (NTP)", allowed)
	}
	return s
}

func roundSkew(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// hostEntry is the view's record of one peer.
type hostEntry struct {
	lastSeen  time.Time // receiver clock (monotonic)
	issued    time.Time // sender's issued of the last applied message
	started   time.Time
	heartbeat time.Duration
	fleets    []wire.FleetSummary
	truncated int
	offline   bool // announced offline after the last presence
	online    bool // as of the last sweep (for transitions)
	skews     [skewSamples]time.Duration
	nskew     int // samples taken (the ring's next slot is nskew % skewSamples)
}

// skew is e's measured clock offset: the largest recent sample.
func (e *hostEntry) skew() time.Duration {
	n := min(e.nskew, skewSamples)
	if n == 0 {
		return 0
	}
	m := e.skews[0]
	for _, s := range e.skews[1:n] {
		m = max(m, s)
	}
	return m
}

// view is the union of the peers' presence.
type view struct {
	self    string
	trusted []string
	now     func() time.Time
	allowed time.Duration // the skew requests are allowed

	mu    sync.Mutex
	hosts map[string]*hostEntry
}

func newView(self string, trusted []string, now func() time.Time, allowed time.Duration) *view {
	return &view{self: self, trusted: trusted, now: now, allowed: allowed, hosts: map[string]*hostEntry{}}
}

// apply records a verified presence of host. It returns stale (and
// changes nothing) for a message older than what the view holds: issued
// earlier in the same run of the sender, or from an earlier run; and
// cameOnline when host was not shown online before it (new, expired,
// offline, never seen).
//
// skew is this beat's sample of the host's clock offset: issued minus its
// arrival on this manager's message clock.
func (v *view) apply(host string, issued time.Time, p *wire.Presence, skew time.Duration) (changed, stale, cameOnline bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	started := time.UnixMilli(p.StartedMS)
	e := v.hosts[host]
	if e == nil {
		e = &hostEntry{}
		v.hosts[host] = e
	} else if started.Before(e.started) || started.Equal(e.started) && !issued.After(e.issued) {
		return false, true, false
	}
	cameOnline = e.heartbeat == 0 || stateOf(e, now) != HostOnline
	changed = !e.online || e.offline || !sameFleets(e.fleets, p.Fleets) || e.truncated != p.Truncated
	e.lastSeen, e.issued, e.started = now, issued, started
	e.heartbeat = p.Heartbeat()
	e.fleets = append(e.fleets[:0:0], p.Fleets...)
	sort.Slice(e.fleets, func(i, j int) bool { return e.fleets[i].Name < e.fleets[j].Name })
	e.truncated = p.Truncated
	e.offline = false
	e.online = true
	before := e.skew()
	e.skews[e.nskew%skewSamples] = skew
	e.nskew++
	if (abs(before) > v.allowed) != (abs(e.skew()) > v.allowed) || e.nskew == 1 && abs(skew) > v.allowed {
		changed = true
	}
	return changed, false, cameOnline
}

// markOffline records host's clean stop, unless a newer presence arrived.
func (v *view) markOffline(host string, issued time.Time) (changed bool, stale bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.hosts[host]
	if e == nil {
		e = &hostEntry{}
		v.hosts[host] = e
	} else if issued.Before(e.issued) {
		return false, true
	}
	changed = !e.offline
	e.offline, e.online = true, false
	e.issued = issued
	e.lastSeen = v.now()
	return changed, false
}

// stateOf returns e's state at now.
func stateOf(e *hostEntry, now time.Time) HostState {
	switch {
	case e.offline:
		return HostOffline
	case e.heartbeat == 0:
		return HostNeverSeen
	case now.Sub(e.lastSeen) > ExpiryBeats*e.heartbeat:
		return HostExpired
	}
	return HostOnline
}

// sweep updates each entry's online flag and returns the hosts that went
// from online to not online since the last sweep, and the count online.
func (v *view) sweep() (expired []string, online int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	for h, e := range v.hosts {
		on := stateOf(e, now) == HostOnline
		if e.online && !on && !e.offline {
			expired = append(expired, h)
		}
		e.online = on
		if on {
			online++
		}
	}
	sort.Strings(expired)
	return expired, online
}

// snapshot returns the view: every host heard from and every trusted host
// (never-seen when silent), sorted by host, without this host.
func (v *view) snapshot() []HostView {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	out := make([]HostView, 0, len(v.hosts)+len(v.trusted))
	for h, e := range v.hosts {
		st := stateOf(e, now)
		sk := e.skew()
		out = append(out, HostView{Host: h, State: st, Online: st == HostOnline, LastSeen: e.lastSeen,
			Heartbeat: e.heartbeat, Started: e.started, Fleets: append([]wire.FleetSummary(nil), e.fleets...), Truncated: e.truncated,
			Skew: sk, SkewRefused: abs(sk) > v.allowed, ClockNote: SkewWords(h, sk, v.allowed)})
	}
	for _, h := range v.trusted {
		if _, ok := v.hosts[h]; !ok && h != v.self {
			out = append(out, HostView{Host: h, State: HostNeverSeen, Fleets: []wire.FleetSummary{}})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// skewOf returns host's measured clock offset and whether one was
// measured.
func (v *view) skewOf(host string) (time.Duration, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.hosts[host]
	if e == nil || e.nskew == 0 {
		return 0, false
	}
	return e.skew(), true
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// lastSeen returns host's entry time and state, for error messages.
func (v *view) lastSeen(host string) (time.Time, HostState) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.hosts[host]
	if e == nil {
		return time.Time{}, HostNeverSeen
	}
	return e.lastSeen, stateOf(e, v.now())
}

func sameFleets(a, b []wire.FleetSummary) bool {
	if len(a) != len(b) {
		return false
	}
	bm := make(map[string]*wire.FleetSummary, len(b))
	for i := range b {
		bm[b[i].Name] = &b[i]
	}
	for i := range a {
		o := bm[a[i].Name]
		if o == nil || !sameFleet(&a[i], o) {
			return false
		}
	}
	return true
}

func sameFleet(a, b *wire.FleetSummary) bool {
	if a.State != b.State || a.Restarts != b.Restarts || a.CrashLoop != b.CrashLoop || a.Members != b.Members ||
		a.Catalogue != b.Catalogue || len(a.Verdicts) != len(b.Verdicts) {
		return false
	}
	for k, n := range a.Verdicts {
		if b.Verdicts[k] != n {
			return false
		}
	}
	return true
}
