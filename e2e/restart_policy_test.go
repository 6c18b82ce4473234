package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestRestartPolicy (issue 24 item 4): `restart = "always" | "on-failure"
// | "never"` per fleet. always (the default) restarts a fleetd that
// exited 0; on-failure marks it stopped with its exit status, and
// restarts one that was killed; never marks a killed fleetd stopped with
// its exit status. list and status show each fleet's policy; a bad value
// is refused naming file, line and key.
func TestRestartPolicy(t *testing.T) {
	e := harness.NewEnv(t, bins, "",
		harness.Fleet{Name: "al"},
		harness.Fleet{Name: "of", Extra: `restart = "on-failure"`},
		harness.Fleet{Name: "nv", Extra: `restart = "never"`})
	serve := e.StartServe()
	e.MustRun("start", "al", "of", "nv")

	var rows []struct {
		Name          string `json:"name"`
		RestartPolicy string `json:"restart_policy"`
	}
	if err := json.Unmarshal([]byte(e.MustRun("list", "--json").Stdout), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.RestartPolicy
	}
	if got["al"] != "always" || got["of"] != "on-failure" || got["nv"] != "never" {
		t.Errorf("list --json restart_policy: %v", got)
	}
	if out := e.MustRun("list").Stdout; !strings.Contains(out, "RESTART") || !strings.Contains(out, "on-failure") || !strings.Contains(out, "never") {
		t.Errorf("list does not show the policies:\n%s", out)
	}
	if out := e.MustRun("status", "--wide").Stdout; !strings.Contains(out, "restart = never") || !strings.Contains(out, "restart = on-failure") {
		t.Errorf("status --wide does not show the policies:\n%s", out)
	}

	pid := func(n string) int { return readState(t, e, n).Fleetd.PID }
	al0, of0, nv0 := pid("al"), pid("of"), pid("nv")
	// SIGTERM: the stand-in shuts down gracefully, exit status 0.
	for _, p := range []int{al0, of0} {
		if err := syscall.Kill(p, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(nv0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var al, of, nv lifecycle.State
	if !svWait(20*time.Second, func() bool {
		al, of, nv = readState(t, e, "al"), readState(t, e, "of"), readState(t, e, "nv")
		return al.Phase == lifecycle.PhaseRunning && al.Fleetd != nil && al.Fleetd.PID != al0 &&
			of.Phase == lifecycle.PhaseStopped && nv.Phase == lifecycle.PhaseStopped
	}) {
		t.Fatalf("after the exits: al %s %v, of %s, nv %s\n%s", al.Phase, al.Fleetd, of.Phase, nv.Phase, serve.Log())
	}
	if of.LastExit != "exit status 0" || of.Desired != lifecycle.DesiredStopped || of.Fleetd != nil || !strings.Contains(of.PhaseReason, "restart = on-failure") {
		t.Errorf("on-failure after exit 0: last exit %q, desired %s, fleetd %v, reason %q", of.LastExit, of.Desired, of.Fleetd, of.PhaseReason)
	}
	if nv.LastExit != "signal: killed" || nv.Desired != lifecycle.DesiredStopped || !strings.Contains(nv.PhaseReason, "restart = never") {
		t.Errorf("never after kill -9: last exit %q, desired %s, reason %q", nv.LastExit, nv.Desired, nv.PhaseReason)
	}
	if al.Restarts != 1 || of.Restarts != 0 || nv.Restarts != 0 {
		t.Errorf("restarts: al %d, of %d, nv %d; want 1, 0, 0", al.Restarts, of.Restarts, nv.Restarts)
	}
	rowsByName := svList(t, e)
	if r := rowsByName["nv"]; r.State != "stopped" || r.LastExit != "signal: killed" {
		t.Errorf("list --json nv: %+v", r)
	}

	// on-failure restarts a fleetd that did not exit 0.
	e.MustRun("start", "of")
	of1 := pid("of")
	if err := syscall.Kill(of1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !svWait(20*time.Second, func() bool {
		of = readState(t, e, "of")
		return of.Phase == lifecycle.PhaseRunning && of.Fleetd != nil && of.Fleetd.PID != of1
	}) {
		t.Fatalf("on-failure did not restart a killed fleetd: %+v\n%s", of, serve.Log())
	}

	// A value outside the three is refused with file:line and the key.
	bad := harness.NewEnv(t, bins, "", harness.Fleet{Name: "x", Extra: `restart = "sometimes"`})
	if r := bad.Run("check"); r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "restart") || !strings.Contains(r.Stdout+r.Stderr, `"sometimes"`) || !strings.Contains(r.Stdout+r.Stderr, "fleets.toml:") {
		t.Errorf("restart = \"sometimes\": exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
