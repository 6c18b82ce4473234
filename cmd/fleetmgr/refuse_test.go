package main

import (
	"net"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/guard"
)

// TestVerbRefusedByDaemonExits3: a start/stop/restart that the daemon's
// guard refuses exits 3, as `fleetmgr mcp` does for the same refusal and as
// a verb refused in a pane does (docs/SECURITY.md); it exited 1, like any
// other failure.
func TestVerbRefusedByDaemonExits3(t *testing.T) {
	// A "daemon" on this process's pid whose guard refuses every caller.
	cfgPath, _ := fakeDaemon(t, []string{"a", "b"}, func(c net.Conn) {
		daemon.Refuse(c, guard.Decision{Rule: "uid", Reason: "uid 0 is not in [guard] allowed_uids [65534]"})
	})
	for _, args := range [][]string{{"stop", "a"}, {"restart", "--all"}} {
		_, _, err := runCLI(cfgPath, args...)
		if err == nil || cmdutil.ExitCode(err) != 3 || !strings.Contains(err.Error(), "rule uid") {
			t.Errorf("%v refused by the daemon: %v (exit status %d), want exit 3 naming the rule", args, err, cmdutil.ExitCode(err))
		}
	}
}
