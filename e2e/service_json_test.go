package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestServicePrintJSON: `service install --print --json` wrote the bare
// unit file to stdout, which a script reading --json cannot parse; it is
// one JSON object with the definition and where it would go, and nothing
// is installed.
func TestServicePrintJSON(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	r := e.MustRun("service", "install", "--print", "--manager", "systemd", "--json")
	var got struct{ Kind, Path, Printed string }
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON (%v):\n%s", err, r.Stdout)
	}
	if got.Kind != "systemd" || !strings.HasSuffix(got.Path, "fleetmgr.service") || !strings.Contains(got.Printed, "ExecStart=") {
		t.Fatalf("%+v", got)
	}
	if plain := e.MustRun("service", "install", "--print", "--manager", "systemd"); plain.Stdout != got.Printed {
		t.Fatalf("--print without --json prints another definition:\n%s\nvs\n%s", plain.Stdout, got.Printed)
	}
}
