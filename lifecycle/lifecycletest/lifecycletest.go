// Package lifecycletest builds a lifecycle.Manager over a temporary
// fleets.toml for the tests of the packages above lifecycle (status,
// proxy, daemon): one fleet, kb, whose record a test writes by hand, and a
// sleeping process that passes for its fleetd. It is imported by tests
// only.
package lifecycletest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// OneFleet loads a fleets.toml of one fleet, kb (project: a temporary
// directory; command ["fleetd"]; port 20001; [manager] port_range
// 20000–20010 and state_dir below the same directory), with extra (TOML
// such as [[notify]] tables; may be "") between [manager] and
// [fleets.kb], and returns the Manager over it, logging discarded. A
// file that does not load fails the test.
func OneFleet(t testing.TB, extra string) *lifecycle.Manager {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	body := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n%s"+
		"[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nport = 20001\n", filepath.Join(dir, "state"), extra, dir)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
}

// WriteRecord writes st as the record (state.json) of fleet st.Name in
// m's state dir, as a serve would have left it.
func WriteRecord(t testing.TB, m *lifecycle.Manager, st lifecycle.State) {
	t.Helper()
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.FleetDir(st.Name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.FleetDir(st.Name), "state.json"), js, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Fleetd starts `sleep 600` carrying FLEET_NAME=name in its environment,
// which lifecycle takes for that fleet's fleetd, kills it when the test
// ends, and returns its identity (pid and start time) for a record.
func Fleetd(t testing.TB, name string) *lifecycle.Proc {
	t.Helper()
	fd := exec.Command("sleep", "600")
	fd.Env = append(os.Environ(), "FLEET_NAME="+name)
	if err := fd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Process.Kill(); _ = fd.Wait() })
	k, err := procfs.KeyOf(fd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return &lifecycle.Proc{PID: k.PID, StartTime: k.StartTime}
}
