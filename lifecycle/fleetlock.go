package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/privdir"
)

// LockFleet takes fleet name's lock (the flock on <state_dir>/fleets/NAME/lock
// that every start, stop, restart and vhost deletion holds), waiting until
// ctx ends, and returns its release. `fleetmgr remove` holds it while it
// checks that the fleet is stopped, rewrites fleets.toml and deletes the
// fleet's state directory, so no start of that fleet runs in between. The
// lock is per open file: a holder must not call a Manager method that takes
// the same fleet's lock (Start, Stop, DeleteVhost …) before releasing it.
func (m *Manager) LockFleet(ctx context.Context, name string) (func(), error) {
	return m.lock(ctx, name)
}

// lock takes the fleet's exclusive lock file, waiting for ctx.
func (m *Manager) lock(ctx context.Context, name string) (func(), error) {
	dir := m.FleetDir(name)
	// Refused when another uid could plant links in it (or in the state
	// dir above): every start, stop and restart passes here first.
	if err := privdir.Ensure(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("fleet %s is busy (another fleetmgr is starting or stopping it): %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// busy reports whether another start, stop or restart of the fleet holds
// its lock right now: a shared flock of the lock file, tried once and
// released, is refused. It only asks (the supervisor does before every
// look), so it neither makes nor vets the fleet's directory as lock does;
// a lock file that cannot be opened is not held (no start ever took it),
// and any other failure counts as held.
func (m *Manager) busy(name string) bool {
	f, err := os.OpenFile(filepath.Join(m.FleetDir(name), "lock"), os.O_RDONLY, 0)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// supervisorLockPath is <fleet dir>/supervisor.lock, which a Supervisor's
// goroutine for the fleet holds (flock) for as long as it watches it.
func (m *Manager) supervisorLockPath(name string) string {
	return filepath.Join(m.FleetDir(name), "supervisor.lock")
}

// supervised reports whether a Supervisor (of this or any other fleetmgr
// process) watches fleet name right now: its supervisor.lock is held.
func (m *Manager) supervised(name string) bool {
	f, err := os.OpenFile(m.supervisorLockPath(name), os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// holdSupervisorLock takes fleet name's supervisor.lock for the caller's
// goroutine; release drops it. ok is false when another Supervisor holds
// it (then nothing is held).
func (m *Manager) holdSupervisorLock(name string) (release func(), ok bool) {
	if err := os.MkdirAll(m.FleetDir(name), 0o700); err != nil {
		return func() {}, false
	}
	f, err := os.OpenFile(m.supervisorLockPath(name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return func() {}, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return func() {}, false
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, true
}
