package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/privdir"
)

// LockFile is the file, in the state dir, whose flock makes a serve the
// only one of its state dir; it holds the holder's pid.
const LockFile = "serve.lock"

// LockedError is a second serve's refusal: another serve holds the state
// dir's lock.
type LockedError struct {
	// Dir is the state dir.
	Dir string
	// PID is the holder's pid; 0 when unknown (it had not written it yet).
	PID int
}

func (e *LockedError) Error() string {
	who := "another fleetmgr serve"
	kill := "stop it"
	if e.PID > 0 {
		who = fmt.Sprintf("another fleetmgr serve (pid %d)", e.PID)
		kill = fmt.Sprintf("stop it (kill %d)", e.PID)
	}
	return fmt.Sprintf("%s already serves state dir %s (it holds %s); one serve per state dir supervises its fleets: %s, or give this one another [manager] state_dir",
		who, e.Dir, filepath.Join(e.Dir, LockFile), kill)
}

// LockStateDir makes this process the only `fleetmgr serve` of state dir
// dir, whatever its listen address and socket: it takes an exclusive,
// non-blocking flock(2) on <dir>/serve.lock and writes its pid there. The
// lock lives as long as the returned release is not called and the
// process lives (the kernel drops it at exit, even at SIGKILL; the file
// is opened close-on-exec, so no fleet process inherits it). A lock held
// by another process is a *LockedError naming that process's pid.
func LockStateDir(dir string) (release func(), err error) {
	// A state dir another uid owns or may write into is refused before
	// serve writes anything there (docs/SECURITY.md "Files").
	if err := privdir.Ensure(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, &LockedError{Dir: dir, PID: lockHolder(path)}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// lockHolder reads the pid the holder of the lock at path wrote, waiting
// up to a second for a holder that has just taken it; 0 when none shows.
func lockHolder(path string) int {
	deadline := time.Now().Add(time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}
