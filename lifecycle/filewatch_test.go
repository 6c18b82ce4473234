package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestFollowLogWakesOnWrite: followers of two fleets share one inotify
// instance; a line appended is followed well before the 5 s safety poll
// (so inotify woke the follower); a write to another file of the fleet
// directory wakes nobody's output; when the last follower ends the
// instance is closed.
func TestFollowLogWakesOnWrite(t *testing.T) {
	dir := t.TempDir()
	cfg := &registry.Config{Manager: registry.Manager{StateDir: dir}, Fleets: map[string]*registry.Fleet{"kb": {Name: "kb"}, "docs": {Name: "docs"}}}
	m := New(cfg, slog.New(slog.DiscardHandler), nil)
	appendTo := func(path, s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(f, s)
		f.Close()
	}
	for _, n := range []string{"kb", "docs"} {
		if err := os.MkdirAll(m.FleetDir(n), 0o700); err != nil {
			t.Fatal(err)
		}
		appendTo(m.LogPath(n, "fleetd"), "before\n")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var kb, docs syncbuf.Buffer
	done := make(chan error, 2)
	go func() { done <- m.FollowLog(ctx, "kb", "fleetd", &kb) }()
	go func() { done <- m.FollowLog(ctx, "docs", "fleetd", &docs) }()
	subs := func() (int, bool) {
		m.files.mu.Lock()
		defer m.files.mu.Unlock()
		return len(m.files.subs), m.files.fsw != nil
	}
	wait.For(t, 5*time.Second, "two followers subscribed", func() (bool, string) {
		n, _ := subs()
		return n >= 2, fmt.Sprintf("%d subscribed", n)
	})
	// Both followers have opened their log and sought to its end (a line
	// appended before that would be skipped, not followed).
	for _, n := range []string{"kb", "docs"} {
		path := m.LogPath(n, "fleetd")
		wait.For(t, 5*time.Second, "a follower of "+path+" at its end", func() (bool, string) {
			return openAt(path, int64(len("before\n"))), ""
		})
	}
	appendTo(filepath.Join(m.FleetDir("kb"), "herdr.log"), "not followed\n")
	appendTo(m.LogPath("kb", "fleetd"), "appended\n")
	// Well within the 5 s safety poll: inotify woke the follower.
	wait.LogLine(t, 3*time.Second, kb.String, "appended")
	if got := kb.String(); got != "appended\n" {
		t.Errorf("kb followed %q", got)
	}
	if docs.String() != "" {
		t.Errorf("docs followed %q", docs.String())
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n, open := subs(); n != 0 || open {
		t.Errorf("after the followers ended: %d subscribed, instance open %v", n, open)
	}
}

// openAt reports whether this process has path open with its offset at
// pos, from /proc/self/fd and /proc/self/fdinfo.
func openAt(path string, pos int64) bool {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err != nil || target != path {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for l := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "pos:"); ok && strings.TrimSpace(v) == strconv.FormatInt(pos, 10) {
				return true
			}
		}
	}
	return false
}
