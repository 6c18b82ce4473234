package status

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// TestCrashLoopDetailKeepsTheWayOut: a crash loop's DETAIL is cut to fit
// the table, and the cut fell on its end, the one part that says what to
// do ("not restarting until `fleetmgr start NAME` or `fleetmgr restart
// NAME`"): with a long failure, the table said only "…last log ...".
func TestCrashLoopDetailKeepsTheWayOut(t *testing.T) {
	reason := "start failed: fleet builder: fleetd exited during start (exit status 7); last log lines of /home/op/.local/state/fleetmgr/fleets/builder/fleetd.log:"
	f := Fleet{Name: "builder", State: "failed", Restarts: 5, CrashLoop: true, LastRestartReason: reason,
		LastError: "crash loop: 5 restarts within 5m0s, then " + reason + "; not restarting until `fleetmgr start builder` or `fleetmgr restart builder`"}
	got := fleetDetail(f, time.Now())
	for _, want := range []string{"crash loop: 5 restarts within 5m0s", "`fleetmgr start builder`", "`fleetmgr restart builder`"} {
		if !strings.Contains(got, want) {
			t.Errorf("DETAIL %q lacks %q", got, want)
		}
	}
	if len(got) > 240 {
		t.Errorf("DETAIL is %d bytes long, not cut to fit: %q", len(got), got)
	}
}

// TestDetailCutIsValidUTF8: a reason cut to fit the table is cut between
// characters, never inside one (the table is UTF-8 text).
func TestDetailCutIsValidUTF8(t *testing.T) {
	for n := 100; n < 130; n++ {
		s := strings.Repeat("a", n) + strings.Repeat("é", 20)
		if got := oneLine(s); !utf8.ValidString(got) {
			t.Fatalf("oneLine of %d ASCII bytes then é…: invalid UTF-8 %q", n, got)
		}
	}
}

// TestUptimeNeverNegative: a fleetd whose recorded start lies in the
// future (the clock was set back since) got a negative uptime_s, which
// docs/status-schema.json forbids (minimum 0), and the table showed it.
func TestUptimeNeverNegative(t *testing.T) {
	self := liveFleetd(t, "kb") // a live "fleetd"
	st := lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: self, StartedAt: time.Now().Add(time.Hour)}
	c := kbCollector(t, st)
	rep, err := c.Collect(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Fleets[0]; f.State != "running" || f.UptimeS < 0 {
		t.Fatalf("fleet started in the future: state %s, uptime_s %v", f.State, f.UptimeS)
	}
	var out bytes.Buffer
	if err := Render(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), " -1h") || strings.Contains(out.String(), " -59m") {
		t.Fatalf("table shows a negative uptime:\n%s", out.String())
	}
}
