package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestActPath: Act, the one path of the manager tools and the dashboard's
// actions: a fleet added to the file since the config was read is known
// after one reload (ifChanged) and acted on; a name the file does not
// define either is an *UnknownFleetError naming the file's fleets, with
// nothing done; a name that is no fleet name is refused without reading
// the file; an unknown verb is an error; a stop reports its steps to
// progress and in the result, and stop ignores lead.
func TestActPath(t *testing.T) {
	m := kbOnPort(t, 1025)
	path := m.Config().Path
	var reloads atomic.Int32
	p := New(Options{Manager: m, Version: "test", Reload: func(ctx context.Context, ifChanged bool) (*lifecycle.ReloadReport, error) {
		reloads.Add(1)
		cfg, err := registry.Load(path)
		if err != nil {
			return nil, err
		}
		return m.Reload(cfg)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = fmt.Appendf(b, "[fleets.fresh]\nproject = %q\ncommand = [\"fleetd\"]\nport = 1026\n", filepath.Dir(path))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var steps []lifecycle.Step
	res, err := p.Act(ctx, VerbStop, "fresh", true, func(s lifecycle.Step) { steps = append(steps, s) })
	if err != nil || res == nil || res.Fleet != "fresh" || res.State != lifecycle.PhaseStopped || res.Port != 1026 {
		t.Fatalf("stop of a fleet added to the file: %+v %v", res, err)
	}
	if len(steps) == 0 || len(steps) != len(res.Steps) || steps[0] != res.Steps[0] {
		t.Errorf("progress %+v, result steps %+v", steps, res.Steps)
	}
	if n := reloads.Load(); n != 1 || !m.InConfig("fresh") {
		t.Fatalf("reloads %d, fresh in config %v", n, m.InConfig("fresh"))
	}

	res, err = p.Act(ctx, VerbStart, "nope", false, nil)
	var unknown *UnknownFleetError
	if !errors.As(err, &unknown) || unknown.Fleet != "nope" || res != nil || err.Error() != fmt.Sprintf("unknown fleet %q: %s defines fresh, kb", "nope", path) {
		t.Fatalf("unknown fleet: %+v %v", res, err)
	}
	if _, err := os.Stat(m.FleetDir("nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unknown fleet got a state dir: %v", err)
	}
	if n := reloads.Load(); n != 2 {
		t.Errorf("reloads %d, want one more for the unknown name", n)
	}
	if _, err := p.Act(ctx, VerbStop, "../kb", false, nil); !errors.As(err, &unknown) || reloads.Load() != 2 {
		t.Errorf("a name that is no fleet name: %v, reloads %d", err, reloads.Load())
	}
	if _, err := p.Act(ctx, "delete", "kb", false, nil); err == nil {
		t.Error("unknown verb accepted")
	}
}
