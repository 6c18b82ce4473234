package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

func TestMain(m *testing.M) {
	code := m.Run()
	browsertest.CloseShared()
	os.Exit(code)
}

// openPage serves a dashboard over w, opens it in a tab of the shared
// browser and waits until its event stream is live.
func openPage(t *testing.T, w *world, opt Options) (*Server, *httptest.Server, *browsertest.Page) {
	t.Helper()
	b := browsertest.Shared(t)
	s, ts := w.serve(opt)
	p := b.NewPage(t)
	if err := p.Navigate(ts.URL + "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitFor(`document.documentElement.dataset.live === 'true'`, 10*time.Second); err != nil {
		t.Fatalf("page not live: %v (problems: %v)", err, p.Problems())
	}
	return s, ts, p
}

// js evaluates expr in the page, failing t on error.
func js[T any](t *testing.T, p *browsertest.Page, expr string) T {
	t.Helper()
	v, err := browsertest.Eval[T](p, expr)
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wait waits for a condition in the page, failing t after timeout.
func wait(t *testing.T, p *browsertest.Page, cond string, timeout time.Duration) float64 {
	t.Helper()
	at, err := p.WaitFor(cond, timeout)
	if err != nil {
		t.Fatalf("%v (problems: %v)", err, p.Problems())
	}
	return at
}

// clean fails t when the page logged an error, threw, violated its CSP or
// had a failed request, or asked for anything outside origin.
func clean(t *testing.T, p *browsertest.Page, origin string) {
	t.Helper()
	if pr := p.Problems(); len(pr) > 0 {
		t.Errorf("page problems:\n%s", strings.Join(pr, "\n"))
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, origin+"/") {
			t.Errorf("request outside the page's origin: %s", u)
		}
	}
}

// fleetSel is a selector for a fleet's element (names in tests are plain).
func fleetSel(name string) string {
	return fmt.Sprintf(`document.querySelector('[data-fleet="%s"]')`, name)
}

func members(verdicts ...status.Verdict) []status.Member {
	var out []status.Member
	for i, v := range verdicts {
		m := status.Member{ID: fmt.Sprintf("m%d", i+1), PaneID: fmt.Sprintf("w1:p%d", i+2), Verdict: v, LiveStatus: "working", AgentStatus: "working"}
		switch v {
		case status.Working:
			m.Evidence = []string{"files", "output"}
			m.LastChangeAgeS = ptr(0.4)
		case status.Stalled:
			m.Reason = "claims busy, but no file change for 14m2s; output unchanged for 14m2s"
			m.LastChangeAgeS = ptr(842.0)
		case status.Blocked:
			m.Reason = "herdr agent_status blocked: waiting for a human"
			m.AgentStatus = "blocked"
		case status.Idle:
			m.Reason = "not busy (liveStatus idle, agent_status idle)"
			m.LiveStatus, m.AgentStatus = "idle", "idle"
		case status.Unknown:
			m.Reason = "pane w1:p9 gone"
		}
		out = append(out, m)
	}
	return out
}

