package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
	poll "github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestWarmUpIsTheOnlySamplingWithoutAPage: Run's one sampling before any
// page is open goes through Options.Warm (the daemon's reads no /proc:
// resources are read only while someone looks), Status is not called
// until a page opens, and that page's members come from the warm-up.
func TestWarmUpIsTheOnlySamplingWithoutAPage(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	w.setMembers("kb", members(status.Working, status.Idle)...)
	opt := w.options()
	warmed := 0
	opt.Warm = func(ctx context.Context, names []string) (*status.Report, error) {
		rep, err := w.Status(ctx, names)
		w.mu.Lock()
		warmed++
		w.samples-- // counted as a warm-up, not a Status call
		w.mu.Unlock()
		return rep, err
	}
	_, ts := w.serve(opt)
	counts := func() (int, int) { w.mu.Lock(); defer w.mu.Unlock(); return warmed, w.samples }
	poll.For(t, 5*time.Second, "the warm-up sampling", poll.Bool(func() bool { n, _ := counts(); return n == 1 }))
	poll.Never(t, 3*opt.SampleEvery, "a Status call with no page open", func() (bool, string) {
		n, s := counts()
		return n != 1 || s != 0, fmt.Sprintf("warm-ups %d, Status calls %d", n, s)
	})
	es := openSSE(t, ts.URL+"/events", nil)
	defer es.close()
	poll.For(t, 5*time.Second, "a Status call once a page is open", poll.Bool(func() bool { _, s := counts(); return s > 0 }))
	if n, _ := counts(); n != 1 {
		t.Errorf("%d warm-up samplings, want 1", n)
	}
}
