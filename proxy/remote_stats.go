package proxy

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// rttWindow is how many of a host's latest call round trips its
// percentiles are over.
const rttWindow = 256

// RemoteCallStats are this manager's calls to one remote host's fleets
// since serve started, for `fleetmgr status` (docs/status-schema.json,
// a remote host's "calls").
type RemoteCallStats struct {
	// Calls is how many calls were sent to the host.
	Calls uint64 `json:"calls"`
	// Answered is how many of them got an answer (a result, a tool error
	// or a JSON-RPC error of the remote fleet's); the others were
	// refused, timed out, lost with the host or cancelled.
	Answered uint64 `json:"answered"`
	// RTTLastMS is the round trip of the last answered call, in
	// milliseconds: from sending the call to its answer, the remote
	// fleet's own time included.
	RTTLastMS float64 `json:"rtt_last_ms"`
	// RTTP50MS and RTTP99MS are the median and 99th percentile of the
	// round trips of the last RTTSamples answered calls.
	RTTP50MS float64 `json:"rtt_p50_ms"`
	RTTP99MS float64 `json:"rtt_p99_ms"`
	// RTTSamples is how many round trips the percentiles are over (at
	// most 256).
	RTTSamples int `json:"rtt_samples"`
	// LastCall is when the last call was sent.
	LastCall time.Time `json:"last_call"`
}

// remoteStats keeps RemoteCallStats per host.
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
func (s *remoteStats) snapshot() map[string]RemoteCallStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]RemoteCallStats, len(s.hosts))
	for host, h := range s.hosts {
		r := RemoteCallStats{Calls: h.calls, Answered: h.answered, RTTLastMS: ms(h.last), RTTSamples: len(h.ring), LastCall: h.lastCall.UTC()}
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
func (p *Proxy) RemoteCalls() map[string]RemoteCallStats {
	if p.remote == nil {
		return map[string]RemoteCallStats{}
	}
	return p.remote.stats.snapshot()
}