// TestBrowserPageClean: the page loads with no console error, no CSP
// violation and no failed request, asks nothing of another origin, and
// carries the testing contract: data-fleet/data-state per fleet (the
// lifecycle word), data-member/data-verdict per member, verdicts in words;
// the log tail and a sparkline show; a remote fleet is dimmed, without
// actions.
func TestBrowserPageClean(t *testing.T) {
	w := newWorld(t, "docs", "kb", "far@far", "loop", "wait")
	w.run("kb")
	w.stop("docs")
	crash := "crash loop: 5 restarts within 5m0s, the last after fleetd exited with exit status 3; not restarting until `fleetmgr start loop` or `fleetmgr restart loop`"
	w.writeState(lifecycle.State{Name: "loop", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseFailed, Restarts: 5, LastExit: "exit status 3",
		LastError: crash, Supervision: lifecycle.Supervision{CrashLoop: true, LastRestartReason: "fleetd exited: exit status 3"}})
	w.writeState(lifecycle.State{Name: "wait", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRestarting, Restarts: 1,
		Supervision: lifecycle.Supervision{LastRestartReason: "health: 3 consecutive /healthz failures", NextRestartAt: time.Now().Add(40 * time.Second)}})
	due := time.Now().Add(40 * time.Second)
	w.mu.Lock()
	w.drift["kb"] = []string{"spawn: lacks properties c (offered by docs)"}
	w.mu.Unlock()
	w.setMembers("kb", members(status.Working, status.Stalled, status.Blocked, status.Idle, status.Unknown)...)
	w.appendLog("kb", "fleetd: listening on 127.0.0.1:21002", "fleetd: member m1 spawned")
	w.call("kb", "ok", 4*time.Millisecond)
	_, ts, p := openPage(t, w, w.options())

	wait(t, p, `document.querySelector('[data-member="m5"]')`, 5*time.Second)
	got := js[[][]string](t, p, `Array.from(document.querySelectorAll('[data-fleet]')).map(e => [e.dataset.fleet, e.dataset.state])`)
	want := [][]string{{"docs", "stopped"}, {"far", "remote"}, {"kb", "running"}, {"loop", "failed"}, {"wait", "restarting"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fleets %v, want %v (sorted by name)", got, want)
	}
	if states, err := browsertest.FleetStates(p); err != nil || fmt.Sprint(states) != "map[docs:stopped far:remote kb:running loop:failed wait:restarting]" {
		t.Errorf("FleetStates: %v %v", states, err)
	}
	// Supervision in words: the crash loop with its way out, the pending
	// restart's countdown, the drift.
	wait(t, p, fleetSel("loop")+".querySelector('.alerts').textContent.includes('crash loop: 5 restarts') && "+
		fleetSel("loop")+".querySelector('.alerts').textContent.includes('`fleetmgr restart loop`')", 5*time.Second)
	// Said once: the recorded sentence is shown as it is, under no second
	// "crash loop" label, in the alert and in the row (issue 24 item 8).
	if txt := js[string](t, p, fleetSel("loop")+".textContent"); strings.Count(strings.ToLower(txt), "crash loop") != strings.Count(strings.ToLower(txt), "crash loop: 5 restarts") {
		t.Errorf("the crash loop's sentence is nested under another label: %q", txt)
	} else if strings.Contains(txt, "(exit: ") {
		t.Errorf("the last exit is repeated after a restart reason that says it: %q", txt)
	}
	// The countdown, counted from the due time (the browser's start may
	// take some of it).
	wait(t, p, `/restarting in \d+(\.\d)?s \(reason: health: 3 consecutive/.test(`+fleetSel("wait")+`.querySelector('.alerts').textContent)`, 5*time.Second)
	var left float64
	cd := js[string](t, p, fleetSel("wait")+`.querySelector('.alerts').textContent`)
	if _, err := fmt.Sscanf(cd[strings.Index(cd, "restarting in ")+len("restarting in "):], "%fs", &left); err != nil {
		t.Fatalf("countdown %q: %v", cd, err)
	}
	if max := time.Until(due).Seconds() + 1.5; left > max || left < max-4 {
		t.Errorf("countdown %q: %.1f s left, want about %.1f", cd, left, max-1.5)
	}
	wait(t, p, fleetSel("kb")+`.querySelector('.drift-list').textContent === 'spawn: lacks properties c (offered by docs)'`, 5*time.Second)
	if v, err := browsertest.MemberVerdicts(p, "kb"); err != nil || fmt.Sprint(v) != "map[m1:WORKING m2:STALLED m3:BLOCKED m4:IDLE m5:UNKNOWN]" {
		t.Errorf("MemberVerdicts: %v %v", v, err)
	}
	ms := js[[][]string](t, p, `Array.from(document.querySelectorAll('[data-fleet="kb"] [data-member]')).map(e => [e.dataset.member, e.dataset.verdict, e.querySelector('.badge').textContent])`)
	wantM := [][]string{{"m1", "WORKING", "WORKING"}, {"m2", "STALLED", "STALLED 14m"}, {"m3", "BLOCKED", "BLOCKED"},
		{"m4", "IDLE", "IDLE"}, {"m5", "UNKNOWN", "UNKNOWN"}}
	if len(ms) != len(wantM) {
		t.Fatalf("members %v", ms)
	}
	for i := range wantM {
		if ms[i][0] != wantM[i][0] || ms[i][1] != wantM[i][1] || !strings.HasPrefix(ms[i][2], wantM[i][2]) {
			t.Errorf("member %d: %v, want %v", i, ms[i], wantM[i])
		}
	}
	if txt := js[string](t, p, fleetSel("kb")+`.querySelector('[data-member="m5"]').textContent`); !strings.Contains(txt, "pane w1:p9 gone") {
		t.Errorf("UNKNOWN member without its reason: %q", txt)
	}
	if !js[bool](t, p, fleetSel("far")+`.classList.contains('remote') && Array.from(`+fleetSel("far")+`.querySelectorAll('button')).every(b => b.disabled)`) {
		t.Error("remote fleet not dimmed or with actions")
	}
	wait(t, p, fleetSel("kb")+`.querySelector('.log-lines').textContent.includes('member m1 spawned')`, 5*time.Second)
	w.call("kb", "ok", 7*time.Millisecond)
	wait(t, p, fleetSel("kb")+`.querySelector('.spark-calls').getAttribute('points').split(' ').length >= 2`, 5*time.Second)
	// Every action has a name a screen reader says, and the dialog a title.
	if !js[bool](t, p, `Array.from(document.querySelectorAll('button')).every(b => (b.getAttribute('aria-label') || b.textContent).trim() !== '' || b.closest('dialog'))`) {
		t.Error("a button without an accessible name")
	}
	clean(t, p, ts.URL)
}

// TestBrowserLiveUpdates: without a reload, a fleetd killed with SIGKILL
// takes kb's data-state off running within 2 s (from the lifecycle rows,
// not a member sampling), back to running when it runs again, and a
// member's new verdict shows; the verdict timeline grows.
func TestBrowserLiveUpdates(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	w.run("kb")
	w.run("docs")
	w.setMembers("kb", members(status.Working, status.Idle)...)
	opt := w.options()
	opt.StateEvery = 0 // the default, as serve runs it
	_, ts, p := openPage(t, w, opt)
	wait(t, p, fleetSel("kb")+`.querySelector('[data-member="m2"]')`, 5*time.Second)
	js[bool](t, p, `window.__notReloaded = true`)

	t0 := time.Now()
	w.kill9("kb")
	at, err := p.WaitFleetStateNot("kb", "running", 2*time.Second)
	if err != nil {
		t.Fatalf("kill -9: %v (problems: %v)", err, p.Problems())
	}
	t.Logf("kill -9 → data-state %s after %.0f ms", js[string](t, p, fleetSel("kb")+`.dataset.state`), at-float64(t0.UnixMilli()))
	if st := js[string](t, p, fleetSel("kb")+`.dataset.state`); st != string(w.state("kb").Shown.Phase) {
		t.Errorf("page says %s, lifecycle says %s", st, w.state("kb").Shown.Phase)
	}
	w.run("kb")
	if _, err := p.WaitFleetState("kb", "running", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	wait(t, p, fleetSel("kb")+`.querySelector('[data-member="m1"]')`, 5*time.Second)
	w.setMembers("kb", members(status.Stalled, status.Idle)...)
	wait(t, p, fleetSel("kb")+`.querySelector('[data-member="m1"]').dataset.verdict === 'STALLED'`, 5*time.Second)
	wait(t, p, fleetSel("kb")+`.querySelector('[data-member="m1"] svg').querySelectorAll('rect').length >= 3`, 5*time.Second)
	if !js[bool](t, p, `window.__notReloaded === true`) {
		t.Error("the page reloaded")
	}
	// The timelines are the server's: a reload shows the same history.
	before := js[string](t, p, fleetSel("kb")+`.querySelector('[data-member="m2"] svg').getAttribute('aria-label')`)
	clean(t, p, ts.URL)
	if err := p.Navigate(ts.URL + "/"); err != nil {
		t.Fatal(err)
	}
	wait(t, p, fleetSel("kb")+`.querySelector('[data-member="m2"] svg rect')`, 5*time.Second)
	after := js[string](t, p, fleetSel("kb")+`.querySelector('[data-member="m2"] svg').getAttribute('aria-label')`)
	if n0, n1 := sampleCount(before), sampleCount(after); n1 < n0 || n0 < 3 {
		t.Errorf("timeline before reload %q, after %q", before, after)
	}
	clean(t, p, ts.URL)
}

// sampleCount reads N from a timeline's label "last N samples, …".
func sampleCount(label string) int {
	var n int
	fmt.Sscanf(label, "last %d samples", &n)
	return n
}

// TestBrowserShowsPayloadsAsText: member names, reasons, errors, drift
// sentences, restart reasons and log lines holding markup are shown as
// text: no element is made from them, no script runs (the flag the
// payloads would set stays unset), no request goes to their URLs.
func TestBrowserShowsPayloadsAsText(t *testing.T) {
	img := `<img src=x onerror="window.__pwned=1">`
	scr := `</script><script>window.__pwned=2</script>`
	svg := `<svg onload="window.__pwned=3"><a href="javascript:window.__pwned=4">x</a></svg>`
	w := newWorld(t, "kb")
	w.run("kb")
	st := *w.state("kb")
	st.Restarts, st.LastRestartReason = 1, "fleetd exited: "+img
	w.writeState(st)
	w.mu.Lock()
	w.drift["kb"] = []string{scr + ": lacks properties " + img}
	w.mu.Unlock()
	w.setMembers("kb",
		status.Member{ID: img, Verdict: status.Stalled, Reason: scr, LastChangeAgeS: ptr(60.0)},
		status.Member{ID: scr, Verdict: status.Unknown, Reason: svg, PaneID: img},
		status.Member{ID: svg, Verdict: status.Working, Evidence: []string{"files"}})
	w.appendLog("kb", img, scr, svg)
	_, ts, p := openPage(t, w, w.options())
	wait(t, p, `document.querySelectorAll('[data-fleet="kb"] [data-member]').length === 3`, 5*time.Second)
	wait(t, p, fleetSel("kb")+`.querySelector('.log-lines').textContent.includes('onload')`, 5*time.Second)
	for _, payload := range []string{img, scr, svg} {
		q := strconv.Quote(payload)
		if !js[bool](t, p, fmt.Sprintf(`Array.from(document.querySelectorAll('[data-member]')).some(e => e.dataset.member === %s && e.querySelector('.m-id').textContent === %s)`, q, q)) {
			t.Errorf("member %s not shown as its own text", payload)
		}
		if !js[bool](t, p, fmt.Sprintf(`%s.querySelector('.log-lines').textContent.split('\n').includes(%s)`, fleetSel("kb"), q)) {
			t.Errorf("log line %s not shown as text", payload)
		}
	}
	if !js[bool](t, p, fleetSel("kb")+`.textContent.includes('fleetd exited: `+strings.ReplaceAll(img, `"`, `\"`)+`')`) {
		t.Error("restart reason not shown as text")
	}
	if n := js[int](t, p, `document.querySelectorAll('main img, main script, main iframe, main a, main object, main svg svg').length`); n != 0 {
		t.Errorf("%d elements made from fleet data", n)
	}
	if v := js[string](t, p, `typeof window.__pwned`); v != "undefined" {
		t.Errorf("a payload ran: window.__pwned is %s", v)
	}
	clean(t, p, ts.URL)
}

// TestBrowserActionsByKeyboard: Stop on docs is reached and confirmed with
// the keyboard only (Enter opens the dialog with Cancel focused, Escape
// cancels and nothing is done, Tab + Enter confirms); docs turns stopped
// and the result is shown. A start with its lead goes through the same
// dialog.
func TestBrowserActionsByKeyboard(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	w.run("kb")
	w.run("docs")
	_, ts, p := openPage(t, w, w.options())
	stop := fleetSel("docs") + `.querySelector('button[data-verb="stop"]')`
	if l := js[string](t, p, stop+`.getAttribute('aria-label')`); l != "Stop fleet docs" {
		t.Errorf("stop button label %q", l)
	}
	keys := func(k string) {
		t.Helper()
		if err := chromedp.Do(p.Ctx, chromedp.KeyEvent(k)); err != nil {
			t.Fatal(err)
		}
	}
	js[bool](t, p, stop+`.focus() || true`)
	keys(kb.Enter)
	wait(t, p, `document.getElementById('confirm').open && document.activeElement.id === 'confirm-cancel'`, 5*time.Second)
	if title := js[string](t, p, `document.getElementById('confirm-title').textContent`); title != "Stop fleet docs?" {
		t.Errorf("dialog title %q", title)
	}
	keys(kb.Escape)
	wait(t, p, `!document.getElementById('confirm').open`, 5*time.Second)
	if a := w.actionsDone(); len(a) != 0 {
		t.Fatalf("a cancelled dialog ran %v", a)
	}
	js[bool](t, p, stop+`.focus() || true`)
	keys(kb.Enter)
	wait(t, p, `document.getElementById('confirm').open && document.activeElement.id === 'confirm-cancel'`, 5*time.Second)
	keys(kb.Tab)
	wait(t, p, `document.activeElement.id === 'confirm-ok'`, 5*time.Second)
	keys(kb.Enter)
	wait(t, p, fleetSel("docs")+`.dataset.state === 'stopped'`, 5*time.Second)
	wait(t, p, `document.getElementById('result').textContent.startsWith('stop docs: done')`, 5*time.Second)
	if a := w.actionsDone(); len(a) != 1 || a[0] != (Action{Verb: VerbStop, Fleet: "docs"}) {
		t.Fatalf("actions %v", a)
	}
	if st := w.state("docs"); st.Shown.Phase != lifecycle.PhaseStopped {
		t.Fatalf("docs is %s", st.Shown.Phase)
	}
	// Start with its lead, by clicks this time.
	if err := chromedp.Do(p.Ctx,
		chromedp.Click(chromedp.CSS(`[data-fleet="docs"] button[data-verb="start"]`)),
		chromedp.WaitVisible(chromedp.ID("confirm-lead")),
		chromedp.Click(chromedp.ID("confirm-lead")),
		chromedp.Click(chromedp.ID("confirm-ok")),
	); err != nil {
		t.Fatal(err)
	}
	wait(t, p, fleetSel("docs")+`.dataset.state === 'running'`, 5*time.Second)
	if a := w.actionsDone(); len(a) != 2 || a[1] != (Action{Verb: VerbStart, Fleet: "docs", Lead: true}) {
		t.Fatalf("actions %v", a)
	}
	clean(t, p, ts.URL)
}

// attackerPage is a page of another origin that tries to act on the
// dashboard: a no-cors POST (a "simple" request the browser does send), a
// CORS POST with the JSON type and a made-up token (preflighted), a form
// POST into a frame, and a read of the page (for its token).
const attackerPage = `<!doctype html><html><body><iframe name="sink"></iframe><script>
const dash = %q;
const body = JSON.stringify({verb: 'stop', fleet: 'docs'});
const tries = [
  fetch(dash + '/api/action', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body}).then(() => 'sent', (e) => 'error'),
  fetch(dash + '/api/action', {method: 'POST', headers: {'Content-Type': 'application/json', 'X-Fleetmgr-Csrf': 'guess'}, body}).then(() => 'sent', (e) => 'blocked'),
  fetch(dash + '/', {mode: 'cors'}).then((r) => r.text()).then((t) => 'read ' + t.length, (e) => 'unreadable'),
  new Promise((resolve) => {
    const f = document.createElement('form');
    f.method = 'POST'; f.action = dash + '/api/action'; f.enctype = 'text/plain'; f.target = 'sink';
    const i = document.createElement('input');
    i.name = '{"verb":"stop","fleet":"docs","x":"'; i.value = '"}';
    f.appendChild(i); document.body.appendChild(f);
    document.querySelector('iframe').addEventListener('load', () => resolve('form posted'));
    f.submit();
  }),
];
Promise.all(tries).then((r) => { window.results = r; });
</script></body></html>`

// TestBrowserCrossOriginRefused: a page of another origin gets nothing
// done: every try is refused by the dashboard or stopped by the browser,
// and the page's token cannot be read.
func TestBrowserCrossOriginRefused(t *testing.T) {
	w := newWorld(t, "docs")
	w.run("docs")
	_, ts := w.serve(w.options())
	evil := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(rw, attackerPage, ts.URL)
	}))
	defer evil.Close()
	b := browsertest.Shared(t)
	p := b.NewPage(t)
	origin0, method0 := w.refusals("origin"), w.refusals("method")
	if err := p.Navigate(evil.URL + "/"); err != nil {
		t.Fatal(err)
	}
	wait(t, p, `window.results`, 10*time.Second)
	res := js[[]string](t, p, `window.results`)
	t.Logf("attacker's tries: %q", res)
	if res[2] != "unreadable" {
		t.Errorf("another origin read the page: %s", res[2])
	}
	if a := w.actionsDone(); len(a) != 0 {
		t.Fatalf("another origin ran %v", a)
	}
	if st := w.state("docs"); st.Shown.Phase != lifecycle.PhaseRunning {
		t.Fatalf("docs is %s", st.Shown.Phase)
	}
	// The no-cors POST and the form reached the dashboard and were refused
	// for their origin; the CORS POST's preflight (OPTIONS) for its method.
	if d := w.refusals("origin") - origin0; d < 2 {
		t.Errorf("origin refusals +%v, want the no-cors POST and the form", d)
	}
	if d := w.refusals("method") - method0; d < 1 {
		t.Errorf("method refusals +%v, want the preflight", d)
	}
}

