package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// notificationSpy runs in the page before its scripts: window.Notification
// becomes a subclass that records each notification made (title, body,
// tag) in window.__fmNotes, and each permission request in
// window.__fmAsked; both still do what the browser's own do.
const notificationSpy = `(() => {
  const N = window.Notification;
  window.__fmNotes = []; window.__fmAsked = 0;
  if (!N) return;
  class Spy extends N {
    constructor(title, opts) { super(title, opts); window.__fmNotes.push({ title, body: (opts && opts.body) || '', tag: (opts && opts.tag) || '' }); }
    static requestPermission(...a) { window.__fmAsked++; return N.requestPermission(...a); }
  }
  window.Notification = Spy;
})();`

// TestDashboardBrowserNotifications (issue 25, "the dashboard can raise
// browser notifications when the operator allows them"), in Chromium: the
// page offers a button that asks the browser's permission, and asks
// nothing before it is clicked; a member made BLOCKED notifies through a
// [[notify]] rule, and while notifications are not allowed the page
// raises none; once they are (granted through CDP Browser.setPermission,
// as the operator's "Allow" would) the button goes and the episode's
// "resolved" is raised as a browser notification, once, with the rule's
// text.
func TestDashboardBrowserNotifications(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"500ms\"\n", harness.Fleet{Name: "kb"})
	f, err := os.OpenFile(e.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\n[[notify]]\nname = \"blocked\"\non = [\"member.blocked\"]\nfleets = [\"kb\"]\nhold = \"1s\"\n\n[[notify.sinks]]\ntype = \"command\"\ncommand = [\"true\"]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.StartServe()
	e.MustRun("start", "kb")

	p := browsertest.Shared(t).NewPage(t)
	if err := chromedp.Do(p.Ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: notificationSpy})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	origin := "http://" + e.Listen
	if err := p.Navigate(origin + "/"); err != nil {
		t.Fatal(err)
	}
	pageWait(t, p, `document.documentElement.dataset.live === 'true'`, 20*time.Second)
	if perm := pageEval[string](t, p, `Notification.permission`); perm != "default" {
		t.Fatalf("Notification.permission = %q at the start; want default", perm)
	}
	if pageEval[bool](t, p, `document.getElementById('notify-allow').hidden`) {
		t.Fatal("no button offering browser notifications while the permission is not asked")
	}
	if n := pageEval[float64](t, p, `window.__fmAsked`); n != 0 {
		t.Fatalf("the page asked for the permission %v times without a click", n)
	}
	// The operator's click is a user gesture: the page asks then.
	if err := chromedp.Do(p.Ctx, chromedp.Click(`#notify-allow`)); err != nil {
		t.Fatal(err)
	}
	pageWait(t, p, `window.__fmAsked === 1`, 5*time.Second)

	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "asker", "command": `printf '\033]777;herdr-status;blocked\007'; sleep 15; printf '\033]777;herdr-status;working\007'; sleep 600`}, nil)
	// The firing is delivered (journalled) while notifications are not
	// granted: the page raises nothing.
	if !svWait(30*time.Second, func() bool {
		for _, ev := range eventsJSON(t, e, "--kind", "notify") {
			if strings.HasPrefix(ev.Detail, "asker") || ev.Member == "asker" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no notification for the blocked member in the journal:\n%s", e.MustRun("events").Stdout)
	}
	if n := pageEval[float64](t, p, `window.__fmNotes.length`); n != 0 {
		t.Fatalf("%v browser notifications raised without the permission", n)
	}

	// Browser.setPermission: the current protocol's form of
	// Browser.grantPermissions (which this cdproto no longer has).
	if _, err := chromedp.CallBrowser(p.Ctx, browser.SetPermission, browser.SetPermissionParams{
		Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted, Origin: origin}); err != nil {
		t.Fatalf("Browser.setPermission: %v", err)
	}
	pageWait(t, p, `Notification.permission === 'granted' && document.getElementById('notify-allow').hidden`, 5*time.Second)
	pageWait(t, p, `window.__fmNotes.length >= 1`, 40*time.Second)
	notes := pageEval[[]map[string]string](t, p, `window.__fmNotes`)
	if len(notes) != 1 || notes[0]["title"] != "fleetmgr: member.blocked resolved" || !strings.Contains(notes[0]["body"], "asker") || notes[0]["tag"] != "member.blocked|kb|asker|" {
		t.Errorf("browser notifications: %v; want one, the resolution of asker's episode", notes)
	}
	pageClean(t, p, e)
}
