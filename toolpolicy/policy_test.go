package toolpolicy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

func load(t *testing.T, body string) *registry.Config {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "fleets.toml")
	body = "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n" + body
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := registry.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const rules = `tools.deny = ["fleet_debug_*"]

[fleets.kb]
project = "/src/kb"
command = ["fleetd"]
tools.deny = ["fleet_stop"]

[fleets.docs]
project = "/src/docs"
command = ["fleetd"]
tools.allow = ["fleet_list", "docs_*"]

[fleets.ext]
project = "/src/ext"
command = ["fleetd"]
host = "beta"
tools.deny = ["fleet_list"]
`

// TestDecide: deny wins over allow, [manager]'s deny applies to every
// fleet, a fleet's allow list hides the rest, and the reason names the
// file and line; a [fleets.NAME] with host = HOST narrows NAME@HOST.
func TestDecide(t *testing.T) {
	c := load(t, rules)
	p := New(c, nil)
	for _, tc := range []struct {
		fleet, tool string
		shown       bool
		why         string
	}{
		{"kb", "fleet_stop", false, `hidden on kb by fleets.toml:8 (tools.deny "fleet_stop")`},
		{"kb", "fleet_debug_x", false, `hidden on kb by fleets.toml:3 (tools.deny "fleet_debug_*")`},
		{"kb", "fleet_list", true, "no rule hides it"},
		{"docs", "fleet_stop", false, "hidden on docs by fleets.toml:13 (not in tools.allow)"},
		{"docs", "docs_search", true, `matches tools.allow "docs_*"`},
		{"docs", "docs_debug", true, ""},
		{"ext@beta", "fleet_list", false, `hidden on ext@beta by fleets.toml:19 (tools.deny "fleet_list")`},
		{"ext@gamma", "fleet_list", true, ""},
		{"other@beta", "fleet_debug_1", false, "tools.deny \"fleet_debug_*\""},
	} {
		d := p.Decide(tc.fleet, tc.tool)
		if d.Shown != tc.shown || !strings.Contains(d.Reason, tc.why) {
			t.Errorf("%s %s: %+v; want shown=%v, reason with %q", tc.fleet, tc.tool, d, tc.shown, tc.why)
		}
	}
}

// TestOverrides: hide and show are kept in the state dir, the newest
// matching one wins over the file, and an edit of the fleet's rules in the
// file voids them.
func TestOverrides(t *testing.T) {
	c := load(t, rules)
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	if err := Update(c, ActionShow, "kb", []string{"fleet_stop"}, t0); err != nil {
		t.Fatal(err)
	}
	if err := Update(c, ActionHide, "kb", []string{"fleet_l*"}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := Update(c, "drop", "kb", []string{"x"}, t0); err == nil {
		t.Error("unknown action accepted")
	}
	o, err := Load(c.Manager.StateDir)
	if err != nil || len(o.Entries) != 2 {
		t.Fatalf("overrides %+v, %v", o, err)
	}
	p := New(c, o)
	if d := p.Decide("kb", "fleet_stop"); !d.Shown || !strings.Contains(d.Reason, "fleetmgr tools show") {
		t.Errorf("shown by override: %+v", d)
	}
	if d := p.Decide("kb", "fleet_list"); d.Shown || !strings.Contains(d.Reason, "hidden on kb by `fleetmgr tools hide` at 2026-12-03 09:00:01 UTC") {
		t.Errorf("hidden by override: %+v", d)
	}
	if d := p.Decide("docs", "fleet_list"); !d.Shown {
		t.Errorf("another fleet's override applied: %+v", d)
	}
	// show again after the hide: the newest wins.
	if err := Update(c, ActionShow, "kb", []string{"fleet_l*"}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	o, _ = Load(c.Manager.StateDir)
	if d := New(c, o).Decide("kb", "fleet_list"); !d.Shown {
		t.Errorf("show after hide: %+v", d)
	}
	fp := New(c, o).Fingerprint([]string{"kb"})

	// The file's rules for kb change: kb's overrides are void; docs' stay.
	if err := Update(c, ActionHide, "docs", []string{"docs_x"}, t0); err != nil {
		t.Fatal(err)
	}
	c2 := load(t, strings.Replace(rules, `tools.deny = ["fleet_stop"]`, `tools.deny = ["fleet_stop", "kb_*"]`, 1))
	c2.Manager.StateDir = c.Manager.StateDir
	o, _ = Load(c.Manager.StateDir)
	p2 := New(c2, o)
	if d := p2.Decide("kb", "fleet_stop"); d.Shown || !strings.Contains(d.Reason, "fleets.toml:8") {
		t.Errorf("after the file changed: %+v", d)
	}
	if d := p2.Decide("docs", "docs_x"); d.Shown {
		t.Errorf("docs' override dropped: %+v", d)
	}
	if p2.Fingerprint([]string{"kb"}) == fp {
		t.Error("fingerprint did not change")
	}
	// The next update drops the void entries from the file.
	if err := Update(c2, ActionHide, "docs", []string{"docs_y"}, t0); err != nil {
		t.Fatal(err)
	}
	o, _ = Load(c.Manager.StateDir)
	for _, e := range o.Entries {
		if e.Fleet == "kb" {
			t.Errorf("void entry kept: %+v", e)
		}
	}
	// A damaged file is an error naming it.
	if err := os.WriteFile(Path(c.Manager.StateDir), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(c.Manager.StateDir); err == nil || !strings.Contains(err.Error(), "tools.json") {
		t.Errorf("damaged file: %v", err)
	}
}
