package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestMembersLostOnRestartAreShown (issue 24 item 3): fleetd reaps the
// member panes a previous fleetd left, so a restart after kill -9 ends
// every member. The members it had before and after are compared and
// what was lost is counted and named: in the record, `list` (JSON and
// text), `status --json` and its table, and /metrics
// (fleetmgr_members_lost_total{fleet}).
func TestMembersLostOnRestartAreShown(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	for _, id := range []string{"alpha", "beta"} {
		callTool(t, fd, "fleet_spawn", map[string]any{"id": id, "command": "sleep 600"}, nil)
	}
	st := killFleetdAwaitRestart(t, e, "kb", 20*time.Second, serve.Log, nil)
	if st.MembersLost != 2 || len(st.LastLost) != 2 || !strings.Contains(st.LastLost[0], "alpha") || !strings.Contains(st.LastLost[1], "beta") || len(st.MembersBefore) != 0 {
		t.Fatalf("record after the restart: lost %d %v, pending %v; want alpha and beta lost", st.MembersLost, st.LastLost, st.MembersBefore)
	}
	want := fmt.Sprintf("restart ended 2 members (%s, %s)", st.LastLost[0], st.LastLost[1])

	var rows []struct {
		Name            string   `json:"name"`
		MembersLost     int      `json:"members_lost"`
		LastRestartLost []string `json:"last_restart_lost"`
		LostText        string   `json:"lost_text"`
	}
	if err := json.Unmarshal([]byte(e.MustRun("list", "--json").Stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("list --json: %v %+v", err, rows)
	}
	if r := rows[0]; r.MembersLost != 2 || len(r.LastRestartLost) != 2 || r.LostText != want {
		t.Errorf("list --json row: %+v; want 2 lost, %q", r, want)
	}
	if out := e.MustRun("list").Stdout; !strings.Contains(out, "kb: "+want) {
		t.Errorf("list does not say %q:\n%s", want, out)
	}
	var rep struct {
		Fleets []struct {
			Name            string   `json:"name"`
			MembersLost     int      `json:"members_lost"`
			LastRestartLost []string `json:"last_restart_lost"`
		} `json:"fleets"`
	}
	if err := json.Unmarshal([]byte(e.MustRun("status", "--json").Stdout), &rep); err != nil || len(rep.Fleets) != 1 {
		t.Fatalf("status --json: %v %+v", err, rep)
	}
	if f := rep.Fleets[0]; f.MembersLost != 2 || len(f.LastRestartLost) != 2 {
		t.Errorf("status --json: %+v; want 2 lost", f)
	}
	if out := e.MustRun("status").Stdout; !strings.Contains(out, "restart ended 2 members") {
		t.Errorf("status does not say the restart ended 2 members:\n%s", out)
	}
	if out := e.MustRun("status", "--wide").Stdout; !strings.Contains(out, want) {
		t.Errorf("status --wide does not say %q:\n%s", want, out)
	}
	if v := serveMetric(t, e, `fleetmgr_members_lost_total{fleet="kb"}`); v != 2 {
		t.Errorf("fleetmgr_members_lost_total{fleet=\"kb\"} = %v, want 2", v)
	}
	if !strings.Contains(serve.Log(), "members lost: the new fleetd reaped") {
		t.Errorf("serve's log does not say the restart ended members:\n%s", serve.Log())
	}
}

// TestDashboardShowsMembersLost (issue 24 item 3, the page): after a
// kill -9 of kb's fleetd with two live members, the supervisor's restart
// ends them, and kb's card says so in the words `list` uses: "restart
// ended 2 members (…)". Real serve, fleetd and herdr stand-ins, members
// in PTYs, Chromium.
func TestDashboardShowsMembersLost(t *testing.T) {
	browsertest.Require(t)
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	spawnMembers(t, e, "kb", []string{"alpha", "beta"}, map[string]string{"alpha": "sleep 600", "beta": "sleep 600"})
	p := openDashboard(t, e)
	card := `document.querySelector('[data-fleet="kb"]')`
	pageWait(t, p, card+` && `+card+`.dataset.state === 'running'`, 20*time.Second)
	if pageEval[bool](t, p, card+`.querySelector('.alerts li.lost') !== null`) {
		t.Fatalf("kb's card says a restart ended members before any restart: %q", pageEval[string](t, p, card+`.querySelector('.alerts').textContent`))
	}

	killFleetdAwaitRestart(t, e, "kb", 20*time.Second, serve.Log, func(st lifecycle.State) bool { return len(st.LastLost) == 2 })
	var rows []struct {
		LostText string `json:"lost_text"`
	}
	if err := json.Unmarshal([]byte(e.MustRun("list", "--json").Stdout), &rows); err != nil || len(rows) != 1 || !strings.HasPrefix(rows[0].LostText, "restart ended 2 members (") {
		t.Fatalf("list --json: %v %+v", err, rows)
	}
	want, _ := json.Marshal(rows[0].LostText)
	if _, err := p.WaitFor(fmt.Sprintf(`(() => { const li = %s.querySelector('.alerts li.lost'); return li !== null && li.textContent === %s; })()`, card, want), 20*time.Second); err != nil {
		t.Fatalf("kb's card does not say %s: %v; its alerts: %q", want, err, pageEval[string](t, p, card+`.querySelector('.alerts').textContent`))
	}
	pageClean(t, p, e)
}
