package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestDashboardHistoryAcrossServes (issue 25): tool calls through the
// mount, a supervisor restart (kill -9 of fleetd) and an operator's
// restart happen while no page is open; serve is killed and started again;
// a page opened afterwards shows those calls in kb's sparkline and both
// restarts on its time axis, from its first paint (the new serve saw none
// of them: they come from the journal).
func TestDashboardHistoryAcrossServes(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	serve := e.StartServe()
	e.MustRun("start", "kb", "docs")
	mgr := connect(t, e.URL())
	const calls = 6
	for range calls {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	}
	killFleetdAwaitRestart(t, e, "kb", 30*time.Second, serve.Log, nil)
	e.MustRun("restart", "kb")
	var restarts, called int
	if !svWait(15*time.Second, func() bool {
		restarts, called = 0, 0
		for _, ev := range eventsJSON(t, e, "kb") {
			switch ev.Kind {
			case journal.KindRestart:
				restarts++
			case journal.KindCall:
				called++
			}
		}
		return restarts == 2 && called == calls
	}) {
		t.Fatalf("journal: %d restarts and %d calls of kb, want 2 and %d:\n%s", restarts, called, calls, e.MustRun("events").Stdout)
	}

	killServe(t, serve)
	e.StartServe()
	p := openDashboard(t, e)
	kb := `document.querySelector('[data-fleet="kb"]')`
	capCalls := pageEval[string](t, p, kb+`.querySelector('.cap-calls').textContent`)
	capRestarts := pageEval[string](t, p, kb+`.querySelector('.cap-restarts').textContent`)
	m := regexp.MustCompile(` (\d+) in view`).FindStringSubmatch(capCalls)
	if m == nil {
		t.Errorf("kb's sparkline after a serve restart: %q; want the %d calls made before", capCalls, calls)
	} else if n, _ := strconv.Atoi(m[1]); n != calls {
		t.Errorf("kb's sparkline counts %d calls, want %d: %q", n, calls, capCalls)
	}
	if want := "restarts in the last hour: 2"; len(capRestarts) < len(want) || capRestarts[:len(want)] != want {
		t.Errorf("kb's restart axis after a serve restart: %q; want %q…", capRestarts, want)
	}
	if n := pageEval[float64](t, p, kb+`.querySelectorAll('.axis-marks rect').length`); n != 2 {
		t.Errorf("%v marks on kb's restart axis, want 2", n)
	}
	titles := pageEval[string](t, p, `Array.from(`+kb+`.querySelectorAll('.axis-marks title')).map(x => x.textContent).join(' | ')`)
	if !regexp.MustCompile(`fleetd exited.*ended \d+ members`).MatchString(titles) {
		t.Errorf("the supervisor's restart mark does not say why: %q", titles)
	}
	if d := pageEval[string](t, p, `document.querySelector('[data-fleet="docs"] .cap-restarts').textContent`); d != "restarts in the last hour: 0" {
		t.Errorf("docs' restart axis %q", d)
	}
	t.Logf("after a serve restart: %s; %s; marks: %s", capCalls, capRestarts, titles)
	pageClean(t, p, e)
}

// TestDashboardVerdictTimelineAcrossServes (issue 25): a member's verdict
// changes (WORKING or STALLED, then BLOCKED through the herdr stand-in's
// status escape) happen while no page is open; serve is killed and started
// again; a page opened afterwards draws the member's timeline with both
// verdicts from its first paint: the samples come from the journal's
// member.verdict events, not from samplings the new serve made (which
// would see only BLOCKED).
func TestDashboardVerdictTimelineAcrossServes(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"500ms\"\n", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "asker", "command": `printf '\033]777;herdr-status;working\007'; sleep 12; printf '\033]777;herdr-status;blocked\007'; sleep 600`}, nil)
	var seen []string
	if !svWait(60*time.Second, func() bool {
		seen = nil
		for _, ev := range eventsJSON(t, e, "kb", "--kind", "member.verdict") {
			if ev.Member == "asker" {
				seen = append(seen, ev.Outcome)
			}
		}
		return len(seen) >= 2 && seen[len(seen)-1] == "BLOCKED" && seen[0] != "BLOCKED"
	}) {
		t.Fatalf("the journal's verdicts of asker: %v; want another (WORKING or STALLED: it writes nothing) then BLOCKED\n%s", seen, serve.Log())
	}
	before := seen[0]

	killServe(t, serve)
	e.StartServe()
	p := openDashboard(t, e)
	sel := memberSel("kb", "asker")
	pageWait(t, p, sel+` != null && `+sel+`.querySelector('.timeline').getAttribute('aria-label') !== 'no samples yet'`, 20*time.Second)
	label := pageEval[string](t, p, sel+`.querySelector('.timeline').getAttribute('aria-label')`)
	if !strings.Contains(label, before) || !strings.Contains(label, "BLOCKED") {
		t.Errorf("asker's timeline after a serve restart: %q; want the %s samples before the BLOCKED ones", label, before)
	}
	if n := pageEval[float64](t, p, sel+`.querySelectorAll('.timeline rect.`+before[:1]+`').length`); n < 1 {
		t.Errorf("%v %s samples drawn", n, before)
	}
	t.Logf("after a serve restart: asker's timeline %s", label)
	pageClean(t, p, e)
}
