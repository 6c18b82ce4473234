package peerview

import (
	"testing"
	"time"
)

// TestRemoteStats: per host, calls sent and answered, the last round
// trip and nearest-rank percentiles over the last 256 answered calls.
func TestRemoteStats(t *testing.T) {
	var s CallStats
	now := time.Now()
	for i := 1; i <= 300; i++ {
		s.Observe("beta", now, time.Duration(i)*time.Millisecond, true)
	}
	s.Observe("beta", now, 0, false)
	s.Observe("gamma", now, 0, false)
	got := s.Snapshot()
	b := got["beta"]
	// The window holds 45..300 ms: p50 is the 128th of them (172 ms), p99 the 254th (298 ms).
	if b.Calls != 301 || b.Answered != 300 || b.RTTLastMS != 300 || b.RTTSamples != 256 || b.RTTP50MS != 172 || b.RTTP99MS != 298 {
		t.Fatalf("beta %+v", b)
	}
	if g := got["gamma"]; g.Calls != 1 || g.Answered != 0 || g.RTTSamples != 0 || g.RTTP50MS != 0 {
		t.Fatalf("gamma %+v", g)
	}
}
