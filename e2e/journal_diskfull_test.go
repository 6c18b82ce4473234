package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestJournalDiskFull (issue 25, "a full disk (ENOSPC) is reported once,
// counted in /metrics, and never stops supervision or calls"): the journal
// lives on a small tmpfs of its own (journal.db and its log are links into
// it; the rest of the state dir stays on its disk); once a file fills it,
// serve's log says "journal: disk full" once however many events fail,
// /metrics counts the failed writes as disk_full and the events dropped,
// calls through the mount still succeed and a kill -9 of fleetd is still
// restarted; when the file is removed, the journal says it writes again
// and the calls made after it are in `events`.
func TestJournalDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("mounting a tmpfs for the journal needs root (CAP_SYS_ADMIN); running as uid %d", os.Geteuid())
	}
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	jfs := filepath.Join(e.Dir, "journal-fs")
	if err := os.MkdirAll(jfs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", jfs, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs for the journal: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(jfs, syscall.MNT_DETACH) }) // after serve's own clean-up (LIFO)
	if err := os.MkdirAll(e.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"journal.db", "journal.db-wal"} {
		if err := os.Symlink(filepath.Join(jfs, name), filepath.Join(e.StateDir, name)); err != nil {
			t.Fatal(err)
		}
	}

	e.MustRun("start", "kb")
	serve := e.StartServe()
	mgr := connect(t, e.URL())
	callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	wait.For(t, 20*time.Second, "the first call in the journal", func() (bool, string) {
		n := len(eventsJSON(t, e, "kb", "--kind", "call"))
		return n >= 1, fmt.Sprintf("%d calls journalled", n)
	})

	// Fill the file system: write until ENOSPC.
	filler := fillFS(t, jfs)

	// Calls go on; the journal's failures are counted and said once.
	const calls = 40
	for range calls {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	}
	wait.For(t, 20*time.Second, "disk_full counted in /metrics", func() (bool, string) {
		n := serveMetric(t, e, `fleetmgr_journal_write_errors_total{reason="disk_full"}`)
		return n > 0, fmt.Sprintf("disk_full %v", n)
	})
	wait.For(t, 10*time.Second, "the disk-full line in serve's log", wait.Bool(func() bool { return strings.Contains(serve.Log(), "journal: disk full") }))
	for range calls {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	}
	if n := serveMetric(t, e, "fleetmgr_journal_events_dropped_total"); n < calls {
		t.Errorf("dropped %v events; want at least %d (the calls made while the disk was full)", n, calls)
	}

	// Supervision goes on: a killed fleetd is restarted.
	killFleetdAwaitRestart(t, e, "kb", 30*time.Second, serve.Log, nil)
	wait.For(t, 30*time.Second, "calls through the mount after the restart", func() (bool, string) {
		res, err := mgr.CallTool(t.Context(), &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": "kb"}})
		if err != nil {
			return false, err.Error()
		}
		return !res.IsError, textOf(res)
	})
	if n := strings.Count(serve.Log(), "journal: disk full"); n != 1 {
		t.Errorf("serve's log says \"journal: disk full\" %d times; want once:\n%s", n, serve.Log())
	}

	// Space returns: the journal writes again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Calls go on; the journal says it writes again once writes have gone
	// journal.RecoverAfter without a failure.
	wait.For(t, 30*time.Second, "the journal writing again", func() (bool, string) {
		callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
		return strings.Contains(serve.Log(), "journal: writing again"), ""
	})
	mark := time.Now()
	callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	wait.For(t, 20*time.Second, "a call after the space returned in the journal", func() (bool, string) {
		ev := eventsJSON(t, e, "kb", "--kind", "call")
		for _, c := range ev {
			if c.Kind == journal.KindCall && !c.Time.Before(mark) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d calls journalled", len(ev))
	})
}
