package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/diskreserve"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// fillFS writes a file named filler in dir until its file system answers
// ENOSPC, then its last pages, and returns the file's path.
func fillFS(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	for { // the last pages
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	return filler
}

// TestStateDirFull (issue 25: "a full disk (ENOSPC) … never stops
// supervision or calls"): the whole state dir is a 16 MB tmpfs, so the
// journal, the fleets' logs and their records share it, as they do by
// default. serve makes the space reserve (<state_dir>/.reserve); once a
// file fills the file system, calls through the mount still succeed, a
// kill -9 of fleetd is still restarted (its record written from the
// released reserve: said once in serve's log and counted in /metrics),
// and when the file is removed the reserve is made again.
func TestStateDirFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("mounting a tmpfs for the state dir needs root (CAP_SYS_ADMIN); running as uid %d", os.Geteuid())
	}
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	if err := os.MkdirAll(e.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", e.StateDir, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs for the state dir: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(e.StateDir, syscall.MNT_DETACH) }) // after serve's own clean-up (LIFO)
	e.MustRun("start", "kb")
	serve := e.StartServe()
	reserve := filepath.Join(e.StateDir, diskreserve.Name)
	wait.For(t, 10*time.Second, "serve's space reserve", wait.Bool(func() bool {
		st, err := os.Stat(reserve)
		return err == nil && st.Size() == diskreserve.Size
	}))
	mgr := connect(t, e.URL())
	callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)

	filler := fillFS(t, e.StateDir)
	for range 20 {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	}
	// Supervision goes on: twice, so the second restart's records are
	// written with the reserve already released.
	for range 2 {
		killFleetdAwaitRestart(t, e, "kb", 30*time.Second, serve.Log, nil)
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	}
	if n := strings.Count(serve.Log(), "released the space reserve"); n != 1 {
		t.Errorf("serve's log says the reserve was released %d times, want once:\n%s", n, serve.Log())
	}
	if n := serveMetric(t, e, "fleetmgr_state_reserve_released_total"); n != 1 {
		t.Errorf("fleetmgr_state_reserve_released_total = %v, want 1", n)
	}
	if _, err := os.Stat(reserve); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the reserve is back while the disk is still full: %v", err)
	}

	// Room again: the next record written makes the reserve anew.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	killFleetdAwaitRestart(t, e, "kb", 30*time.Second, serve.Log, nil)
	wait.For(t, 10*time.Second, "the reserve made again", wait.Bool(func() bool {
		st, err := os.Stat(reserve)
		return err == nil && st.Size() == diskreserve.Size
	}))
	wait.LogLine(t, 10*time.Second, serve.Log, "the space reserve is made anew")
}
