package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// shownRow is what list --json and status --json both say of a fleet's
// state (issue 24 item 9: they agree).
type shownRow struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	PID       int    `json:"pid"`
	LastError string `json:"last_error"`
	HerdrLeft string `json:"herdr_left"`
}

func shownList(t *testing.T, e *harness.Env) []shownRow {
	t.Helper()
	r := e.MustRun("list", "--json")
	var rows []shownRow
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.Stdout)
	}
	return rows
}

func shownStatus(t *testing.T, e *harness.Env) []shownRow {
	t.Helper()
	r := e.Run("status", "--json")
	var rep struct {
		Fleets []shownRow `json:"fleets"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("status --json (exit %d): %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	return rep.Fleets
}

// TestStaleRecordIsShownStale (issue 24 item 9): a state.json that records
// the fleet running with a stranger's pid (here this test's own child
// sleep, which is no fleetd of the fleet) is shown `stale` with why by
// list and status (text and JSON alike), never `running` with that pid;
// stop signals nothing. A fleet whose fleetd was killed with no serve
// supervising it is failed, and says its herdr session still runs and
// what ends it.
func TestStaleRecordIsShownStale(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})

	stranger := exec.Command("sleep", "600")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	k, err := procfs.KeyOf(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"name":"kb","desired":"running","phase":"running","port":%d,"fleetd":{"pid":%d,"start_time":%d},"started_at":%q}`,
		e.Ports["kb"], k.PID, k.StartTime, time.Now().UTC().Format(time.RFC3339))
	if err := os.MkdirAll(filepath.Join(e.StateDir, "fleets", "kb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.StateDir, "fleets", "kb", "state.json"), []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	why := fmt.Sprintf("pid %d", k.PID)
	check := func(what string, rows []shownRow) {
		t.Helper()
		if len(rows) != 1 || rows[0].State != "stale" || rows[0].PID != 0 || !strings.Contains(rows[0].LastError, why) || !strings.Contains(rows[0].LastError, "FLEET_NAME=kb") {
			t.Fatalf("%s with a forged record naming pid %d: %+v; want state stale, no pid, and why", what, k.PID, rows)
		}
	}
	check("list --json", shownList(t, e))
	check("status --json", shownStatus(t, e))
	r := e.MustRun("list")
	row := ""
	for _, l := range strings.Split(r.Stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "kb" {
			row = l
		}
	}
	if f := strings.Fields(row); len(f) < 5 || f[1] != "stale" || f[4] != "-" || !strings.Contains(r.Stdout, "kb: stale record: "+why) {
		t.Fatalf("list with a forged record:\n%s", r.Stdout)
	}
	r = e.Run("status")
	if !strings.Contains(r.Stdout, "stale") || !strings.Contains(r.Stdout, "stale record: "+why) {
		t.Fatalf("status with a forged record (exit %d):\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	e.MustRun("stop", "kb")
	if st, err := procfs.ReadStat(k.PID); err != nil || st.State == 'Z' {
		t.Fatalf("stop of a stale record signalled the stranger pid %d", k.PID)
	}
	if rows := shownList(t, e); len(rows) != 1 || rows[0].State != "stopped" {
		t.Fatalf("list after the stop of a stale record: %+v", rows)
	}

	// A failed fleet whose herdr session still runs shows that session.
	e.MustRun("start", "kb")
	st := readState(t, e, "kb")
	if st.Fleetd == nil || st.Herdr == nil {
		t.Fatalf("state after start: %+v", st)
	}
	_ = syscall.Kill(st.Fleetd.PID, syscall.SIGKILL)
	waitDead(t, st.Fleetd.PID, 5*time.Second)
	left := fmt.Sprintf("still runs (pid %d)", st.Herdr.PID)
	wait.For(t, 10*time.Second, "list to show kb failed", wait.Bool(func() bool {
		rows := shownList(t, e)
		return len(rows) == 1 && rows[0].State == "failed"
	}))
	for what, rows := range map[string][]shownRow{"list --json": shownList(t, e), "status --json": shownStatus(t, e)} {
		if len(rows) != 1 || rows[0].State != "failed" || !strings.Contains(rows[0].HerdrLeft+rows[0].LastError, left) || !strings.Contains(rows[0].LastError, "`fleetmgr stop kb` ends it") {
			t.Fatalf("%s of a failed fleet whose herdr server runs: %+v; want %q", what, rows, left)
		}
	}
	if r := e.MustRun("list"); !strings.Contains(r.Stdout, left) {
		t.Fatalf("list of a failed fleet whose herdr server runs:\n%s", r.Stdout)
	}
	e.MustRun("stop", "kb")
	waitDead(t, st.Herdr.PID, 10*time.Second)
}
