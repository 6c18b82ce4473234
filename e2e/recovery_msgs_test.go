package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// U1: a missing project directory is named as such, not blamed on
// herdr_bin. U2: a failure shows only what that attempt logged.
func TestStartErrorsNameTheCause(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "p"})
	b, _ := os.ReadFile(e.ConfigPath)
	setLine(t, e, "project", strconv.Quote(filepath.Join(e.Dir, "nonexistent")))
	r := e.Run("start", "p")
	if r.Code == 0 || !strings.Contains(r.Stderr, "project directory") || !strings.Contains(r.Stderr, "fleets.toml:") || strings.Contains(r.Stderr, "herdr_bin") {
		t.Fatalf("start with a missing project: exit %d\n%s", r.Code, r.Stderr)
	}
	if err := os.WriteFile(e.ConfigPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	setLine(t, e, "herdr_bin", `"/bin/cat"`)
	if r := e.Run("start", "p"); r.Code == 0 || !strings.Contains(r.Stderr, "unrecognized option") {
		t.Fatalf("start with herdr_bin /bin/cat: exit %d\n%s", r.Code, r.Stderr)
	}
	setLine(t, e, "herdr_bin", `"/bin/true"`)
	if r := e.Run("start", "p"); r.Code == 0 || strings.Contains(r.Stderr, "unrecognized option") {
		t.Fatalf("start with herdr_bin /bin/true shows an earlier attempt's log: exit %d\n%s", r.Code, r.Stderr)
	}
}
