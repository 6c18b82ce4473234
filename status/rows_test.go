package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestRowsAreCollectsStart: Rows gives, without probing anything, the rows
// Collect starts from: a running fleet (fleetd = this test process, alive)
// with pid and uptime but no roster (-1), a stopped one with 0 members, a
// restarting one with its pending restart, a remote one REMOTE; an
// unknown name is an error naming the valid ones.
func TestRowsAreCollectsStart(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [20100, 20110]\n", filepath.Join(dir, "state"))
	for i, n := range []string{"run", "off", "wait"} {
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", n, dir, 20101+i)
	}
	fmt.Fprintf(&b, "[fleets.far]\nproject = %q\ncommand = [\"fleetd\"]\nport = 20109\nhost = \"elsewhere.example\"\n", dir)
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
	fleetd := liveFleetd(t, "run")
	due := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	states := map[string]lifecycle.State{
		"run": {Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20101,
			Fleetd: fleetd, StartedAt: time.Now().Add(-90 * time.Second), Restarts: 1},
		"off": {Desired: lifecycle.DesiredStopped, Phase: lifecycle.PhaseStopped},
		"wait": {Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRestarting, Restarts: 3,
			Supervision: lifecycle.Supervision{LastRestartReason: "fleetd exited: signal: killed", NextRestartAt: due}},
	}
	for n, st := range states {
		st.Name = n
		js, _ := json.Marshal(st)
		if err := os.MkdirAll(m.FleetDir(n), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.FleetDir(n), "state.json"), js, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Options{Manager: m, Roster: func(context.Context, *registry.Fleet) ([]RosterRow, error) {
		t.Error("Rows read a roster")
		return nil, nil
	}})
	rows, err := c.Rows(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Fleet{}
	var names []string
	for _, r := range rows {
		got[r.Name] = r
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "far,off,run,wait" {
		t.Fatalf("rows %v, want far,off,run,wait (sorted)", names)
	}
	if r := got["run"]; r.State != "running" || r.PID != fleetd.PID || r.UptimeS < 89 || r.MemberCount != -1 || r.Health != nil || r.Restarts != 1 || r.Members == nil {
		t.Errorf("run: %+v", r)
	}
	if r := got["off"]; r.State != "stopped" || r.MemberCount != 0 || r.PID != 0 {
		t.Errorf("off: %+v", r)
	}
	if r := got["wait"]; r.State != "restarting" || !r.NextRestartAt.Equal(due) || r.MemberCount != -1 || r.LastRestartReason == "" {
		t.Errorf("wait: %+v", r)
	}
	if r := got["far"]; r.State != "remote" || r.Verdict != Remote || r.Host != "elsewhere.example" {
		t.Errorf("far: %+v", r)
	}
	// What Collect reports for the fleets it does not probe is the same row.
	rep, err := c.Collect(context.Background(), Request{Fleets: []string{"off", "wait", "far"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Fleets {
		a, _ := json.Marshal(f)
		b, _ := json.Marshal(got[f.Name])
		if string(a) != string(b) {
			t.Errorf("%s: Collect %s, Rows %s", f.Name, a, b)
		}
	}
	if _, err := c.Rows([]string{"run", "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown fleet: err %v", err)
	}
}