// TestBrowserResumesAfterADrop: when the stream drops, the browser
// reconnects with Last-Event-ID and the page catches up on what changed
// meanwhile from the ring (no snapshot, no reload).
func TestBrowserResumesAfterADrop(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	w.run("kb")
	w.run("docs")
	s, ts, p := openPage(t, w, w.options())
	js[bool](t, p, `window.__notReloaded = true`)
	s.hub.mu.Lock()
	r0, s0 := s.hub.resumes, s.hub.snapshots
	s.hub.mu.Unlock()
	s.hub.closeAll() // every stream ends; the page's EventSource retries after 1 s
	w.stop("docs")
	wait(t, p, fleetSel("docs")+`.dataset.state === 'stopped'`, 10*time.Second)
	wait(t, p, `document.documentElement.dataset.live === 'true'`, 5*time.Second)
	s.hub.mu.Lock()
	r1, s1 := s.hub.resumes, s.hub.snapshots
	s.hub.mu.Unlock()
	if r1 != r0+1 || s1 != s0 {
		t.Errorf("resumes %d→%d, snapshots %d→%d: want one resume and no snapshot", r0, r1, s0, s1)
	}
	if !js[bool](t, p, `window.__notReloaded === true`) {
		t.Error("the page reloaded")
	}
	clean(t, p, ts.URL)
}

