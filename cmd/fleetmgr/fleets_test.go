package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/serveclient"
)

// TestStopAllSaysASharedErrorOnce: `fleetmgr stop --all` against a daemon
// that refuses this caller (its guard closes the connection) said the
// refusal once per fleet (three times, with differing tails: EOF, broken
// pipe); it is now said once, naming the fleets, and the fleets after the
// first are not tried against that daemon.
func TestStopAllSaysASharedErrorOnce(t *testing.T) {
	// A "daemon" on this process's pid whose socket accepts and hangs up.
	cfgPath, sock := fakeDaemon(t, []string{"a", "b", "c"}, func(c net.Conn) { c.Close() })

	stdout, stderr, err := runCLI(cfgPath, "stop", "--all")
	if err == nil {
		t.Fatalf("stop --all against a refusing daemon succeeded\nstdout:\n%s", stdout)
	}
	all := err.Error() + "\n" + stdout + stderr
	refusal := "fleetmgr serve on " + sock + " refused or failed"
	if n := strings.Count(all, refusal); n != 1 {
		t.Fatalf("the refusal is said %d times, want once:\nerror:\n%v\nstdout:\n%s\nstderr:\n%s", n, err, stdout, stderr)
	}
	if !strings.HasPrefix(err.Error(), "a, b, c: "+refusal) {
		t.Fatalf("error does not name the fleets it is about: %v", err)
	}

	// --json: one outcome per fleet, each failed with that error.
	stdout, _, err = runCLI(cfgPath, "stop", "--all", "--json")
	if err == nil || strings.Count(err.Error(), refusal) != 1 {
		t.Fatalf("stop --all --json: %v", err)
	}
	var outs []serveclient.Outcome
	if err := json.Unmarshal([]byte(stdout), &outs); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(outs) != 3 {
		t.Fatalf("%d outcomes, want 3: %+v", len(outs), outs)
	}
	for i, o := range outs {
		if o.Fleet != []string{"a", "b", "c"}[i] || o.OK || !strings.HasPrefix(o.Error, refusal) || o.Port != 20001+i {
			t.Errorf("outcome %d: %+v", i, o)
		}
	}
}
