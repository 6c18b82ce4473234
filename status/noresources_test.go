package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestNoResourcesLeavesProcUnread: a Collect asked for NoResources (the
// dashboard's warm-up sampling at serve start, when nobody looks) reports
// no resources for a running fleet, where the same Collect without it
// measures its fleetd's tree from /proc.
func TestNoResourcesLeavesProcUnread(t *testing.T) {
	st := lifecycle.State{Name: "kb", Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: 20001,
		Fleetd: liveFleetd(t, "kb"), StartedAt: time.Now().Add(-time.Minute)}
	c := kbCollector(t, st)
	rep, err := c.Collect(context.Background(), Request{NoResources: true})
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Fleets[0]; f.State != "running" || f.Resources != nil {
		t.Fatalf("NoResources: state %s, resources %+v", f.State, f.Resources)
	}
	rep, err = c.Collect(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Fleets[0]; f.Resources == nil || f.Resources.Procs < 1 {
		t.Fatalf("without NoResources: resources %+v (the test's fleetd runs)", f.Resources)
	}
}

// kbCollector is a Collector over a fleets.toml of one fleet, kb (port
// 20001), whose record is st; its roster and broker probes answer
// nothing.
func kbCollector(t *testing.T, st lifecycle.State) *Collector {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fleets.toml")
	body := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nport = 20001\n", filepath.Join(dir, "state"), dir)
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
	js, _ := json.Marshal(st)
	if err := os.MkdirAll(m.FleetDir("kb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.FleetDir("kb"), "state.json"), js, 0o600); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Manager: m, Interval: 100 * time.Millisecond, FleetTimeout: 100 * time.Millisecond,
		Roster: func(context.Context, *registry.Fleet) ([]RosterRow, error) { return nil, nil },
		Broker: func(context.Context, *registry.Fleet) (*Broker, error) { return nil, nil }})
	return c
}
