package dashboard

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

// TestBrowserSummaryAndCompactTable (issue 24 item 17): the summary line
// counts the fleets and their members by verdict, naming failed fleets
// first; the compact table (?view=compact, or the toggle) shows ten
// fleets, one row each, failed first, all within one 1400×900 screen, and
// the toggle goes back to the cards.
func TestBrowserSummaryAndCompactTable(t *testing.T) {
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("f%02d", i+1)
	}
	w := newWorld(t, names...)
	for _, n := range names {
		if n != "f07" {
			w.run(n)
		}
		w.setMembers(n, members(status.Working, status.Working, status.Stalled, status.Idle, status.Blocked, status.Working, status.Idle, status.Working)...)
	}
	// f07 failed (a crash loop ended its restarts): not sampled, so its
	// members are not counted (9 fleets × 8 members).
	w.writeState(lifecycle.State{Name: "f07", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseFailed,
		LastError: "crash loop: 6 restarts within 5m0s"})
	opt := w.options()
	_, ts := w.serve(opt)
	p := newPageAt(t, ts.URL+"/?view=compact", 1400, 900)
	if _, err := p.WaitFor(`document.querySelectorAll('#compact-rows tr').length === 10 && document.querySelector('#summary').dataset.working === '36'`, 20*time.Second); err != nil {
		t.Fatalf("%v: %d rows, summary %q", err, js[int](t, p, `document.querySelectorAll('#compact-rows tr').length`), js[string](t, p, `document.querySelector('#summary').textContent`))
	}
	sum := js[string](t, p, `document.querySelector('#summary').textContent`)
	if !strings.HasPrefix(sum, "1 failed: f07 · 10 fleets, 9 running · 72 members: 36 working, 9 stalled, 9 blocked") {
		t.Errorf("summary %q", sum)
	}
	first := js[string](t, p, `document.querySelector('#compact-rows tr').dataset.fleet`)
	if first != "f07" {
		t.Errorf("the compact table starts with %s, want the failed f07", first)
	}
	// All ten rows on one 1400×900 screen, the cards hidden.
	fits := js[bool](t, p, `[...document.querySelectorAll('#compact-rows tr')].every((tr) => tr.getBoundingClientRect().bottom <= window.innerHeight) && window.innerHeight <= 900 && window.innerWidth <= 1400`)
	if !fits {
		t.Errorf("the ten rows do not fit one 1400×900 screen (last row's bottom %v, height %v)",
			js[float64](t, p, `[...document.querySelectorAll('#compact-rows tr')].pop().getBoundingClientRect().bottom`), js[float64](t, p, `window.innerHeight`))
	}
	if js[bool](t, p, `!document.getElementById('fleets').hidden`) {
		t.Error("the fleet cards show in compact mode")
	}
	png, err := p.Screenshot()
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("FLEETMGR_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dashboard-compact.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, "dashboard-compact.png"))
	// The toggle goes back to the cards, and the summary stays.
	js[bool](t, p, `(document.getElementById('view-toggle').click(), true)`)
	wait(t, p, `document.documentElement.dataset.view === 'cards' && !document.getElementById('fleets').hidden && document.getElementById('compact').hidden && document.querySelector('[data-fleet="f07"]').dataset.state === 'failed'`, 5*time.Second)
	clean(t, p, ts.URL)
}

// newPageAt opens url in a new tab of the shared browser with a viewport
// of w×h and waits until the page is live.
func newPageAt(t *testing.T, url string, w, h int64) *browsertest.Page {
	t.Helper()
	p := browsertest.Shared(t).NewPage(t)
	if err := chromedp.Do(p.Ctx, chromedp.EmulateViewport(w, h)); err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(url); err != nil {
		t.Fatal(err)
	}
	wait(t, p, `document.documentElement.dataset.live === 'true'`, 10*time.Second)
	return p
}