// TestBrowserNarrowAndZoomed: at 360 CSS px wide and at 200 % zoom (640
// CSS px at device scale 2) nothing overflows sideways and every action
// stays on screen; member rows stack.
func TestBrowserNarrowAndZoomed(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	w.run("kb")
	w.setMembers("kb", members(status.Working, status.Stalled, status.Unknown)...)
	w.appendLog("kb", strings.Repeat("a-very-long-log-line-without-spaces-", 20))
	_, ts, p := openPage(t, w, w.options())
	wait(t, p, `document.querySelector('[data-member="m3"]')`, 5*time.Second)
	for _, vp := range []struct {
		w, h  int64
		scale float64
	}{{360, 740, 1}, {640, 450, 2}} {
		if err := chromedp.Do(p.Ctx, chromedp.EmulateViewport(vp.w, vp.h, chromedp.EmulateScale(vp.scale))); err != nil {
			t.Fatal(err)
		}
		wait(t, p, fmt.Sprintf(`window.innerWidth === %d`, vp.w), 5*time.Second)
		if sw := js[int](t, p, `document.documentElement.scrollWidth`); sw > int(vp.w) {
			t.Errorf("%dpx @%gx: page %dpx wide", vp.w, vp.scale, sw)
		}
		if off := js[[]string](t, p, `Array.from(document.querySelectorAll('main button')).filter(b => { const r = b.getBoundingClientRect(); return r.left < 0 || r.right > window.innerWidth + 0.5 || r.width === 0; }).map(b => b.getAttribute('aria-label'))`); len(off) > 0 {
			t.Errorf("%dpx @%gx: buttons off screen: %v", vp.w, vp.scale, off)
		}
		if d := js[string](t, p, `getComputedStyle(document.querySelector('[data-member="m1"]')).display`); d != "block" {
			t.Errorf("%dpx: member rows display %s, want stacked blocks", vp.w, d)
		}
	}
	clean(t, p, ts.URL)
}

