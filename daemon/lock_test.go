package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockStateDir: one holder at a time; the second is refused naming
// the holder's pid and the lock file; after release the lock is free.
func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	release, err := LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock belongs to the open file description: a second open in this
	// process is refused like another process would be.
	_, err = LockStateDir(dir)
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || !strings.Contains(err.Error(), filepath.Join(dir, LockFile)) {
		t.Fatalf("second lock: %v", err)
	}
	release()
	release2, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release2()
}

// TestReadiness: what a detached daemon says on its pipe is what the
// caller of Detach gets: its pid, its error, or that it said nothing.
func TestReadiness(t *testing.T) {
	pipe := func(say func(*Readiness)) (int, error) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		say(&Readiness{f: w})
		w.Close() // a Readiness that said something closed it already
		return awaitReady(context.Background(), r, 5*time.Second)
	}
	if pid, err := pipe(func(r *Readiness) { r.OK() }); err != nil || pid != os.Getpid() {
		t.Errorf("ready: %d %v", pid, err)
	}
	if _, err := pipe(func(r *Readiness) { r.Fail(errors.New("another fleetmgr serve (pid 7) already serves state dir /s")) }); err == nil || err.Error() != "another fleetmgr serve (pid 7) already serves state dir /s" {
		t.Errorf("fail: %v", err)
	}
	if _, err := pipe(func(*Readiness) {}); !errors.Is(err, errDetachedExit) {
		t.Errorf("silent: %v", err)
	}
	var none *Readiness
	none.OK() // a serve in the foreground: nothing to say, no panic
	(&Readiness{}).Fail(errors.New("x"))
}
