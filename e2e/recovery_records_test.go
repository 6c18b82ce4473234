package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// A CLI SIGKILLed mid-start: list does not say "starting" forever, the
// next start adopts the fleetd the killed one spawned (no twin, no
// refusal), and stop kills it.
func TestInterruptedStartIsStoppable(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "slow"})
	slowCommand(t, e, 1500*time.Millisecond)
	cli := startCLI(t, e, "slow")
	fpid := spawnedPID(t, e, "slow", "fleetd", 15*time.Second)
	_ = cli.Process.Kill()
	_ = cli.Wait()
	wait.For(t, 10*time.Second, "the orphaned fleetd to bind its port", wait.Bool(func() bool { return portBound(e.Ports["slow"]) }))
	var rows []struct {
		Name, State string
		LastError   string `json:"last_error"`
	}
	r := e.MustRun("list", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].State == "starting" || !strings.Contains(rows[0].LastError, "interrupted") {
		t.Fatalf("list after an interrupted start: %s", r.Stdout)
	}
	r = e.Run("start", "slow")
	if want := fmt.Sprintf("fleetd pid %d on port %d, spawned by an interrupted start", fpid, e.Ports["slow"]); r.Code != 0 || !strings.Contains(r.Stdout, "slow: adopted") || !strings.Contains(r.Stdout, want) {
		t.Fatalf("start over the fleetd an interrupted start spawned: exit %d, want %q\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	if st := readState(t, e, "slow"); st.Phase != "running" || st.Fleetd == nil || st.Fleetd.PID != fpid || st.Herdr == nil {
		t.Fatalf("state after adoption: %+v; want running with fleetd %d and the herdr server recorded", st, fpid)
	}
	r = e.MustRun("list", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil || len(rows) != 1 || rows[0].State != "running" {
		t.Fatalf("list after the adopting start: %s", r.Stdout)
	}
	e.MustRun("stop", "slow")
	waitDead(t, fpid, 5*time.Second)
	if portBound(e.Ports["slow"]) {
		t.Fatal("port still bound after stop")
	}
}

// With the state dir gone, start refuses naming the running
// fleetd and stop finds it; with a corrupt state.json, list shows the
// other fleets and that fleet's error, and stop still works.
func TestStopWithoutRecords(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "ok"}, harness.Fleet{Name: "bad"})
	e.MustRun("start", "ok", "bad")
	okPID := readState(t, e, "ok").Fleetd.PID
	badPID := readState(t, e, "bad").Fleetd.PID

	if err := os.RemoveAll(filepath.Join(e.StateDir, "fleets", "ok")); err != nil {
		t.Fatal(err)
	}
	r := e.Run("start", "ok")
	if want := fmt.Sprintf("fleet ok already runs as pid %d, not in fleetmgr's records", okPID); r.Code == 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("start with lost state: exit %d, want %q\n%s%s", r.Code, want, r.Stdout, r.Stderr)
	}
	e.MustRun("stop", "ok")
	waitDead(t, okPID, 5*time.Second)

	if err := os.WriteFile(filepath.Join(e.StateDir, "fleets", "bad", "state.json"), []byte("garbage{"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.MustRun("list", "--json")
	var rows []struct {
		Name, State string
		LastError   string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	if len(rows) != 2 || rows[0].Name != "bad" || rows[0].State != "unknown" || !strings.Contains(rows[0].LastError, "corrupt") || rows[1].State != "stopped" {
		t.Fatalf("list with a corrupt state.json: %s", r.Stdout)
	}
	e.MustRun("stop", "bad")
	waitDead(t, badPID, 5*time.Second)
	if st := readState(t, e, "bad"); st.Phase != "stopped" {
		t.Fatalf("state after stop: %+v", st)
	}
}
