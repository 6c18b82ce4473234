// Package browsertest drives Debian's headless Chromium for tests, through
// chromedp: it starts one browser (fresh profile, no network but what the
// page asks for), opens pages, and records everything that would make a
// page "not clean": console errors and assertions, uncaught exceptions,
// browser log errors (a Content-Security-Policy violation is one, and a
// securitypolicyviolation listener installed in every document reports
// each as a console error too), failed requests and HTTP answers ≥ 400.
//
// Chromium is /usr/bin/chromium (Debian's package, which scripts/test
// installs), or $FLEETMGR_TEST_CHROMIUM. Without it a test skips, saying
// why, unless CI is set: then it fails.
//
// It never evaluates strings inside the page's own JavaScript (chromedp's
// Poll does, with new Function, which a strict CSP refuses): conditions are
// evaluated through the DevTools protocol, which a page's CSP does not
// govern, and waited for with a MutationObserver.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Path returns the Chromium binary to use, or "" when there is none:
// $FLEETMGR_TEST_CHROMIUM, else /usr/bin/chromium, else chromium or
// chromium-browser on PATH.
func Path() string {
	if p := os.Getenv("FLEETMGR_TEST_CHROMIUM"); p != "" {
		return p
	}
	if fi, err := os.Stat("/usr/bin/chromium"); err == nil && !fi.IsDir() {
		return "/usr/bin/chromium"
	}
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one running headless Chromium.
type Browser struct {
	ctx    context.Context // the browser's chromedp context
	cancel func()
	dir    string
}

// Require skips t when there is no Chromium, saying why, or fails it when
// CI is set (browser tests must run there).
func Require(t testing.TB) {
	t.Helper()
	if Path() != "" {
		return
	}
	msg := "no Chromium: install Debian's chromium package (scripts/test does) or set FLEETMGR_TEST_CHROMIUM"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: browser tests must run)")
	}
	t.Skip(msg)
}

// Start launches Chromium with a fresh profile in a temporary directory:
// headless, no sandbox (tests run as root), no GPU, no QUIC, no first-run,
// background networking, component updates or sync, so that it makes no
// request of its own. A missing binary skips t (fails it when CI is set).
// Close it when done.
func Start(t testing.TB) *Browser {
	t.Helper()
	Require(t)
	b, err := launch()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var shared struct {
	sync.Mutex
	b   *Browser
	err error
}

// Shared returns one Browser for the whole test binary, started by the
// first test that asks (each test opens its own pages). Call CloseShared
// from TestMain after m.Run. Skips like Start.
func Shared(t testing.TB) *Browser {
	t.Helper()
	Require(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.b == nil && shared.err == nil {
		shared.b, shared.err = launch()
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.b
}

// CloseShared stops the browser Shared started, if any.
func CloseShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.b != nil {
		shared.b.Close()
		shared.b = nil
	}
}

func launch() (*Browser, error) {
	path := Path()
	dir, err := os.MkdirTemp("", "fleetmgr-chromium-")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(dir),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1280, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// The first Do starts the browser and ties it to the context it is
	// given: it must be bctx itself, not one with a deadline.
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	return &Browser{ctx: bctx, cancel: func() { bcancel(); acancel() }, dir: dir}, nil
}

// Close stops the browser and removes its profile.
func (b *Browser) Close() {
	b.cancel()
	os.RemoveAll(b.dir)
}

// Page is one tab, with what went wrong in it recorded.
type Page struct {
	// Ctx is the tab's chromedp context (use it with chromedp.Do/Run).
	Ctx    context.Context
	cancel func()

	mu       sync.Mutex
	problems []string
	urls     map[network.RequestID]string
	requests []string // every URL requested, in order
	ignore   []string
}

// cspReporter runs in every document before its scripts: each CSP
// violation becomes a console error, whatever the browser logs itself.
const cspReporter = `document.addEventListener('securitypolicyviolation', (e) => {
  console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber);
});`

// NewPage opens a tab. Problems seen in it are kept until Problems is
// called; the tab closes with t's cleanup.
func (b *Browser) NewPage(t testing.TB) *Page {
	t.Helper()
	p := &Page{urls: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(p.listen))
	p.Ctx, p.cancel = ctx, cancel
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspReporter})
		return err
	})); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(cancel)
	return p
}

// Close closes the tab.
func (p *Page) Close() { p.cancel() }

// Ignore makes problems containing s not count (e.g. a stream the test
// itself cuts).
func (p *Page) Ignore(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ignore = append(p.ignore, s)
}

func (p *Page) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, s := range p.ignore {
		if strings.Contains(msg, s) {
			return
		}
	}
	p.problems = append(p.problems, msg)
}

