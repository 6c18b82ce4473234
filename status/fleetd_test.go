package status

import (
	"os"
	"os/exec"
	"testing"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
)

// liveFleetd starts a sleep with FLEET_NAME=fleet in its environment, which
// lifecycle takes for the fleet's fleetd (a record naming any other
// process is stale: lifecycle/identity.go), and returns it as a record
// names it. It is killed when the test ends.
func liveFleetd(t *testing.T, fleet string) *lifecycle.Proc {
	t.Helper()
	c := exec.Command("sleep", "600")
	c.Env = append(os.Environ(), "FLEET_NAME="+fleet)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	k, err := procfs.KeyOf(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return &lifecycle.Proc{PID: k.PID, StartTime: k.StartTime}
}
