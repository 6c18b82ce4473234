package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestStateDirSquatted: another local user (nobody) made the state dir
// first — as anyone can under /tmp — and planted a link where fleetmgr
// writes fleetd's log, pointing at a file only the operator may write.
// Before privdir, `fleetmgr start` appended fleetd's output to that file
// through the link. Now start, serve and serve --detach refuse the state
// dir naming its owner, and the file is untouched; a state dir of the
// operator's that others may write into is refused the same way.
func TestStateDirSquatted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (nobody)")
	}
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	victim := filepath.Join(e.Dir, "victim")
	const original = "the operator's own file\n"
	if err := os.WriteFile(victim, []byte(original), 0o600); err != nil {
		t.Fatal(err)
	}
	fleetDir := filepath.Join(e.StateDir, "fleets", "kb")
	if err := os.MkdirAll(fleetDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(fleetDir, "fleetd.log")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.StateDir, filepath.Join(e.StateDir, "fleets"), fleetDir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Lchown(filepath.Join(fleetDir, "fleetd.log"), 65534, 65534)

	unchanged := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != original {
			t.Fatalf("%s wrote through the planted link: %q (%v)", what, b, err)
		}
	}
	refused := func(what string, r harness.Result, want string) {
		t.Helper()
		if r.Code == 0 || !strings.Contains(r.Stderr+r.Stdout, want) {
			t.Fatalf("%s: exit %d, want a refusal naming %q\nstdout:\n%s\nstderr:\n%s", what, r.Code, want, r.Stdout, r.Stderr)
		}
		unchanged(what)
	}
	refused("start", e.Run("start", "kb"), "owned by uid 65534")
	refused("serve", e.Run("serve"), "owned by uid 65534")
	refused("serve --detach", e.Run("serve", "--detach"), "owned by uid 65534")
	if r := e.Run("list", "--json"); strings.Contains(r.Stdout, `"running"`) {
		t.Fatalf("a fleet runs after the refusals:\n%s", r.Stdout)
	}

	// The operator's own state dir, but writable by others.
	for _, d := range []string{e.StateDir, filepath.Join(e.StateDir, "fleets"), fleetDir} {
		if err := os.Lchown(d, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	refused("start (state dir 0777)", e.Run("start", "kb"), "chmod 700")

	// Made private again (its content checked: the link removed), it works.
	if err := os.Remove(filepath.Join(fleetDir, "fleetd.log")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.StateDir, filepath.Join(e.StateDir, "fleets"), fleetDir} {
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.MustRun("start", "kb")
	unchanged("start in a private state dir")
}
