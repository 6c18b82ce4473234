package doctor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestCheckReadsStateBack: a ports.json that is not JSON stops every verb
// (each allocates ports first), and a corrupt state.json stops its
// fleet's start; `fleetmgr check` said "no errors" of both. Each is an
// error finding naming the file; check still writes nothing.
func TestCheckReadsStateBack(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	project := filepath.Join(dir, "kb")
	for _, d := range []string{filepath.Join(state, "fleets", "kb"), project} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "fleets.toml")
	src := fmt.Sprintf("[manager]\nstate_dir = %q\nlisten = \"127.0.0.1:18760\"\n[fleets.kb]\nproject = %q\ncommand = [\"/bin/true\"]\n", state, project)
	ports := filepath.Join(state, "ports.json")
	stateFile := filepath.Join(state, "fleets", "kb", "state.json")
	for name, content := range map[string]string{path: src, ports: "\x00\x00", stateFile: `{"name": "kb", "des`} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	manager := func(c *registry.Config) *lifecycle.Manager {
		return lifecycle.New(c, slog.New(slog.DiscardHandler), nil)
	}
	rep := Run(context.Background(), Options{Path: path, Manager: manager})
	if rep.OK {
		t.Fatalf("check is OK with a corrupt ports.json and state.json: %+v", rep.Findings)
	}
	var sawPorts, sawState bool
	for _, f := range rep.Findings {
		if f.Check != "state" || f.Severity != SevError {
			continue
		}
		sawPorts = sawPorts || strings.Contains(f.Message, ports)
		sawState = sawState || strings.Contains(f.Message, stateFile) && strings.Contains(f.Fix, "fleetmgr stop kb")
	}
	if !sawPorts || !sawState {
		t.Fatalf("no state error naming %s (%v) and %s with its fix (%v): %+v", ports, sawPorts, stateFile, sawState, rep.Findings)
	}
	if b, _ := os.ReadFile(ports); string(b) != "\x00\x00" {
		t.Fatalf("check rewrote ports.json: %q", b)
	}

	// Files that read back: one OK finding.
	for name, content := range map[string]string{ports: `{"ports": {"kb": 8766}}`, stateFile: `{"name": "kb", "desired": "stopped"}`} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range Run(context.Background(), Options{Path: path, Manager: manager}).Findings {
		if f.Check == "state" && f.Severity != SevOK {
			t.Errorf("sound state files: %+v", f)
		}
	}
}
