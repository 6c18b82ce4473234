package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// TestBrowserGreysStaleSamples (issue 24 item 16): each fleet card shows
// its sample's age; once sampling stops (a status that cannot sample) and
// the sample is older than two sampling intervals the card is greyed
// (data-stale="true") and its age says stale; a new sample makes it fresh
// again, without a reload.
func TestBrowserGreysStaleSamples(t *testing.T) {
	w := newWorld(t, "kb")
	w.intervalMS = 400 // the reports' stated interval: stale past 800 ms
	w.run("kb")
	w.setMembers("kb", members(status.Working, status.Idle)...)
	_, ts, p := openPage(t, w, w.options())
	card := `document.querySelector('section.fleet[data-fleet="kb"]')`
	wait(t, p, card+`.querySelector('[data-member="m2"]')`, 5*time.Second)
	wait(t, p, card+`.dataset.stale === 'false' && /ago$/.test(`+card+`.querySelector('.f-sampled').textContent)`, 5*time.Second)
	js[bool](t, p, `window.__notReloaded = true`)

	w.mu.Lock()
	w.holdSamples = true
	w.mu.Unlock()
	wait(t, p, card+`.dataset.stale === 'true'`, 5*time.Second)
	if txt := js[string](t, p, card+`.querySelector('.f-sampled').textContent`); !containsAll(txt, "ago", "stale: older than two sampling intervals") {
		t.Errorf("sampled fact of a stale card: %q", txt)
	}
	if op := js[string](t, p, `getComputedStyle(`+card+`.querySelector('.members')).opacity`); op == "1" {
		t.Errorf("members of a stale card are not greyed (opacity %s)", op)
	}
	// The members stay shown, as last sampled: greyed, not dropped.
	if !js[bool](t, p, card+`.querySelector('[data-member="m2"]') !== null`) {
		t.Error("a stale card dropped its members")
	}

	w.mu.Lock()
	w.holdSamples = false
	w.mu.Unlock()
	wait(t, p, card+`.dataset.stale === 'false'`, 5*time.Second)
	if !js[bool](t, p, `window.__notReloaded === true`) {
		t.Error("the page reloaded")
	}
	clean(t, p, ts.URL)
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
