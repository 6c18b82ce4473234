package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// statusEscape is the herdr stand-in's agent-status hook, as printf writes it.
func statusEscape(states ...string) string {
	var b strings.Builder
	for _, s := range states {
		b.WriteString(`\033]777;herdr-status;` + s + `\007`)
	}
	return b.String()
}

// TestStatusFromPush (issue 26), at protocol 20 (herdr 0.8.2: replayed history, a lagging
// subscriber skips silently) and 22 (0.9.x: live only, events_lost and a close): fleetmgr
// serve follows the fleet's herdr from its events. With status asked at the longest interval
// (10 minutes, so no sampling could see a change in time), a status escape in one member's
// pane shows as BLOCKED at once while the other member keeps WORKING; a burst that overruns
// the stand-in's (shrunk) event history leaves no final state lost; each member pane carries
// fleetmgr's verdict as a label (pane.report_metadata); herdr killed and started again by the
// supervisor is subscribed again.
func TestStatusFromPush(t *testing.T) {
	for _, proto := range []int{20, 22} {
		t.Run(fmt.Sprint("protocol", proto), func(t *testing.T) { testStatusFromPush(t, proto) })
	}
}

func testStatusFromPush(t *testing.T, proto int) {
	e := harness.NewEnv(t, bins, `pass_env = ["STANDIN_HERDR_PROTOCOL", "STANDIN_HERDR_EVENT_HISTORY"]`+"\n[status]\ninterval = \"1s\"\n",
		harness.Fleet{Name: "pf"})
	e.Environ = append(e.Environ, fmt.Sprintf("STANDIN_HERDR_PROTOCOL=%d", proto), "STANDIN_HERDR_EVENT_HISTORY=16")
	sch := statusSchema(t)
	serve := e.StartServe()
	e.MustRun("start", "pf")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["pf"]))
	burst := make([]string, 0, 81)
	for range 40 {
		burst = append(burst, "working", "idle")
	}
	burst = append(burst, "idle")
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "worker",
		"command": fmt.Sprintf(`printf '%s'; while true; do date; sleep 0.2; done`, statusEscape("working"))}, nil)
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "flip",
		"command": fmt.Sprintf(`printf '%s'; read a; printf '%s'; read b; printf '%s'; sleep 600`,
			statusEscape("working"), statusEscape("blocked"), statusEscape(burst...))}, nil)

	// The tracker judges both members from its own reads (it logs each verdict); from then on
	// a status needs no sampling.
	// Their first verdicts may be IDLE (before the claim is read): wait for the busy ones, or
	// a status at a 10-minute interval would sample a member not yet read twice.
	workerBusy := regexp.MustCompile(`msg="member verdict" fleet=pf member=worker \S+ from=\S* to=WORKING`)
	flipStalled := regexp.MustCompile(`msg="member verdict" fleet=pf member=flip \S+ from=\S* to=STALLED`)
	wait.For(t, 30*time.Second, "serve's tracker judging worker WORKING and flip STALLED", func() (bool, string) {
		l := serve.Log()
		return workerBusy.MatchString(l) && flipStalled.MatchString(l), ""
	})
	long := func() *status.Report { return statusJSON(t, e, sch, "--interval", "10m", "pf") }
	var rep *status.Report
	wait.For(t, 20*time.Second, "worker WORKING and flip STALLED through events", func() (bool, string) {
		rep = long()
		f := fleetRow(t, rep, "pf")
		w, fl := memberRow(t, f, "worker"), memberRow(t, f, "flip")
		ok := f.Herdr != nil && f.Herdr.Updates != nil && f.Herdr.Updates.Mode == status.UpdatesEvents &&
			w.Verdict == status.Working && fl.Verdict == status.Stalled
		return ok, fmt.Sprintf("herdr %+v worker %s flip %s", f.Herdr, w.Verdict, fl.Verdict)
	})
	f := fleetRow(t, rep, "pf")
	if f.Herdr.Protocol != proto {
		t.Fatalf("herdr protocol %d, want %d", f.Herdr.Protocol, proto)
	}
	flipPane, workerPane := memberRow(t, f, "flip").PaneID, memberRow(t, f, "worker").PaneID
	hc := &herdr.Client{Socket: e.HerdrSocket("pf")}
	ctx := context.Background()
	label := func(pane string) string {
		p, err := hc.PaneGet(ctx, pane)
		if err != nil {
			return "pane.get: " + err.Error()
		}
		return p.StateLabels[status.LabelSource]
	}
	wait.For(t, 10*time.Second, "verdict labels in herdr's record of the panes", func() (bool, string) {
		w, fl := label(workerPane), label(flipPane)
		return w == "WORKING" && strings.HasPrefix(fl, "STALLED "), fmt.Sprintf("worker %q flip %q", w, fl)
	})

	// The status escape: BLOCKED long before any sampling at a 10-minute interval could say.
	if err := hc.PaneSendInput(ctx, flipPane, "", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	took := wait.For(t, 15*time.Second, "flip BLOCKED while worker keeps WORKING", func() (bool, string) {
		rep = long()
		f := fleetRow(t, rep, "pf")
		w, fl := memberRow(t, f, "worker"), memberRow(t, f, "flip")
		return fl.Verdict == status.Blocked && w.Verdict == status.Working, fmt.Sprintf("worker %s flip %s", w.Verdict, fl.Verdict)
	})
	t.Logf("protocol %d: status escape → BLOCKED in status --json after %s (interval 10m)", proto, took.Round(time.Millisecond))
	wait.For(t, 10*time.Second, "flip labelled BLOCKED", func() (bool, string) { l := label(flipPane); return l == "BLOCKED", l })

	// A burst of 81 status changes overruns the 16-event history: protocol 20 skips silently,
	// protocol 22 says events_lost and closes; either way the final state (idle) arrives.
	resyncs := fleetRow(t, rep, "pf").Herdr.Updates.Resyncs
	if err := hc.PaneSendInput(ctx, flipPane, "", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "flip IDLE after the burst", func() (bool, string) {
		rep = long()
		fl := memberRow(t, fleetRow(t, rep, "pf"), "flip")
		return fl.Verdict == status.Idle && fl.AgentStatus == herdr.StatusIdle, fmt.Sprintf("flip %s (%s)", fl.Verdict, fl.AgentStatus)
	})
	if proto >= 22 {
		wait.LogLine(t, 10*time.Second, serve.Log, "events_lost")
		if n := fleetRow(t, rep, "pf").Herdr.Updates.Resyncs; n <= resyncs {
			t.Errorf("resyncs %d after events_lost, was %d", n, resyncs)
		}
	}

	// herdr killed: the supervisor starts the fleet again, and the tracker subscribes to the
	// new server.
	st := readState(t, e, "pf")
	before := fleetRow(t, rep, "pf").Herdr.Updates.Resyncs
	if err := syscall.Kill(st.Herdr.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, st.Herdr.PID, 5*time.Second)
	wait.For(t, 45*time.Second, "the fleet running again on a new herdr", func() (bool, string) {
		s := readState(t, e, "pf")
		return s.Phase == "running" && s.Herdr != nil && s.Herdr.PID != st.Herdr.PID && pidAlive(s.Herdr.PID), fmt.Sprintf("%s %+v", s.Phase, s.Herdr)
	})
	fd = connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["pf"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "again",
		"command": fmt.Sprintf(`printf '%s'; sleep 600`, statusEscape("blocked"))}, nil)
	wait.For(t, 30*time.Second, "the new member followed through events again", func() (bool, string) {
		rep = statusJSON(t, e, sch, "--interval", "1s", "pf")
		f := fleetRow(t, rep, "pf")
		if f.Herdr == nil || f.Herdr.Updates == nil || f.MemberCount < 1 {
			return false, fmt.Sprintf("%+v", f)
		}
		a := memberRow(t, f, "again")
		return f.Herdr.Updates.Mode == status.UpdatesEvents && f.Herdr.Updates.Resyncs > before && a.Verdict == status.Blocked,
			fmt.Sprintf("updates %+v again %s", f.Herdr.Updates, a.Verdict)
	})
	again := memberRow(t, fleetRow(t, rep, "pf"), "again").PaneID
	wait.For(t, 10*time.Second, "the new member's label", func() (bool, string) { l := label(again); return l == "BLOCKED", l })
}

