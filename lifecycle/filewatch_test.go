package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
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
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := subs(); n < 2; n, _ = subs() {
		if time.Now().After(deadline) {
			t.Fatalf("%d followers subscribed", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // past the first read of both
	appendTo(filepath.Join(m.FleetDir("kb"), "herdr.log"), "not followed\n")
	t0 := time.Now()
	appendTo(m.LogPath("kb", "fleetd"), "appended\n")
	for !strings.Contains(kb.String(), "appended") {
		if time.Since(t0) > 3*time.Second {
			t.Fatalf("a line appended not followed within 3 s (the safety poll is 5 s): %q", kb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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
