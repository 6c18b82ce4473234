package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestDashboardCompactTenFleets (issue 24 item 17, through the real
// binary): a real serve with ten fleets, f07 failed (its fleetd exits
// during start; start_retries = 0), members working, stalled and blocked
// in f01 and f02. In Chromium at 1400×900, /?view=compact shows the ten
// fleets' rows inside the viewport, the failed f07 first, and the summary
// line's counts are those of `status --json`: fleets, running, failed
// (named first), members working, stalled, blocked.
func TestDashboardCompactTenFleets(t *testing.T) {
	browsertest.Require(t)
	var fleets []harness.Fleet
	var up []string
	for i := 1; i <= 10; i++ {
		if n := fmt.Sprintf("f%02d", i); n != "f07" {
			fleets = append(fleets, harness.Fleet{Name: n})
			up = append(up, n)
		}
	}
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"1s\"\n", fleets...)
	proj := filepath.Join(e.Dir, "proj-f07")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	editConfig(t, e, func(s string) string {
		return s + fmt.Sprintf("\n[fleets.f07]\nproject = %q\ncommand = [\"sh\", \"-c\", \"echo not today; exit 3\"]\nport = %d\nstart_retries = 0\n", proj, harness.FreePort(t))
	})
	e.StartServe()
	e.MustRun(append([]string{"start"}, up...)...)
	if r := e.Run("start", "f07"); r.Code != 1 {
		t.Fatalf("start f07 (fleetd exits during start): exit %d, want 1\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	spawnMembers(t, e, "f01", []string{"builder", "stuck", "reviewer"},
		map[string]string{"builder": memberWritesFiles, "stuck": memberStalls, "reviewer": memberBlocks})
	spawnMembers(t, e, "f02", []string{"writer"}, map[string]string{"writer": memberPrints})

	p := browsertest.Shared(t).NewPage(t)
	if err := chromedp.Do(p.Ctx, chromedp.EmulateViewport(1400, 900)); err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate("http://" + e.Listen + "/?view=compact"); err != nil {
		t.Fatal(err)
	}
	pageWait(t, p, `document.documentElement.dataset.live === 'true'`, 20*time.Second)

	// The summary's counts against status --json's, once the verdicts
	// settled (builder WORKING, stuck STALLED, reviewer BLOCKED, writer
	// WORKING) and f07 is failed.
	type counts struct{ Fleets, Running, Failed, Working, Stalled, Blocked int }
	fromStatus := func() (counts, []string) {
		var rep struct {
			Fleets []struct {
				Name    string `json:"name"`
				State   string `json:"state"`
				Members []struct {
					Verdict string `json:"verdict"`
				} `json:"members"`
			} `json:"fleets"`
		}
		if err := json.Unmarshal([]byte(e.MustRun("status", "--json").Stdout), &rep); err != nil {
			t.Fatalf("status --json: %v", err)
		}
		var c counts
		var failed []string
		for _, f := range rep.Fleets {
			c.Fleets++
			switch f.State {
			case "running":
				c.Running++
			case "failed":
				c.Failed++
				failed = append(failed, f.Name)
			}
			for _, m := range f.Members {
				switch m.Verdict {
				case "WORKING":
					c.Working++
				case "STALLED":
					c.Stalled++
				case "BLOCKED":
					c.Blocked++
				}
			}
		}
		return c, failed
	}
	fromPage := func() counts {
		var c counts
		c.Fleets = pageEval[int](t, p, `document.querySelectorAll('#compact-rows tr').length`)
		c.Running = pageEval[int](t, p, `document.querySelectorAll('#compact-rows tr[data-state="running"]').length`)
		for k, dst := range map[string]*int{"failed": &c.Failed, "working": &c.Working, "stalled": &c.Stalled, "blocked": &c.Blocked} {
			*dst = pageEval[int](t, p, fmt.Sprintf(`Number(document.querySelector('#summary').dataset[%q])`, k))
		}
		return c
	}
	want := counts{Fleets: 10, Running: 9, Failed: 1, Working: 2, Stalled: 1, Blocked: 1}
	var st, pg counts
	var failed []string
	wait.For(t, 60*time.Second, "status --json and the page to agree on 10 fleets, 9 running, f07 failed, 2 working, 1 stalled, 1 blocked", func() (bool, string) {
		st, failed = fromStatus()
		pg = fromPage()
		return st == want && pg == st && fmt.Sprint(failed) == "[f07]", fmt.Sprintf("status --json %+v (failed %v), page %+v, summary %q", st, failed, pg, pageEval[string](t, p, `document.querySelector('#summary').textContent`))
	})
	sum := pageEval[string](t, p, `document.querySelector('#summary').textContent`)
	if wantSum := fmt.Sprintf("1 failed: f07 · 10 fleets, 9 running · 4 members: %d working, %d stalled, %d blocked", st.Working, st.Stalled, st.Blocked); sum != wantSum {
		t.Errorf("summary line %q, want %q", sum, wantSum)
	}

	// Ten rows, the failed fleet first, every one inside the 1400×900
	// viewport (no scrolling, down or across), the cards hidden.
	if first := pageEval[string](t, p, `document.querySelector('#compact-rows tr').dataset.fleet`); first != "f07" {
		t.Errorf("the compact table starts with %s, want the failed f07", first)
	}
	inside := `[...document.querySelectorAll('#compact-rows tr')].every((tr) => { const r = tr.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0 && r.right <= window.innerWidth; })`
	if !pageEval[bool](t, p, inside) || pageEval[int](t, p, `window.innerHeight`) > 900 || pageEval[int](t, p, `window.innerWidth`) > 1400 {
		t.Errorf("the ten rows are not all inside the %d×%d viewport: last row %s",
			pageEval[int](t, p, `window.innerWidth`), pageEval[int](t, p, `window.innerHeight`),
			pageEval[string](t, p, `JSON.stringify([...document.querySelectorAll('#compact-rows tr')].pop().getBoundingClientRect())`))
	}
	if pageEval[bool](t, p, `!document.getElementById('fleets').hidden`) {
		t.Error("the fleet cards show in compact mode")
	}
	if png, err := p.Screenshot(); err == nil {
		if dir := os.Getenv("FLEETMGR_SCREENSHOT_DIR"); dir != "" {
			_ = os.MkdirAll(dir, 0o755)
			_ = os.WriteFile(filepath.Join(dir, "dashboard-compact-serve.png"), png, 0o644)
		}
	} else {
		t.Errorf("screenshot: %v", err)
	}
	if rows := pageEval[string](t, p, `[...document.querySelectorAll('#compact-rows tr')].map((tr) => tr.dataset.fleet + ':' + tr.dataset.state).join(' ')`); !strings.HasPrefix(rows, "f07:failed ") {
		t.Errorf("compact rows %s", rows)
	}
	pageClean(t, p, e)
}
