package e2e

import (
	"encoding/json"
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

// TestVerbEdges: `start --all` with no fleets configured is a no-op, not
// an error; a start that fails through the daemon reports the state the
// failure left (the daemon's error result carries none), as a local start
// does.
func TestVerbEdges(t *testing.T) {
	empty := harness.NewEnv(t, bins, "")
	r := empty.Run("start", "--all")
	if r.Code != 0 || !strings.Contains(r.Stderr, "no fleets are configured") {
		t.Fatalf("start --all with no fleets: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := empty.Run("stop", "--all", "--json"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "[]" {
		t.Fatalf("stop --all --json with no fleets: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}

	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "p"})
	setLine(t, e, "project", strconv.Quote(filepath.Join(e.Dir, "nonexistent")))
	local := e.Run("start", "p", "--json")
	e.StartServe()
	daemon := e.Run("start", "p", "--json")
	for _, c := range []struct {
		how string
		r   harness.Result
	}{{"local", local}, {"through the daemon", daemon}} {
		var outs []struct {
			Fleet, State, Error string
		}
		if err := json.Unmarshal([]byte(c.r.Stdout), &outs); err != nil || len(outs) != 1 {
			t.Fatalf("start --json %s: %v\n%s", c.how, err, c.r.Stdout)
		}
		if c.r.Code == 0 || outs[0].State == "" || !strings.Contains(outs[0].Error, "project directory") {
			t.Errorf("failed start %s: exit %d, %+v", c.how, c.r.Code, outs[0])
		}
	}
}
