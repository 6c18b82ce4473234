package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/privdir"
)

// PortsFile is the name, inside the manager's state directory, of the file
// that remembers allocated ports: JSON {"ports": {"NAME": PORT, ...}},
// mode 0600.
const PortsFile = "ports.json"

// portsState is the content of PortsFile.
type portsState struct {
	Ports map[string]int `json:"ports"`
}

// AllocatePorts gives every fleet without a fixed port a port from
// manager.port_range and records it in <state_dir>/ports.json, so a fleet
// keeps its port across runs (fleets outlive the manager, and a new manager
// finds them on that port). It sets Port and PortAllocated on those fleets.
//
// A remembered port is kept unless it is now outside the range, equal to
// the manager's listen port, or a fixed port of another fleet; then the
// fleet gets a new one. A new port is the lowest in the range that no fleet
// holds and that can be bound on 127.0.0.1 right now. Entries for fleets
// not in this config are kept as they are (another config, or the same one
// later, may name them), though not reserved. The file is rewritten only
// when an entry changed, so loading a config (`fleetmgr list`) normally
// writes nothing. The read-modify-write is serialised
// between processes with flock on ports.json.lock; the file is replaced
// atomically (temporary file, fsync, rename). The state directory is
// created (0700) if missing.
func (c *Config) AllocatePorts() error {
	m := &c.Manager
	if m.StateDir == "" {
		return errors.New("allocate ports: manager.state_dir is empty")
	}
	lo, hi := m.PortRange[0], m.PortRange[1]
	if lo < 1 || hi > 65535 || lo > hi {
		return fmt.Errorf("allocate ports: [%d, %d] is not a port range", lo, hi)
	}
	if err := privdir.Ensure(m.StateDir); err != nil {
		return fmt.Errorf("allocate ports: %w", err)
	}
	unlock, err := lockFile(filepath.Join(m.StateDir, PortsFile+".lock"))
	if err != nil {
		return fmt.Errorf("allocate ports: %w", err)
	}
	defer unlock()

	path := filepath.Join(m.StateDir, PortsFile)
	prev, err := readPorts(path)
	if err != nil {
		return err
	}
	lport, _ := listenPort(m.Listen) // 0 when unparsable; Load refuses that

	taken := map[int]string{}
	names := c.Names()
	for _, n := range names {
		if f := c.Fleets[n]; f.fixedPort() {
			taken[f.Port] = n
		}
	}
	next := map[string]int{}
	for n, p := range prev {
		if _, ok := c.Fleets[n]; !ok {
			next[n] = p // another config's fleet: kept, not reserved
		}
	}
	var pending []string
	for _, n := range names {
		if c.Fleets[n].fixedPort() {
			continue
		}
		p, ok := prev[n]
		if _, clash := taken[p]; ok && !clash && p >= lo && p <= hi && p != lport {
			taken[p] = n
			next[n] = p
			continue
		}
		pending = append(pending, n)
	}
	var errs []error
	for _, n := range pending {
		got := 0
		for p := lo; p <= hi && got == 0; p++ {
			if _, held := taken[p]; held || p == lport || !bindable(p) {
				continue
			}
			got = p
		}
		if got == 0 {
			errs = append(errs, fmt.Errorf("allocate ports: no free port for fleet %q in manager.port_range [%d, %d]: %d held by fleets, the rest in use on 127.0.0.1", n, lo, hi, len(taken)))
			continue
		}
		taken[got] = n
		next[n] = got
	}
	for n, p := range next {
		if f, ok := c.Fleets[n]; ok {
			f.Port, f.PortAllocated = p, true
		}
	}
	if !maps.Equal(prev, next) {
		if err := writePorts(path, next); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// bindable reports whether 127.0.0.1:port can be listened on now.
func bindable(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// lockFile takes an exclusive flock on path (created 0600) and returns the
// function that releases it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// maxPortsBytes bounds the PortsFile read: far more than the 64 KiB-ish
// a file of thousands of fleets takes.
const maxPortsBytes = 4 << 20

// readPorts reads PortsFile; a missing file is an empty map.
//
// It is opened without blocking and must be a regular file: a named pipe
// at that name hung every verb (in open, where neither Ctrl-C nor SIGTERM
// ended it), a directory or device is refused with what to do.
func readPorts(path string) (map[string]int, error) {
	data, err := atomicfile.Read(path, maxPortsBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return map[string]int{}, nil
	case errors.Is(err, atomicfile.ErrNotRegular), errors.Is(err, atomicfile.ErrTooLarge):
		return nil, fmt.Errorf("allocate ports: %w (fleets without a fixed port would then get new ports)", err)
	case err != nil:
		return nil, fmt.Errorf("allocate ports: %w", err)
	}
	var st portsState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("allocate ports: %s: %v; fix or remove it (fleets without a fixed port would then get new ports)", path, err)
	}
	if st.Ports == nil {
		st.Ports = map[string]int{}
	}
	return st.Ports, nil
}

// writePorts replaces PortsFile atomically with mode 0600.
func writePorts(path string, ports map[string]int) error {
	data, err := json.MarshalIndent(portsState{Ports: ports}, "", "  ")
	if err != nil {
		return fmt.Errorf("allocate ports: %w", err)
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("allocate ports: %w", err)
	}
	return nil
}

// CheckPortsFile reads <stateDir>/ports.json as AllocatePorts would and
// returns the error that would stop every verb (unreadable, not JSON),
// without taking the lock or writing anything: `fleetmgr check` reports
// it. A missing file or state dir is nil (the first load makes them).
func CheckPortsFile(stateDir string) error {
	_, err := readPorts(filepath.Join(stateDir, PortsFile))
	return err
}
