package status

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestCollectShowsSupervision: a fleet's supervision record (the last
// restart's reason, a pending restart, a crash loop) reaches the report,
// whose JSON still follows docs/status-schema.json, and the table's DETAIL
// says it compactly, only where set.
func TestCollectShowsSupervision(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n", state)
	for i, n := range []string{"calm", "loop", "plain", "wait"} {
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", n, dir, 20001+i)
	}
	cfgPath := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
	due := time.Now().Add(30 * time.Second).UTC().Truncate(time.Millisecond)
	crash := "crash loop: 5 restarts within 5m0s, the last after fleetd exited with exit status 3; not restarting until `fleetmgr start loop` or `fleetmgr restart loop`"
	states := map[string]lifecycle.State{
		// Stopped after two restarts; a stale next_restart_at is not pending.
		"calm": {Desired: lifecycle.DesiredStopped, Phase: lifecycle.PhaseStopped, Restarts: 2, LastExit: "exit status 3",
			Supervision: lifecycle.Supervision{LastRestartReason: "fleetd exited: exit status 3", NextRestartAt: due}},
		"loop": {Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseFailed, Restarts: 5, LastExit: "exit status 3", LastError: crash,
			Supervision: lifecycle.Supervision{LastRestartReason: "fleetd exited: exit status 3", CrashLoop: true}},
		"plain": {Desired: lifecycle.DesiredStopped, Phase: lifecycle.PhaseStopped},
		"wait": {Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRestarting, Restarts: 1, LastExit: "signal: killed",
			Supervision: lifecycle.Supervision{LastRestartReason: "health: 3 consecutive /healthz failures (last: timeout)", NextRestartAt: due}},
	}
	for n, st := range states {
		st.Name = n
		js, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(m.FleetDir(n), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.FleetDir(n), "state.json"), js, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Options{Manager: m, Roster: func(context.Context, *registry.Fleet) ([]RosterRow, error) {
		t.Error("roster read for a fleet that is not running")
		return nil, nil
	}})
	rep, err := c.Collect(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Fleet{}
	for _, f := range rep.Fleets {
		rows[f.Name] = f
	}
	if f := rows["wait"]; f.State != "restarting" || !f.NextRestartAt.Equal(due) || f.LastRestartReason != states["wait"].LastRestartReason || f.CrashLoop {
		t.Errorf("wait: %+v", f)
	}
	if f := rows["loop"]; !f.CrashLoop || f.LastRestartReason == "" || !f.NextRestartAt.IsZero() {
		t.Errorf("loop: %+v", f)
	}
	if f := rows["calm"]; !f.NextRestartAt.IsZero() || f.LastRestartReason == "" || f.CrashLoop {
		t.Errorf("calm: a stopped fleet shows a pending restart or lacks its last reason: %+v", f)
	}

	// The JSON: the new fields only where set, and valid for the schema.
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join("..", "docs", "status-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("report violates docs/status-schema.json: %v\n%s", err, js)
	}
	var raw struct{ Fleets []map[string]any }
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range raw.Fleets {
		name := f["name"].(string)
		_, next := f["next_restart_at"]
		_, loop := f["crash_loop"]
		_, reason := f["last_restart_reason"]
		if next != (name == "wait") || loop != (name == "loop") || reason != (name != "plain") {
			t.Errorf("%s: JSON fields next_restart_at %v crash_loop %v last_restart_reason %v: %v", name, next, loop, reason, f)
		}
	}

	// The table.
	var out bytes.Buffer
	if err := Render(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for l := range strings.Lines(out.String()) {
		name, _, _ := strings.Cut(l, " ")
		lines[name] = strings.TrimSpace(l)
	}
	for name, want := range map[string]string{
		"wait":  "  restarting in 30s (reason: health: 3 consecutive /healthz failures (last: timeout)); last exit: signal: killed",
		"loop":  "  crash loop: 5 restarts within 5m0s, the last after fleetd exited with exit status 3; not restarting until `fleetmgr start loop` or `fleetmgr restart loop`",
		"calm":  "  last restart: fleetd exited: exit status 3",
		"plain": "  0", // MEMBERS, then no detail
	} {
		if !strings.HasSuffix(lines[name], want) {
			t.Errorf("%s row does not end with %q:\n%s", name, want, out.String())
		}
	}
	for _, unwanted := range []string{"last error", "last exit: exit status 3", "last restart: fleetd exited: exit status 3; crash loop"} {
		if strings.Contains(out.String(), unwanted) {
			t.Errorf("table says %q:\n%s", unwanted, out.String())
		}
	}
}
