package proxy

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
)

// rttWindow is how many of a host's latest call round trips its
// percentiles are over.
const rttWindow = 256

// remoteStats keeps peerview.Calls per host.
type remoteStats struct {
	mu    sync.Mutex
	hosts map[string]*hostStats // guarded by mu
}

type hostStats struct {
	calls, answered uint64
	last            time.Duration
	lastCall        time.Time
	ring            []time.Duration // the last rttWindow round trips
	next            int
}

// observe records one call sent to host at sent; rtt > 0 when it was
// answered.
func (s *remoteStats) observe(host string, sent time.Time, rtt time.Duration, answered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = map[string]*hostStats{}
	}
	h := s.hosts[host]
	if h == nil {
		h = &hostStats{}
		s.hosts[host] = h
	}
	h.calls++
	h.lastCall = sent
	if !answered {
		return
	}
	h.answered++
	h.last = rtt
	if len(h.ring) < rttWindow {
		h.ring = append(h.ring, rtt)
	} else {
		h.ring[h.next] = rtt
		h.next = (h.next + 1) % rttWindow
	}
}

// snapshot returns the stats of every host called so far.
func (s *remoteStats) snapshot() map[string]peerview.Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]peerview.Calls, len(s.hosts))
	for host, h := range s.hosts {
		r := peerview.Calls{Calls: h.calls, Answered: h.answered, RTTLastMS: ms(h.last), RTTSamples: len(h.ring), LastCall: h.lastCall.UTC()}
		if len(h.ring) > 0 {
			sorted := slices.Clone(h.ring)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			r.RTTP50MS = ms(quantile(sorted, 0.50))
			r.RTTP99MS = ms(quantile(sorted, 0.99))
		}
		out[host] = r
	}
	return out
}

// quantile is the nearest-rank q-quantile of sorted (not empty).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RemoteCalls returns, per remote host called since serve started, the
// calls sent and their round-trip times (empty without federation).
func (p *Proxy) RemoteCalls() map[string]peerview.Calls {
	if p.remote == nil {
		return map[string]peerview.Calls{}
	}
	return p.remote.stats.snapshot()
}