// listen runs in the tab's event loop: it must return fast.
func (p *Page) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range ev.Args {
				if a.Value != nil {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			p.note("console.%s: %s", ev.Type, strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		p.note("exception at %s:%d: %s", d.URL, d.LineNumber+1, text)
	case *log.EventEntryAdded:
		if ev.Entry != nil && ev.Entry.Level == log.EntryLevelError {
			p.note("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		if ev.Request != nil {
			p.urls[ev.RequestID] = ev.Request.URL
			p.requests = append(p.requests, ev.Request.URL)
		}
	case *network.EventLoadingFailed:
		if !ev.Canceled {
			p.note("request failed: %s: %s %s", p.urls[ev.RequestID], ev.ErrorText, ev.BlockedReason)
		}
	case *network.EventResponseReceived:
		if ev.Response != nil && ev.Response.Status >= 400 {
			p.note("HTTP %d for %s", ev.Response.Status, ev.Response.URL)
		}
	}
}

// Problems returns (and forgets) what went wrong since the last call.
func (p *Page) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.problems
	p.problems = nil
	return out
}

// Requests returns every URL the page requested so far.
func (p *Page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// Navigate loads url and waits for its load event.
func (p *Page) Navigate(url string) error {
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	return chromedp.Do(ctx, chromedp.Navigate(url))
}

// Eval evaluates a JavaScript expression through DevTools and decodes its
// value (awaiting a promise).
func Eval[T any](p *Page, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// ErrTimeout is returned by WaitFor when the condition did not hold in time.
var ErrTimeout = errors.New("condition not met in time")

// WaitFor waits until the JavaScript expression cond is truthy, checking
// it at once and on every DOM change (a MutationObserver), for at most
// timeout. It returns the wall-clock time (Unix ms, from the page's own
// clock) when the condition was first seen true, so a test can measure how
// long after a change the page showed it.
func (p *Page) WaitFor(cond string, timeout time.Duration) (float64, error) {
	expr := fmt.Sprintf(`new Promise((resolve) => {
  const cond = () => { try { return !!(%s); } catch (e) { return false; } };
  const now = () => performance.timeOrigin + performance.now();
  if (cond()) { resolve(now()); return; }
  const obs = new MutationObserver(() => { if (cond()) { obs.disconnect(); clearTimeout(timer); resolve(now()); } });
  obs.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  const timer = setTimeout(() => { obs.disconnect(); resolve(cond() ? now() : -1); }, %d);
})`, cond, timeout.Milliseconds())
	at, err := Eval[float64](p, expr)
	if err != nil {
		return 0, err
	}
	if at < 0 {
		return 0, fmt.Errorf("%w (%s): %s", ErrTimeout, timeout, cond)
	}
	return at, nil
}

// Screenshot returns a PNG of the whole page.
func (p *Page) Screenshot() ([]byte, error) {
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.FullScreenshot(100))
}

// The dashboard's testing contract (README "Dashboard"): each fleet's
// element carries data-fleet and data-state, each member's data-member and
// data-verdict. These read it without depending on the page's layout.

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fleetExpr is a JavaScript expression for fleet's element (or undefined).
func fleetExpr(fleet string) string {
	return `Array.from(document.querySelectorAll('[data-fleet]')).find(e => e.dataset.fleet === ` + jsString(fleet) + `)`
}

// FleetStates returns every fleet's data-state, by data-fleet.
func FleetStates(p *Page) (map[string]string, error) {
	return Eval[map[string]string](p, `Object.fromEntries(Array.from(document.querySelectorAll('[data-fleet]')).map(e => [e.dataset.fleet, e.dataset.state]))`)
}

// MemberVerdicts returns the data-verdict of each of fleet's members, by
// data-member.
func MemberVerdicts(p *Page, fleet string) (map[string]string, error) {
	return Eval[map[string]string](p, `Object.fromEntries(Array.from((`+fleetExpr(fleet)+` || document.createElement('i')).querySelectorAll('[data-member]')).map(e => [e.dataset.member, e.dataset.verdict]))`)
}

// WaitFleetState waits until fleet's data-state is state (see WaitFor).
func (p *Page) WaitFleetState(fleet, state string, timeout time.Duration) (float64, error) {
	return p.WaitFor(`(`+fleetExpr(fleet)+` || {dataset: {}}).dataset.state === `+jsString(state), timeout)
}

// WaitFleetStateNot waits until fleet's data-state is something else than
// state (e.g. "running" after a kill -9 of its fleetd).
func (p *Page) WaitFleetStateNot(fleet, state string, timeout time.Duration) (float64, error) {
	return p.WaitFor(`(`+fleetExpr(fleet)+` || {dataset: {}}).dataset.state !== undefined && `+fleetExpr(fleet)+`.dataset.state !== `+jsString(state), timeout)
}
