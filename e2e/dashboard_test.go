package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// The dashboard against a real `fleetmgr serve`: real fleetd and herdr
// stand-ins, members in real PTYs, headless Chromium (Debian's chromium
// through chromedp, dashboard/browsertest) reading the page by its testing
// contract (README "Dashboard": data-fleet, data-state, data-member,
// data-verdict).

// claimWorking makes a member's pane claim to be working: the herdr
// stand-in turns this OSC into the pane's agent_status, which fleetd
// reports as liveStatus (as in TestStatusVerdicts).
const claimWorking = `printf '\033]777;herdr-status;working\007'; `

// Member commands by the verdict they earn.
const (
	memberWritesFiles = claimWorking + "while true; do date >> f.txt; sleep 0.3; done"
	memberPrints      = claimWorking + "while true; do date; sleep 0.3; done"
	memberStalls      = claimWorking + "sleep 600"
	memberBlocks      = `printf '\033]777;herdr-status;blocked\007'; sleep 600`
)

// spawnMembers spawns members (id → command) through fleet's own fleetd as
// primary (this process is in no pane).
func spawnMembers(tb testing.TB, e *harness.Env, fleet string, ids []string, commands map[string]string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "test"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports[fleet]), MaxRetries: -1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer cs.Close()
	for _, id := range ids {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": id, "command": commands[id]}})
		if err != nil || res.IsError {
			tb.Fatalf("spawn %q in %s: %v %+v", id, fleet, err, res)
		}
	}
}

// openDashboard opens serve's page in a tab of the shared browser and
// waits until its event stream is live.
func openDashboard(tb testing.TB, e *harness.Env) *browsertest.Page {
	tb.Helper()
	p := browsertest.Shared(tb).NewPage(tb)
	if err := p.Navigate("http://" + e.Listen + "/"); err != nil {
		tb.Fatal(err)
	}
	if _, err := p.WaitFor(`document.documentElement.dataset.live === 'true'`, 20*time.Second); err != nil {
		tb.Fatalf("dashboard not live: %v (problems: %v)", err, p.Problems())
	}
	return p
}