// TestStatusWithoutPush: against a herdr that lacks the push methods (the stand-in at
// protocol 19 without them), serve samples as before: status reports updates "sampling" with
// the reason, the verdicts still come, and no label is reported. A protocol-20 stand-in that
// answers events.subscribe as an unknown method is sampled too.
func TestStatusWithoutPush(t *testing.T) {
	for _, c := range []struct {
		name     string
		protocol int
		reason   string
	}{{"protocol19", 19, "protocol 19"}, {"protocol20-no-methods", 20, "does not know"}} {
		t.Run(c.name, func(t *testing.T) {
			e := harness.NewEnv(t, bins, `pass_env = ["STANDIN_HERDR_PROTOCOL", "STANDIN_HERDR_WITHOUT_PUSH"]`+"\n[status]\ninterval = \"1s\"\n",
				harness.Fleet{Name: "np"})
			e.Environ = append(e.Environ, fmt.Sprintf("STANDIN_HERDR_PROTOCOL=%d", c.protocol), "STANDIN_HERDR_WITHOUT_PUSH=1")
			sch := statusSchema(t)
			serve := e.StartServe()
			e.MustRun("start", "np")
			fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["np"]))
			callTool(t, fd, "fleet_spawn", map[string]any{"id": "busy",
				"command": fmt.Sprintf(`printf '%s'; while true; do date; sleep 0.2; done`, statusEscape("working"))}, nil)
			callTool(t, fd, "fleet_spawn", map[string]any{"id": "stuck",
				"command": fmt.Sprintf(`printf '%s'; sleep 600`, statusEscape("blocked"))}, nil)
			wait.LogLine(t, 30*time.Second, serve.Log, "herdr updates: sampling")
			var rep *status.Report
			wait.For(t, 30*time.Second, "sampled verdicts", func() (bool, string) {
				rep = statusJSON(t, e, sch, "--interval", "1s", "np")
				f := fleetRow(t, rep, "np")
				if f.MemberCount != 2 {
					return false, fmt.Sprintf("%+v", f)
				}
				b, s := memberRow(t, f, "busy"), memberRow(t, f, "stuck")
				return b.Verdict == status.Working && s.Verdict == status.Blocked, fmt.Sprintf("busy %s stuck %s", b.Verdict, s.Verdict)
			})
			f := fleetRow(t, rep, "np")
			if u := f.Herdr.Updates; u == nil || u.Mode != status.UpdatesSampling || !strings.Contains(u.Reason, c.reason) {
				t.Errorf("updates = %+v, want sampling because of %q", u, c.reason)
			}
			p, err := herdr.New(e.HerdrSocket("np")).PaneGet(context.Background(), memberRow(t, f, "stuck").PaneID)
			if err != nil || len(p.StateLabels) != 0 {
				t.Errorf("labels on a herdr without pane.report_metadata: %+v %v", p, err)
			}
			if c.protocol < 20 { // check judges from ping alone
				r := e.MustRun("check", "--json")
				if !strings.Contains(r.Stdout, "no event subscription, so status samples it") {
					t.Errorf("check does not say np is sampled:\n%s", r.Stdout)
				}
			}
		})
	}
}