// TestBrowserScreenshot: two fleets, a STALLED and a WORKING member, with
// some history; the PNG goes to $FLEETMGR_SCREENSHOT_DIR/dashboard-world.png
// when set (docs/dashboard.png in the README is the one e2e's
// TestDashboardServe takes of a real serve, as dashboard.png).
func TestBrowserScreenshot(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	w.run("kb")
	w.run("docs")
	st := *w.state("kb")
	st.Restarts, st.LastRestartReason = 2, "fleetd exited: signal: killed"
	st.RestartTimes = []time.Time{time.Now().Add(-41 * time.Minute), time.Now().Add(-12 * time.Minute)}
	w.writeState(st)
	kbM := members(status.Working, status.Stalled, status.Working, status.Idle)
	docsM := []status.Member{
		{ID: "writer", PaneID: "w1:p2", Verdict: status.Working, Evidence: []string{"output"}, LastChangeAgeS: ptr(1.2), LiveStatus: "working"},
		{ID: "reviewer", PaneID: "w1:p3", Verdict: status.Blocked, Reason: "herdr agent_status blocked: waiting for a human", AgentStatus: "blocked"},
	}
	w.appendLog("kb", "2026-05-02T10:20:01Z INFO fleetd: listening on 127.0.0.1:21002",
		"2026-05-02T10:20:03Z INFO member m1 spawned in w1:p2", "2026-05-02T10:31:40Z INFO member m2 idle → working",
		"2026-05-02T10:33:12Z WARN member m2: no heartbeat for 60s")
	w.appendLog("docs", "2026-05-02T10:19:58Z INFO fleetd: listening on 127.0.0.1:21001", "2026-05-02T10:21:10Z INFO member writer spawned")
	opt := w.options()
	opt.SampleEvery, opt.CallsEvery = time.Hour, 5*time.Second // the history below is the picture's
	opt.Calls = nil
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.refreshRows(ctx)
	// History: 40 samplings, kb's m2 working until it stalled; a call
	// rate that varies.
	t0 := time.Now().Add(-40 * 5 * time.Second)
	for i := range 40 {
		w.setMembers("docs", docsM...)
		cur := slices.Clone(kbM)
		if i < 22 {
			cur[1] = members(status.Working, status.Working)[1]
		}
		if i%7 == 3 {
			cur[3].Verdict = status.Working
			cur[3].Evidence = []string{"files"}
		}
		w.setMembers("kb", cur...)
		rep, err := w.Status(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rep.GeneratedAt = t0.Add(time.Duration(i) * 5 * time.Second)
		s.hub.applyReport(rep, rep.GeneratedAt)
		for range (i*7)%11 + 2 {
			w.call("kb", "ok", time.Duration(2+i%5)*time.Millisecond)
		}
		w.call("docs", "ok", 9*time.Millisecond)
		counts, _ := PrometheusCalls(w.reg)()
		s.hub.applyCalls(counts, rep.GeneratedAt)
	}
	w.setMembers("kb", kbM...)
	ts := httptest.NewServer(s)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; ts.Close() }) // Run's end closes the streams Close waits for
	p := browsertest.Shared(t).NewPage(t)
	if err := chromedp.Do(p.Ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ts.URL + "/"); err != nil {
		t.Fatal(err)
	}
	wait(t, p, `document.documentElement.dataset.live === 'true' && document.querySelector('[data-member="m2"][data-verdict="STALLED"]') && document.querySelector('[data-member="writer"][data-verdict="WORKING"]')`, 10*time.Second)
	wait(t, p, fleetSel("kb")+`.querySelector('.log-lines').textContent.includes('heartbeat')`, 5*time.Second)
	png, err := p.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatal("screenshot is not a PNG")
	}
	dir := os.Getenv("FLEETMGR_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard-world.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	clean(t, p, ts.URL)
}

