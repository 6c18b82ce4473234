package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestDashboardEightTabs (issue 24 item 15): eight tabs of one browser on a
// real serve's page all load and go live (a browser allows six HTTP/1.1
// connections per host; each page used to hold two streams, so a fourth
// tab never loaded), all through the browser's one shared worker, each
// showing kb's log tail; a kill -9 of kb's fleetd is followed by every
// tab, without a reload, down and back to running.
func TestDashboardEightTabs(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.StartServe()
	e.MustRun("start", "kb")
	b := browsertest.Start(t) // a browser of its own: its six connections are this test's
	t.Cleanup(b.Close)
	pages := make([]*browsertest.Page, 8)
	for i := range pages {
		p := b.NewPage(t)
		pages[i] = p
		navErr := make(chan error, 1)
		go func() { navErr <- p.Navigate("http://" + e.Listen + "/") }()
		select {
		case err := <-navErr:
			if err != nil {
				t.Fatalf("tab %d: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("tab %d did not load within 30 s (connections per host exhausted?)", i+1)
		}
	}
	each := func(what, cond string, timeout time.Duration) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, len(pages))
		for i, p := range pages {
			wg.Go(func() {
				if _, err := p.WaitFor(cond, timeout); err != nil {
					errs[i] = fmt.Errorf("tab %d: %s: %v (problems: %v)", i+1, what, err, p.Problems())
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	each("live through the shared worker", `document.documentElement.dataset.live === 'true' && document.documentElement.dataset.transport === 'shared-worker'`, 30*time.Second)
	each("kb running", `document.querySelector('[data-fleet="kb"]')?.dataset.state === 'running'`, 20*time.Second)
	each("kb's log tail", `document.querySelector('[data-fleet="kb"] .log-lines')?.textContent.length > 0`, 20*time.Second)
	for _, p := range pages {
		pageEval[bool](t, p, `window.__notReloaded = true`)
	}
	old := readState(t, e, "kb").Fleetd.PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	each("kb no longer running after kill -9", `(document.querySelector('[data-fleet="kb"]') || {dataset: {}}).dataset.state !== 'running'`, 10*time.Second)
	each("kb running again", `document.querySelector('[data-fleet="kb"]')?.dataset.state === 'running' && window.__notReloaded === true`, 60*time.Second)
	if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID == old {
		t.Fatalf("kb after the restart: %+v", st)
	}
	for i, p := range pages {
		if probs := p.Problems(); len(probs) > 0 {
			t.Errorf("tab %d: %v", i+1, probs)
		}
	}
}
