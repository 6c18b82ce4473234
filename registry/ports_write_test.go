package registry

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAllocatePortsWritesOnlyChanges: allocating again with the same
// config, or with a config naming a subset of the fleets, leaves
// ports.json untouched (same inode: it is replaced by rename when written)
// and keeps the other fleets' entries.
func TestAllocatePortsWritesOnlyChanges(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	lo, hi := freeRange(t, 4)
	c := portsConfig(t, dir, state, lo, hi, fleetTable("a", "")+fleetTable("b", ""))
	if err := c.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	want := readPortsFile(t, state)
	ino := func() uint64 {
		st, err := os.Stat(filepath.Join(state, PortsFile))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	for _, fleets := range []string{fleetTable("a", "") + fleetTable("b", ""), fleetTable("a", "")} {
		c := portsConfig(t, dir, state, lo, hi, fleets)
		if err := c.AllocatePorts(); err != nil {
			t.Fatal(err)
		}
		if c.Fleets["a"].Port != want["a"] {
			t.Fatalf("a got port %d, remembered %d", c.Fleets["a"].Port, want["a"])
		}
		if got := readPortsFile(t, state); len(got) != 2 || got["b"] != want["b"] {
			t.Fatalf("ports.json %v, want %v", got, want)
		}
		if ino() != before {
			t.Fatalf("ports.json rewritten although nothing changed (fleets %q)", fleets)
		}
	}
}