// pageEval evaluates expr in the page, failing tb on error.
func pageEval[T any](tb testing.TB, p *browsertest.Page, expr string) T {
	tb.Helper()
	v, err := browsertest.Eval[T](p, expr)
	if err != nil {
		tb.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// pageWait waits for a condition in the page, failing tb after timeout.
func pageWait(tb testing.TB, p *browsertest.Page, cond string, timeout time.Duration) float64 {
	tb.Helper()
	at, err := p.WaitFor(cond, timeout)
	if err != nil {
		tb.Fatalf("%v (problems: %v)", err, p.Problems())
	}
	return at
}

// pageClean fails tb when the page logged an error, threw, violated its
// CSP, had a failed request or an HTTP error, or asked another origin.
func pageClean(tb testing.TB, p *browsertest.Page, e *harness.Env) {
	tb.Helper()
	if pr := p.Problems(); len(pr) > 0 {
		tb.Errorf("page problems:\n%s", strings.Join(pr, "\n"))
	}
	for _, u := range p.Requests() {
		if !strings.HasPrefix(u, "http://"+e.Listen+"/") {
			tb.Errorf("request outside the page's origin: %s", u)
		}
	}
}

// memberSel is a JavaScript expression for fleet's member id's element
// (ids may hold any character, so no CSS selector is built from them).
func memberSel(fleet, id string) string {
	q, _ := json.Marshal(id)
	return fmt.Sprintf(`Array.from(document.querySelectorAll('[data-fleet=%q] [data-member]')).find(e => e.dataset.member === %s)`, fleet, q)
}

// serveMetric reads one sample of serve's /metrics (0 when absent).
func serveMetric(tb testing.TB, e *harness.Env, series string) float64 {
	tb.Helper()
	resp, err := http.Get("http://" + e.Listen + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestDashboardServe: serve's page on two real fleets. It loads clean (no
// console error, no failed request, nothing from another origin) and shows
// kb and docs running, with kb's members WORKING and STALLED and docs'
// WORKING and BLOCKED from the real status engine; the screenshot goes to
// $FLEETMGR_SCREENSHOT_DIR/dashboard.png. kill -9 of kb's fleetd: without
// a reload, kb's data-state leaves running within 2 s and comes back to
// running after the supervisor's restart (another pid). Stop on docs
// through the page, confirmed in its dialog: docs reads stopped, and
// `fleetmgr list` agrees.
func TestDashboardServe(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"1s\"\n", harness.Fleet{Name: "docs"}, harness.Fleet{Name: "kb"})
	e.StartServe()
	e.MustRun("start", "kb", "docs") // through serve: its children, supervised
	spawnMembers(t, e, "kb", []string{"builder", "stuck", "idle"},
		map[string]string{"builder": memberWritesFiles, "stuck": memberStalls, "idle": "true"})
	spawnMembers(t, e, "docs", []string{"writer", "reviewer"}, map[string]string{"writer": memberPrints, "reviewer": memberBlocks})

	p := openDashboard(t, e)
	// Some tool calls through serve while the page is open (the sparklines
	// count from the first read of the counters after it opened).
	mgr := connect(t, e.URL())
	for range 3 {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
		callTool(t, mgr, "fleet_list", map[string]any{"fleet": "docs"}, nil)
	}
	if st, err := browsertest.FleetStates(p); err != nil || fmt.Sprint(st) != "map[docs:running kb:running]" {
		t.Fatalf("fleet states %v %v, want docs and kb running", st, err)
	}
	// The real status engine's verdicts (sampled every 5 s while a page is
	// open, 1 s apart).
	pageWait(t, p, memberSel("kb", "builder")+`?.dataset.verdict === 'WORKING' && `+memberSel("kb", "stuck")+`?.dataset.verdict === 'STALLED' && `+
		memberSel("kb", "idle")+`?.dataset.verdict === 'IDLE' && `+memberSel("docs", "writer")+`?.dataset.verdict === 'WORKING' && `+
		memberSel("docs", "reviewer")+`?.dataset.verdict === 'BLOCKED'`, 45*time.Second)
	pageWait(t, p, `document.querySelector('[data-fleet="kb"] .log-lines').textContent.includes('spawned member stuck')`, 10*time.Second)
	// A picture with some history: three verdict samples, and the calls.
	pageWait(t, p, memberSel("kb", "stuck")+`.querySelectorAll('svg rect').length >= 3`, 30*time.Second)
	pageWait(t, p, `/ [1-9][0-9]* in view/.test(document.querySelector('[data-fleet="kb"] .cap-calls').textContent)`, 30*time.Second)
	if v, err := browsertest.MemberVerdicts(p, "kb"); err != nil || fmt.Sprint(v) != "map[builder:WORKING idle:IDLE stuck:STALLED]" {
		t.Errorf("kb members %v %v", v, err)
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
	if err := os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", filepath.Join(dir, "dashboard.png"), len(png))
	pageClean(t, p, e)

	// kill -9 of kb's fleetd, seen without a reload.
	pageEval[bool](t, p, `window.__notReloaded = true`)
	old := readState(t, e, "kb").Fleetd.PID
	t0 := time.Now()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	at, err := p.WaitFleetStateNot("kb", "running", 2*time.Second)
	if err != nil {
		t.Fatalf("kill -9 of kb's fleetd: %v (problems: %v)", err, p.Problems())
	}
	t.Logf("kill -9 → kb data-state %q after %.0f ms", pageEval[string](t, p, `document.querySelector('[data-fleet="kb"]').dataset.state`),
		at-float64(t0.UnixNano())/1e6)
	if _, err := p.WaitFleetState("kb", "running", 60*time.Second); err != nil {
		t.Fatalf("kb not back to running: %v", err)
	}
	if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID == old || st.Restarts < 1 {
		t.Fatalf("kb after the restart: %+v", st)
	}
	if !pageEval[bool](t, p, `window.__notReloaded === true`) {
		t.Fatal("the page reloaded")
	}

	// Stop on docs, confirmed in the dialog.
	if err := chromedp.Do(p.Ctx,
		chromedp.Click(chromedp.CSS(`[data-fleet="docs"] button[data-verb="stop"]`)),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")),
	); err != nil {
		t.Fatal(err)
	}
	if title := pageEval[string](t, p, `document.getElementById('confirm-title').textContent`); title != "Stop fleet docs?" {
		t.Errorf("dialog title %q", title)
	}
	if err := chromedp.Do(p.Ctx, chromedp.Click(chromedp.ID("confirm-ok"))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitFleetState("docs", "stopped", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	pageWait(t, p, `document.getElementById('result').textContent.startsWith('stop docs: done')`, 10*time.Second)
	rows := listRows(t, e)
	if rows["docs"].State != "stopped" || rows["kb"].State != "running" {
		t.Errorf("fleetmgr list: docs %s, kb %s; want stopped and running", rows["docs"].State, rows["kb"].State)
	}
	pageClean(t, p, e)
}

// TestDashboardServeShowsPayloadsAsText: a fleetd that names a member with
// markup (the stand-in's --any-member-id) and logs it: the page shows the
// name and the log line as text, makes no element of them and runs
// nothing (the flag the payload would set stays unset, no request goes to
// its URL).
func TestDashboardServeShowsPayloadsAsText(t *testing.T) {
	browsertest.Require(t)
	const payload = `<img src=x onerror="window.__pwned=1"></script><script>window.__pwned=2</script>`
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"1s\"\n", harness.Fleet{Name: "kb", Args: []string{"--any-member-id"}})
	e.StartServe()
	e.MustRun("start", "kb")
	spawnMembers(t, e, "kb", []string{payload}, map[string]string{payload: memberStalls})
	p := openDashboard(t, e)
	q, _ := json.Marshal(payload)
	pageWait(t, p, memberSel("kb", payload)+`?.dataset.verdict === 'STALLED'`, 45*time.Second)
	if got := pageEval[string](t, p, memberSel("kb", payload)+`.querySelector('.m-id').textContent`); got != payload {
		t.Errorf("member name shown as %q", got)
	}
	pageWait(t, p, fmt.Sprintf(`document.querySelector('[data-fleet="kb"] .log-lines').textContent.includes('spawned member ' + %s)`, q), 10*time.Second)
	if n := pageEval[int](t, p, `document.querySelectorAll('main img, main script, main iframe, main object, main embed').length`); n != 0 {
		t.Errorf("%d elements made from fleet data", n)
	}
	if v := pageEval[string](t, p, `typeof window.__pwned`); v != "undefined" {
		t.Errorf("the payload ran: window.__pwned is %s", v)
	}
	pageClean(t, p, e)
}

// csrfMeta finds the page's CSRF token in its meta tag.
var csrfMeta = regexp.MustCompile(`<meta name="fleetmgr-csrf" content="([^"]+)">`)

// TestDashboardServeRefusesForeignActions: against a real serve, an action
// is refused, nothing done, for GET, from another origin (one the guard
// refuses, one on loopback it lets through to the dashboard, and a real
// browser page of another origin trying a no-cors fetch and a form post),
// without the CSRF token, with a forged one and as a form body; each
// refusal is counted in /metrics and docs keeps its fleetd. The page's own
// request goes through the manager tools' path (proxy.Proxy.Act): a fleet
// added to fleets.toml after serve started is started without a reload,
// and a name the file does not define is refused as unknown.
func TestDashboardServeRefusesForeignActions(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "docs"}, harness.Fleet{Name: "late"})
	// "late" is added to the file only after serve has read it.
	full, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(full, []byte("\n[fleets.late]"))
	if i < 0 {
		t.Fatal("no [fleets.late] in the config")
	}
	if err := os.WriteFile(e.ConfigPath, full[:i+1], 0o644); err != nil {
		t.Fatal(err)
	}
	e.StartServe()
	e.MustRun("start", "docs")
	pid := readState(t, e, "docs").Fleetd.PID
	base := "http://" + e.Listen

	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfMeta.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%.500s", page)
	}
	token := string(m[1])
	post := func(method, origin, ctype, tok, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+"/api/action", strings.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if tok != "" {
			req.Header.Set("X-Fleetmgr-Csrf", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	refusals := func(reason string) float64 {
		return serveMetric(t, e, `fleetmgr_dashboard_refusals_total{reason="`+reason+`"}`)
	}
	stop := `{"verb":"stop","fleet":"docs"}`
	self := base
	before := map[string]float64{}
	for _, r := range []string{"method", "origin", "csrf", "content_type"} {
		before[r] = refusals(r)
	}
	guard0 := serveMetric(t, e, `fleetmgr_guard_refusals_total{rule="host"}`) + serveMetric(t, e, `fleetmgr_guard_refusals_total{rule="origin"}`)
	cases := []struct {
		name                       string
		method, origin, ctype, tok string
		want                       int
	}{
		{"GET", "GET", self, "application/json", token, 405},
		{"evil origin (the guard)", "POST", "http://evil.example", "application/json", token, 403},
		{"another loopback origin", "POST", "http://127.0.0.1:1", "application/json", token, 403},
		{"no token", "POST", self, "application/json", "", 403},
		{"forged token", "POST", self, "application/json", "AAAAAAAAAAAAAAAAAAAAAA.AAAA", 403},
		{"form body", "POST", self, "application/x-www-form-urlencoded", token, 415},
	}
	for _, c := range cases {
		if got := post(c.method, c.origin, c.ctype, c.tok, stop); got != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.name, got, c.want)
		}
	}

	// A real browser page of another (loopback) origin tries too.
	if browsertest.Path() != "" || os.Getenv("CI") != "" {
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><html><body><iframe name="sink"></iframe><script>
const body = JSON.stringify({verb: 'stop', fleet: 'docs'});
const tries = [
  fetch(%[1]q + '/api/action', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body}).then(() => 'sent', () => 'error'),
  new Promise((resolve) => {
    const f = document.createElement('form');
    f.method = 'POST'; f.action = %[1]q + '/api/action'; f.enctype = 'text/plain'; f.target = 'sink';
    const i = document.createElement('input');
    i.name = '{"verb":"stop","fleet":"docs","x":"'; i.value = '"}';
    f.appendChild(i); document.body.appendChild(f);
    document.querySelector('iframe').addEventListener('load', () => resolve('form posted'));
    f.submit();
  }),
];
Promise.all(tries).then((r) => { window.results = r; });
</script></body></html>`, base)
		}))
		defer evil.Close()
		o0 := refusals("origin")
		p := browsertest.Shared(t).NewPage(t)
		if err := p.Navigate(evil.URL + "/"); err != nil {
			t.Fatal(err)
		}
		pageWait(t, p, `window.results`, 15*time.Second)
		if d := refusals("origin") - o0; d < 2 {
			t.Errorf("origin refusals +%v after the other origin's page, want its fetch and its form", d)
		}
	}

	if st := readState(t, e, "docs"); st.Fleetd == nil || st.Fleetd.PID != pid || listRows(t, e)["docs"].State != "running" {
		t.Fatalf("docs after refused requests: %+v", st)
	}
	for r, min := range map[string]float64{"method": 1, "origin": 1, "csrf": 2, "content_type": 1} {
		if d := refusals(r) - before[r]; d < min {
			t.Errorf("fleetmgr_dashboard_refusals_total{reason=%q} +%v, want ≥ %v", r, d, min)
		}
	}
	if d := serveMetric(t, e, `fleetmgr_guard_refusals_total{rule="host"}`) + serveMetric(t, e, `fleetmgr_guard_refusals_total{rule="origin"}`) - guard0; d < 1 {
		t.Errorf("the guard did not count the evil origin (+%v)", d)
	}

	// The page's own request: a fleet added to the file since serve read
	// it is started (the file is read again, as the manager tools do); a
	// name it does not define is refused.
	if err := os.WriteFile(e.ConfigPath, full, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := post("POST", self, "application/json", token, `{"verb":"start","fleet":"late"}`); got != 200 {
		t.Fatalf("start late from the page: HTTP %d", got)
	}
	if rows := listRows(t, e); rows["late"].State != "running" {
		t.Fatalf("late after the page's start: %+v", rows["late"])
	}
	u0 := refusals("unknown_fleet")
	if got := post("POST", self, "application/json", token, `{"verb":"start","fleet":"nope"}`); got != 400 || refusals("unknown_fleet") != u0+1 {
		t.Errorf("start of an unknown fleet: HTTP %d", got)
	}
	if _, err := os.Stat(filepath.Join(e.StateDir, "fleets", "nope")); err == nil {
		t.Error("an unknown fleet got a state dir")
	}
}

// TestDashboardServeFederation: alpha's page when serve federates (alpha
// on the host, beta in a network namespace behind the broker relay, as in
// TestFederation): the hosts with their state and last beat, beta's
// fleets dimmed and without actions (kb, which alpha's file declares on
// beta, and wiki@beta), alpha's own docs not; kill -9 of beta's serve:
// without a reload, beta turns expired within its expiry and kb is kept,
// marked. The page's view does not depend on the broker (TestFederation
// runs both); it runs on RabbitMQ.
func TestDashboardServeFederation(t *testing.T) {
	browsertest.Require(t)
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		if b.Name != "rabbitmq" {
			t.Skip("the page's federation view is the same on every broker; TestFederation covers them")
		}
		alpha, beta, _, _ := fedPair(t, b)
		beta.env.MustRun("start", "kb")
		beta.serve = beta.env.StartServe()
		alpha.serve = alpha.env.StartServe()
		waitConnected(t, alpha)
		waitHostState(t, fedSession(t, alpha), beta.host, "online", 20*time.Second)
		alpha.env.MustRun("start", "docs")

		p := openDashboard(t, alpha.env)
		hostSel := fmt.Sprintf(`document.querySelector('#hosts:not([hidden]) #host-list li[data-host=%q]')`, beta.host)
		pageWait(t, p, hostSel+`?.dataset.hostState === 'online'`, 20*time.Second)
		if txt := pageEval[string](t, p, hostSel+`.textContent`); !strings.HasPrefix(txt, beta.host+": online, 2 fleets, last seen ") {
			t.Errorf("beta's line: %q", txt)
		}
		wiki := "wiki@" + beta.host
		fs := func(n string) string { return fmt.Sprintf(`document.querySelector('[data-fleet=%q]')`, n) }
		pageWait(t, p, fs("kb")+`?.dataset.state === 'running' && `+fs(wiki)+`?.dataset.state === 'stopped' && `+fs("docs")+`?.dataset.state === 'running'`, 20*time.Second)
		for _, n := range []string{"kb", wiki} {
			if !pageEval[bool](t, p, fs(n)+`.classList.contains('remote') && `+fs(n)+`.dataset.host === `+strconv.Quote(beta.host)+
				` && Array.from(`+fs(n)+`.querySelectorAll('button')).every(b => b.disabled)`) {
				t.Errorf("%s: not dimmed, not on %s, or with actions", n, beta.host)
			}
		}
		if !pageEval[bool](t, p, fs("docs")+`.dataset.host === 'local' && !`+fs("docs")+`.classList.contains('remote')`) {
			t.Error("alpha's own docs is shown as remote")
		}
		pageEval[bool](t, p, `window.__notReloaded = true`)

		// beta's serve killed: no offline announcement; expired after 3
		// missed beats on alpha's clock.
		t0 := time.Now()
		if err := beta.serve.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		at := pageWait(t, p, hostSel+`?.dataset.hostState === 'expired' && `+fs("kb")+`.querySelector('.alerts').textContent.includes('host '+`+strconv.Quote(beta.host)+`+' expired')`, 20*time.Second)
		t.Logf("kill -9 of beta's serve → expired in alpha's page after %.0f ms (expiry: 3 beats of %s)", at-float64(t0.UnixNano())/1e6, fedHeartbeat)
		if !pageEval[bool](t, p, `window.__notReloaded === true`) || pageEval[string](t, p, fs("kb")+`.dataset.state`) != "unknown" {
			t.Error("the page reloaded, or kb is not kept as unknown")
		}
		pageClean(t, p, alpha.env)
	})
}
