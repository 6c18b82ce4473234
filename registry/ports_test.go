package registry

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// freeRange returns a range of n consecutive ports that were all bindable
// on 127.0.0.1 a moment ago.
func freeRange(t *testing.T, n int) (int, int) {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lo := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if lo+n > 65535 {
			continue
		}
		ok := true
		for p := lo; p < lo+n && ok; p++ {
			ok = bindable(p)
		}
		if ok {
			return lo, lo + n - 1
		}
	}
	t.Fatal("no free port range")
	return 0, 0
}

// portsConfig writes and loads a config with the given port range and
// fleet tables, state in state.
func portsConfig(t *testing.T, dir, state string, lo, hi int, fleets string) *Config {
	t.Helper()
	body := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [%d, %d]\n%s", state, lo, hi, fleets)
	p := writeFile(t, dir, "fleets.toml", body)
	c, err := load(p, fakeEnv(map[string]string{"HOME": dir}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleetTable returns a minimal [fleets.NAME] table, with extra lines.
func fleetTable(name, extra string) string {
	return fmt.Sprintf("[fleets.%s]\nproject = \"/p/%s\"\ncommand = [\"f\"]\n%s\n", name, name, extra)
}

// readPortsFile returns the persisted ports.
func readPortsFile(t *testing.T, state string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(state, PortsFile))
	if err != nil {
		t.Fatal(err)
	}
	var st portsState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ports
}

func TestAllocatePortsPersistsAcrossLoads(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	lo, hi := freeRange(t, 6)
	fleets := fleetTable("a", "") + fleetTable("b", "") + fleetTable("c", fmt.Sprintf("port = %d", lo+1))

	c1 := portsConfig(t, dir, state, lo, hi, fleets)
	if c1.Fleets["a"].Port != 0 {
		t.Fatal("Load allocated a port; only AllocatePorts may")
	}
	if err := c1.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	a, b, cc := c1.Fleets["a"], c1.Fleets["b"], c1.Fleets["c"]
	if !a.PortAllocated || !b.PortAllocated || cc.PortAllocated || cc.Port != lo+1 {
		t.Fatalf("allocated flags/ports: a=%+v b=%+v c=%+v", a, b, cc)
	}
	seen := map[int]bool{}
	for _, f := range []*Fleet{a, b, cc} {
		if f.Port < lo || f.Port > hi || seen[f.Port] {
			t.Fatalf("fleet %s port %d: outside [%d,%d] or duplicate", f.Name, f.Port, lo, hi)
		}
		seen[f.Port] = true
	}
	st, err := os.Stat(filepath.Join(state, PortsFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("ports.json mode %v, want 0600", st.Mode().Perm())
	}
	if got := readPortsFile(t, state); len(got) != 2 || got["a"] != a.Port || got["b"] != b.Port {
		t.Errorf("ports.json = %v", got)
	}

	// Occupy a's port (as its still-running fleetd would): a keeps it anyway.
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", a.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c2 := portsConfig(t, dir, state, lo, hi, fleets)
	if err := c2.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	if c2.Fleets["a"].Port != a.Port || c2.Fleets["b"].Port != b.Port {
		t.Errorf("second load: a=%d b=%d, want %d %d", c2.Fleets["a"].Port, c2.Fleets["b"].Port, a.Port, b.Port)
	}
	leftovers, _ := filepath.Glob(filepath.Join(state, "."+PortsFile+".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestAllocatePortsReallocatesCollisions(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	lo, hi := freeRange(t, 4)
	c1 := portsConfig(t, dir, state, lo, hi, fleetTable("a", "")+fleetTable("b", "")+fleetTable("gone", ""))
	if err := c1.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	aPort := c1.Fleets["a"].Port
	// b now fixes a's remembered port, and "gone" is not in this config.
	c2 := portsConfig(t, dir, state, lo, hi, fleetTable("a", "")+fleetTable("b", fmt.Sprintf("port = %d", aPort)))
	if err := c2.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	a, b := c2.Fleets["a"], c2.Fleets["b"]
	if b.Port != aPort || b.PortAllocated {
		t.Fatalf("b = %d allocated=%v, want fixed %d", b.Port, b.PortAllocated, aPort)
	}
	if a.Port == aPort || a.Port < lo || a.Port > hi || !a.PortAllocated {
		t.Fatalf("a kept colliding port %d (range %d-%d)", a.Port, lo, hi)
	}
	// b's entry goes (its port is fixed now); "gone" may belong to another
	// config and is kept.
	got := readPortsFile(t, state)
	if _, hasB := got["b"]; len(got) != 2 || got["a"] != a.Port || hasB || got["gone"] != c1.Fleets["gone"].Port {
		t.Errorf("ports.json = %v, want a=%d and gone=%d", got, a.Port, c1.Fleets["gone"].Port)
	}

	// A remembered port outside a narrowed range is reallocated too.
	c3 := portsConfig(t, dir, state, lo, lo, fleetTable("a", ""))
	if a.Port != lo {
		if err := c3.AllocatePorts(); err != nil {
			t.Fatal(err)
		}
		if c3.Fleets["a"].Port != lo {
			t.Errorf("a = %d, want %d", c3.Fleets["a"].Port, lo)
		}
	}
}

func TestAllocatePortsSkipsBusyAndManagerPorts(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	lo, hi := freeRange(t, 3)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	body := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [%d, %d]\nlisten = \"127.0.0.1:%d\"\n%s",
		state, lo, hi, lo+1, fleetTable("a", ""))
	p := writeFile(t, dir, "fleets.toml", body)
	c, err := load(p, fakeEnv(map[string]string{"HOME": dir}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	if got := c.Fleets["a"].Port; got != lo+2 {
		t.Errorf("a = %d, want %d (lo busy, lo+1 the manager's)", got, lo+2)
	}

	// Range exhausted: an error naming the fleet and the range.
	c2 := portsConfig(t, dir, filepath.Join(dir, "state2"), lo, lo, fleetTable("z", ""))
	err = c2.AllocatePorts()
	if err == nil || !strings.Contains(err.Error(), `fleet "z"`) || !strings.Contains(err.Error(), fmt.Sprintf("[%d, %d]", lo, lo)) {
		t.Errorf("err = %v", err)
	}
}

func TestAllocatePortsCorruptFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	writeFile(t, state, PortsFile, "{not json")
	c := portsConfig(t, dir, state, 8766, 8799, fleetTable("a", ""))
	err := c.AllocatePorts()
	if err == nil || !strings.Contains(err.Error(), PortsFile) || !strings.Contains(err.Error(), "fix or remove") {
		t.Errorf("err = %v", err)
	}
}

func TestAllocatePortsConcurrent(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	lo, hi := freeRange(t, 8)
	fleets := fleetTable("a", "") + fleetTable("b", "") + fleetTable("c", "")
	var cs []*Config
	for i := 0; i < 4; i++ {
		cs = append(cs, portsConfig(t, dir, state, lo, hi, fleets))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.AllocatePorts()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
	}
	want := readPortsFile(t, state)
	for i, c := range cs {
		for _, n := range []string{"a", "b", "c"} {
			if c.Fleets[n].Port != want[n] {
				t.Errorf("config %d fleet %s = %d, ports.json says %d", i, n, c.Fleets[n].Port, want[n])
			}
		}
	}
}
