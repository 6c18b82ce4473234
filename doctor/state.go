package doctor

import (
	"context"
	"fmt"

	"github.com/fleetmgr/fleetmgr/registry"
)

// checkState reads what the verbs read back from the state dir before
// they act, without writing: ports.json (every verb allocates ports from
// it, so a corrupt one stops them all) and each fleet's state.json. A
// file that would stop a verb is an error naming it and the fix the verb
// would give.
func checkState(_ context.Context, e *checkEnv) []Finding {
	dir := e.cfg.Manager.StateDir
	var out []Finding
	if err := registry.CheckPortsFile(dir); err != nil {
		out = append(out, Finding{Check: "state", Severity: SevError, Subject: dir, Message: err.Error(),
			Fix: "fix or remove the file named (fleets without a fixed port then get new ports)"})
	}
	bad := 0
	for _, n := range e.cfg.Names() {
		if _, err := e.m.State(n); err != nil {
			bad++
			out = append(out, Finding{Check: "state", Severity: SevError, Subject: "fleet " + n, Message: err.Error(),
				Fix: fmt.Sprintf("run `fleetmgr stop %s`: it stops what runs of the fleet and sets the file aside", n)})
		}
	}
	if len(out) == 0 {
		out = append(out, Finding{Check: "state", Severity: SevOK, Subject: dir,
			Message: fmt.Sprintf("ports.json and %d fleet state file(s) read back", len(e.cfg.Names())-bad)})
	}
	return out
}