// TestBrowserFederation: when serve federates, the page lists the hosts
// (this one and its broker connection, each peer with its state and last
// beat, data-host and data-host-state) and shows the peers' fleets as
// NAME@HOST, dimmed and without actions, with the state and verdict counts
// their host reported; a host past expiry keeps its fleets, marked, with
// when it was last seen; a host going offline shows without a reload
// (from the rows, no member sampling).
func TestBrowserFederation(t *testing.T) {
	w := newWorld(t, "loc")
	w.run("loc")
	w.setMembers("loc", members(status.Working)...)
	age := int64(4)
	now := time.Now()
	view := func(gamma federation.HostState) *peerview.Snapshot {
		return &peerview.Snapshot{Self: "alpha", Connected: true, Hosts: []peerview.HostView{
			{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: now.Add(-time.Second), Heartbeat: 2 * time.Second,
				Fleets: []wire.FleetSummary{{Name: "kb", State: "running", UptimeS: 600, Restarts: 1, Members: 3,
					Verdicts: map[string]int{"WORKING": 2, "STALLED": 1}, VerdictsAgeS: &age}}},
			{Host: "gamma", State: gamma, LastSeen: now.Add(-30 * time.Second), Heartbeat: 2 * time.Second,
				Fleets: []wire.FleetSummary{{Name: "docs", State: "running", UptimeS: 60}}},
		}}
	}
	w.mu.Lock()
	w.fed = view(federation.HostExpired)
	w.mu.Unlock()
	changes := make(chan struct{}, 1)
	opt := w.options()
	opt.Changes, opt.SampleEvery, opt.SampleIdle = changes, time.Hour, time.Hour
	_, ts, p := openPage(t, w, opt)

	wait(t, p, `document.querySelector('#hosts:not([hidden]) li[data-host="beta"][data-host-state="online"]')`, 5*time.Second)
	hosts := js[[]string](t, p, `Array.from(document.querySelectorAll('#host-list li')).map(li => li.textContent)`)
	if len(hosts) != 3 || hosts[0] != "this host: alpha, connected to the broker" ||
		!strings.HasPrefix(hosts[1], "beta: online, 1 fleet, last seen ") || !strings.HasPrefix(hosts[2], "gamma: expired, 1 fleet, last seen 3") {
		t.Errorf("hosts %q", hosts)
	}
	if st, err := browsertest.FleetStates(p); err != nil || fmt.Sprint(st) != "map[docs@gamma:unknown kb@beta:running loc:running]" {
		t.Errorf("fleet states %v %v", st, err)
	}
	kb := fleetSel("kb@beta")
	if !js[bool](t, p, kb+`.classList.contains('remote') && `+kb+`.dataset.host === 'beta' && Array.from(`+kb+`.querySelectorAll('button')).every(b => b.disabled)`) {
		t.Error("kb@beta not dimmed, not on beta, or with actions")
	}
	if op := js[string](t, p, `getComputedStyle(`+kb+`).opacity`); op == "1" {
		t.Error("kb@beta is not dimmed")
	}
	if s := js[string](t, p, kb+`.querySelector('.fleet-summary').textContent`); s != "2 WORKING, 1 STALLED" {
		t.Errorf("kb@beta summary %q", s)
	}
	if s := js[string](t, p, kb+`.querySelector('.host-badge').textContent`); s != "on beta (online)" {
		t.Errorf("kb@beta host badge %q", s)
	}
	wait(t, p, fleetSel("docs@gamma")+`.querySelector('.alerts').textContent.includes('host gamma expired: kept as last reported (running)') && `+
		fleetSel("docs@gamma")+`.querySelector('.alerts').textContent.includes('host gamma: last seen 3')`, 5*time.Second)
	if !js[bool](t, p, fleetSel("loc")+`.dataset.host === 'local' && !`+fleetSel("loc")+`.classList.contains('remote') && !`+fleetSel("loc")+`.querySelector('button[data-verb="stop"]').disabled`) {
		t.Error("the local fleet is dimmed or without actions")
	}
	js[bool](t, p, `window.__notReloaded = true`)
	w.mu.Lock()
	w.fed = view(federation.HostOffline)
	n := w.samples
	w.mu.Unlock()
	changes <- struct{}{}
	wait(t, p, `document.querySelector('#host-list li[data-host="gamma"][data-host-state="offline"]') && `+
		fleetSel("docs@gamma")+`.querySelector('.alerts').textContent.includes('host gamma offline')`, 5*time.Second)
	if !js[bool](t, p, `window.__notReloaded === true`) {
		t.Error("the page reloaded")
	}
	if w.samplings() != n {
		t.Error("a host's change waited for a member sampling")
	}
	clean(t, p, ts.URL)
}
