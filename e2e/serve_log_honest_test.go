package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestServeLogNeverClaimsAnEndItDidNotMake (issue 24 item 10): a pending
// restart whose fleetd.spawned.json names a live stranger (a forged or
// stale file) must not be logged as "ended": the stranger is not
// signalled, and serve's log says so.
func TestServeLogNeverClaimsAnEndItDidNotMake(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	e.MustRun("stop", "kb", "--yes")
	stranger := exec.Command("sleep", "600")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	pst, err := procfs.ReadStat(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	spawned := filepath.Join(e.StateDir, "fleets", "kb", "fleetd.spawned.json")
	if err := os.WriteFile(spawned, fmt.Appendf(nil, `{"pid":%d,"start_time":%d}`, stranger.Process.Pid, pst.StartTime), 0o600); err != nil {
		t.Fatal(err)
	}
	// A restart decided and due, not made (a serve killed in its backoff).
	svEditState(t, e, "kb", func(m map[string]any) {
		m["desired"], m["phase"], m["next_restart_at"] = "running", "restarting", time.Now().UTC().Format(time.RFC3339Nano)
		m["restarts"], m["last_restart_reason"] = 1, "fleetd exited: signal: killed"
	})
	serve := e.StartServe()
	var st lifecycle.State
	if !svWait(20*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Phase == lifecycle.PhaseRunning && st.Fleetd != nil
	}) {
		t.Fatalf("the pending restart was not made: %+v\n%s", st, serve.Log())
	}
	if !pidAlive(stranger.Process.Pid) {
		t.Fatalf("the stranger pid %d named by a forged fleetd.spawned.json was signalled", stranger.Process.Pid)
	}
	log := serve.Log()
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, fmt.Sprintf("pid=%d", stranger.Process.Pid)) && strings.Contains(l, "ended") {
			t.Errorf("serve's log says it ended pid %d, which it never signalled:\n%s", stranger.Process.Pid, l)
		}
	}
	if !strings.Contains(log, "not signalled") {
		t.Errorf("serve's log does not say the stranger was not signalled:\n%s", log)
	}
}
