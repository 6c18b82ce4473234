package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestCheckCatchesWhatStartWouldHitLater: check fails on a herdr_bin that
// is not herdr and on a fleet whose project directory is missing, and
// passes on the stand-ins.
func TestCheckCatchesWhatStartWouldHitLater(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	if r := e.Run("check"); r.Code != 0 || !strings.Contains(r.Stdout, "answers like herdr") {
		t.Fatalf("check on the stand-ins: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	base, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	notHerdr := strings.Replace(string(base), bins.Herdr, "/bin/true", 1)
	if err := os.WriteFile(e.ConfigPath, []byte(notHerdr), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.Run("check"); r.Code == 0 || !strings.Contains(r.Stdout, "set [manager] herdr_bin to the herdr executable") {
		t.Fatalf("check with herdr_bin=/bin/true: exit %d\n%s", r.Code, r.Stdout)
	}
	if err := os.WriteFile(e.ConfigPath, base, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(e.Dir, "proj-kb")); err != nil {
		t.Fatal(err)
	}
	if r := e.Run("check"); r.Code == 0 || !strings.Contains(r.Stdout, "fleet kb: project") {
		t.Fatalf("check with a missing project: exit %d\n%s", r.Code, r.Stdout)
	}
}
