package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// The hostile pass's open points on issue 24 (docs: /work/notes CLOSING
// "A hostile pass at the end"): each test drives the real binary.

// TestEventsUnknownFleet: `fleetmgr events NAME` of a name the config
// does not define and the journal never saw is refused (exit 2) with the
// fleets the config defines, as the other verbs refuse it; a fleet
// removed from the config whose events the journal holds is still shown.
func TestEventsUnknownFleet(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "gone"})
	for _, args := range [][]string{{"events", "nofleet"}, {"events", "kb", "nofleet"}} {
		r := e.Run(args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, `unknown fleet "nofleet"`) || !strings.Contains(r.Stderr, "gone, kb") {
			t.Errorf("%v without serve: exit %d, want 2 naming nofleet and the fleets gone, kb:\n%s%s", args, r.Code, r.Stdout, r.Stderr)
		}
	}
	if r := e.Run("events", "kb"); r.Code != 0 {
		t.Errorf("events kb (defined, no events yet): exit %d\n%s", r.Code, r.Stderr)
	}

	serve := e.StartServe()
	e.MustRun("start", "gone")
	e.MustRun("stop", "--yes", "gone")
	var before string
	if !svWait(10*time.Second, func() bool {
		before = e.MustRun("events", "gone").Stdout
		return strings.Contains(before, "control")
	}) {
		t.Fatalf("no control event for gone's start and stop:\n%s\nserve log:\n%s", before, serve.Log())
	}
	editConfig(t, e, func(s string) string { return dropFleet(s, "gone") })
	e.MustRun("reload")
	r := e.Run("events", "gone")
	if r.Code != 0 || !strings.Contains(r.Stdout, "control") {
		t.Errorf("events of a removed fleet with history: exit %d, want 0 and its events:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = e.Run("events", "nofleet")
	if r.Code != 2 || !strings.Contains(r.Stderr, `unknown fleet "nofleet"`) || !strings.Contains(r.Stderr, "defines kb") {
		t.Errorf("events nofleet through serve: exit %d, want 2 naming kb:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// failingFleet adds to e's config a fleet name whose fleetd exits with
// status 3 during every start (it never answers /healthz), with extra
// TOML lines for its table.
func failingFleet(t *testing.T, e *harness.Env, name, extra string) {
	t.Helper()
	proj := filepath.Join(e.Dir, "proj-"+name)
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	editConfig(t, e, func(s string) string {
		return s + fmt.Sprintf("\n[fleets.%s]\nproject = %q\ncommand = [\"sh\", \"-c\", \"echo not today; exit 3\"]\nport = %d\n%s\n", name, proj, harness.FreePort(t), extra)
	})
}

// TestWhatNextNobodyRetries (issue 24 item 5, the sentences only unit
// rows covered): a start that does not become healthy says, in the
// CLI's error, status --json and the status table, that nothing retries
// it — with no serve running, and under a serve with restart = "never"
// — and what to run. The error status shows (last_error, the table's
// DETAIL) carries no log lines (item 8): it points to `fleetmgr logs`.
func TestWhatNextNobodyRetries(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"1s\"\nstart_retries = 2")
	failingFleet(t, e, "lone", "")
	failingFleet(t, e, "never", "restart = \"never\"")
	const cause = " did not become healthy: fleetd exited during start (exit status 3); "
	check := func(name, want string) {
		t.Helper()
		r := e.Run("start", name)
		if r.Code != 1 || !strings.Contains(r.Stderr, name+cause+want) || !strings.Contains(r.Stderr, "not today") {
			t.Errorf("start %s: exit %d, want 1, %q and the log line in:\n%s%s", name, r.Code, name+cause+want, r.Stdout, r.Stderr)
		}
		sch := statusSchema(t)
		f := fleetRow(t, statusJSON(t, e, sch, name), name)
		if f.State != "failed" || f.WhatNext != name+cause+want || f.StartRetriesLeft != nil {
			t.Errorf("status --json %s: state %s, what_next %q, start_retries_left %v; want failed, %q, none", name, f.State, f.WhatNext, f.StartRetriesLeft, name+cause+want)
		}
		if strings.Contains(f.LastError, "last log lines") || strings.Contains(f.LastError, "not today") || !strings.Contains(f.LastError, "`fleetmgr logs "+name+"`") {
			t.Errorf("status --json %s: last_error carries the log lines or does not point to fleetmgr logs: %q", name, f.LastError)
		}
		// The compact table cuts the sentence at a word and points to
		// --wide, where it is whole.
		narrow := e.MustRun("status", name).Stdout
		var row string
		for _, l := range strings.Split(narrow, "\n") {
			if strings.HasPrefix(l, name+" ") {
				row = l
			}
		}
		if !strings.HasSuffix(row, "… (--wide)") || !strings.Contains(name+cause+want, strings.Fields(strings.TrimSuffix(row, "… (--wide)"))[len(strings.Fields(strings.TrimSuffix(row, "… (--wide)")))-1]+" ") {
			t.Errorf("status %s: the row is not cut at a word ending in \"… (--wide)\":\n%s", name, narrow)
		}
		out := e.MustRun("status", "--wide", name).Stdout
		if !strings.Contains(out, name+cause+want) || strings.Contains(out, "last log lines") {
			t.Errorf("status --wide %s:\n%s", name, out)
		}
	}
	check("lone", "no fleetmgr serve runs, so nothing retries it; `fleetmgr start lone` to try again, or `fleetmgr serve` to retry it")

	serve := e.StartServe()
	check("never", "restart = never, so serve does not retry it; `fleetmgr start never` to try again")
	wait.Never(t, 3*time.Second, "a retry of a fleet with restart = never (the backoff is 1 s)", func() (bool, string) {
		st := readState(t, e, "never")
		return st.Restarts != 0 || st.Phase != "failed", fmt.Sprintf("%+v", st.Supervision)
	})
	if strings.Contains(serve.Log(), "msg=\"supervisor: restarting fleetd\" fleet=never") {
		t.Errorf("serve restarted a fleet with restart = never:\n%s", serve.Log())
	}
}

// TestToolsHideChecked: `fleetmgr tools hide` checks what it is given.
// A name longer than the MCP tool-name rule's 64 characters is refused
// (exit 2); a name or glob matching none of the fleet's tools as listed
// is refused, naming the tools it has (it would hide nothing); a fleet
// that never listed its tools takes the hide with a warning; and an
// override that matches no tool the fleet offers is listed as having
// no effect (`tools`, and unmatched_overrides in --json).
func TestToolsHideChecked(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	r := e.Run("tools", "hide", "kb", "ghost_tool")
	if r.Code != 0 || !strings.Contains(r.Stderr, "warning: kb has not listed its tools yet") {
		t.Errorf("hide on a fleet never started: exit %d, want 0 and a warning:\n%s", r.Code, r.Stderr)
	}
	long := strings.Repeat("t", 65)
	if r := e.Run("tools", "hide", "kb", long); r.Code != 2 || !strings.Contains(r.Stderr, "1 to 64") {
		t.Errorf("hide of a 65-character name: exit %d, want 2 and the 64 limit:\n%s", r.Code, r.Stderr)
	}
	if r := e.Run("tools", "hide", "kb", "bad.name"); r.Code != 2 {
		t.Errorf("hide of a name with a dot: exit %d, want 2:\n%s", r.Code, r.Stderr)
	}

	e.StartServe()
	e.MustRun("start", "kb")
	wait.For(t, 20*time.Second, "kb's tools listed", func() (bool, string) {
		rep := toolsReport(t, e, "kb")
		_, ok := toolState(rep, "kb", "fleet_whoami")
		return ok, fmt.Sprintf("%+v", rep)
	})
	rep := toolsReport(t, e, "kb")
	if len(rep.Unmatched) != 1 || rep.Unmatched[0].Tool != "ghost_tool" {
		t.Errorf("unmatched_overrides: %+v, want the ghost_tool hide", rep.Unmatched)
	}
	if out := e.MustRun("tools", "kb").Stdout; !strings.Contains(out, "hide kb ghost_tool") || !strings.Contains(out, "(no effect: kb offers no such tool now)") {
		t.Errorf("tools kb does not say the ghost_tool hide has no effect:\n%s", out)
	}
	r = e.Run("tools", "hide", "kb", "nonexist_tool")
	if r.Code == 0 || !strings.Contains(r.Stderr, "kb offers no tool nonexist_tool") || !strings.Contains(r.Stderr, "fleet_whoami") {
		t.Errorf("hide of a tool kb does not offer: exit %d, want a refusal naming its tools:\n%s", r.Code, r.Stderr)
	}
	for _, o := range toolsReport(t, e, "kb").Overrides {
		if o.Tool == "nonexist_tool" {
			t.Errorf("the refused hide was recorded: %+v", o)
		}
	}
	if r := e.Run("tools", "hide", "kb", "fleet_who*"); r.Code != 0 || strings.Contains(r.Stderr, "warning") {
		t.Errorf("hide of a glob matching a tool: exit %d:\n%s", r.Code, r.Stderr)
	}
	if s, _ := toolState(toolsReport(t, e, "kb"), "kb", "fleet_whoami"); s.State != "hidden" {
		t.Errorf("fleet_whoami after hiding fleet_who*: %+v", s)
	}
}

// TestStopMidRetryCountsNoRestart: a stop while serve waits out the
// backoff before retrying a failed start takes back the restart it had
// counted: restarts says how often fleetd was restarted (it said 1 for a
// retry that never ran).
func TestStopMidRetryCountsNoRestart(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"30s\"\nrestart_backoff_max = \"30s\"\nstart_retries = 3")
	failingFleet(t, e, "slow", "")
	serve := e.StartServe()
	if r := e.Run("start", "slow"); r.Code != 1 {
		t.Fatalf("start of a fleet that never becomes healthy: exit %d\n%s", r.Code, r.Stderr)
	}
	if !svWait(10*time.Second, func() bool { st := readState(t, e, "slow"); return st.Restarts == 1 && !st.NextRestartAt.IsZero() }) {
		t.Fatalf("no retry counted: %+v\nserve log:\n%s", readState(t, e, "slow").Supervision, serve.Log())
	}
	e.MustRun("stop", "--yes", "slow")
	st := readState(t, e, "slow")
	if st.Restarts != 0 || st.StartRetries != 0 || len(st.RestartTimes) != 0 || st.Phase != "stopped" {
		t.Errorf("after a stop during the backoff: phase %s, restarts %d, start retries %d, restart times %v; want stopped and none", st.Phase, st.Restarts, st.StartRetries, st.RestartTimes)
	}
	if row := retryList(t, e, "slow"); row.Restarts != 0 {
		t.Errorf("list after the stop: restarts %d, want 0", row.Restarts)
	}
}

// TestServeKilledMidRestart: a kill -9 of serve during an operator's
// restart (its start waiting for a slow fleetd) left no control event
// and a reason that blamed nobody. The next serve journals the
// interrupted action (control, outcome indeterminate) before its
// supervisor acts, and the supervisor's restart says the start was
// interrupted, not "fleetd not running" or "ended while no fleetmgr
// serve was supervising it".
func TestServeKilledMidRestart(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"1s\"")
	proj := filepath.Join(e.Dir, "proj-slow")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	// fleetd comes up 3 s after its spawn: the window to kill serve in.
	script := fmt.Sprintf("sleep 3; exec %s --config \"$1\"", bins.Fleetd)
	editConfig(t, e, func(s string) string {
		return s + fmt.Sprintf("\n[fleets.slow]\nproject = %q\ncommand = [\"sh\", \"-c\", %q, \"sh\", \"{{.ConfigPath}}\"]\nport = %d\n", proj, script, harness.FreePort(t))
	})
	serve := e.StartServe()
	e.MustRun("start", "slow")
	restart := e.Command(bins.Fleetmgr, "--config", e.ConfigPath, "restart", "--yes", "slow")
	if err := restart.Start(); err != nil {
		t.Fatal(err)
	}
	defer restart.Wait()
	wait.For(t, 10*time.Second, "the restart's start under way", func() (bool, string) {
		st := readState(t, e, "slow")
		return st.Phase == "starting" && st.Fleetd == nil, fmt.Sprintf("%s (%s)", st.Phase, st.PhaseReason)
	})
	killServe(t, serve)
	// What the killed serve spawned (the sleeping sh) dies with it here,
	// so nothing healthy is left to adopt.
	if p := readSpawnedPID(t, e, "slow"); p > 0 {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	serve = e.StartServe()
	wait.For(t, 30*time.Second, "the fleet running again under the new serve", func() (bool, string) {
		st := readState(t, e, "slow")
		return st.Phase == "running" && st.Fleetd != nil, fmt.Sprintf("%s (%s)", st.Phase, st.PhaseReason)
	})
	var ev []struct {
		Kind, Outcome, Detail, Origin string
	}
	wait.For(t, 10*time.Second, "the interrupted start in the journal", func() (bool, string) {
		out := e.MustRun("events", "slow", "--json").Stdout
		ev = ev[:0]
		_ = json.Unmarshal([]byte(out), &ev)
		for _, x := range ev {
			if x.Kind == "control" && x.Outcome == "indeterminate" && strings.HasPrefix(x.Detail, "start interrupted: the fleetmgr making it (a serve or CLI) died mid-way") {
				return true, ""
			}
		}
		return false, out
	})
	phases := e.MustRun("events", "slow", "--kind", "fleet.phase").Stdout
	if !strings.Contains(phases, "supervisor: start interrupted: the fleetmgr serve or CLI making it died mid-way") ||
		strings.Contains(phases, "ended while no fleetmgr serve") || strings.Contains(phases, "fleetd not running") {
		t.Errorf("the supervisor's restart does not say the start was interrupted:\n%s\nserve log:\n%s", phases, serve.Log())
	}
}

// readSpawnedPID is the pid fleetd.spawned.json of fleet name records (0:
// none).
func readSpawnedPID(t *testing.T, e *harness.Env, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.StateDir, "fleets", name, "fleetd.spawned.json"))
	if err != nil {
		return 0
	}
	var p struct {
		PID int `json:"pid"`
	}
	_ = json.Unmarshal(b, &p)
	return p.PID
}
