package peerview

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

// CallStats keeps Calls per host: the round trips of this manager's
// calls to other hosts' fleets, for status's "calls" (Host.Calls). The
// zero value is ready to use; safe for concurrent use.
type CallStats struct {
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

// Observe records one call sent to host at sent; rtt > 0 when it was
// answered.
func (s *CallStats) Observe(host string, sent time.Time, rtt time.Duration, answered bool) {
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

// Snapshot returns the Calls of every host called so far (empty, not
// nil, before the first).
func (s *CallStats) Snapshot() map[string]Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Calls, len(s.hosts))
	for host, h := range s.hosts {
		r := Calls{Calls: h.calls, Answered: h.answered, RTTLastMS: ms(h.last), RTTSamples: len(h.ring), LastCall: h.lastCall.UTC()}
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
