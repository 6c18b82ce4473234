package status

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
)

// TestWatcherGathersBursts: a burst made while the watcher gathers (4000
// files in 10 directories, about 8000 events: more than fsnotify reads in
// one go, fewer than the kernel's default queue of 16384) is all taken
// from the kernel's queue afterwards: every directory's clock moves, and
// no event is lost (no overflow, so no re-scan stood in for them).
func TestWatcherGathersBursts(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	const dirs, files = 10, 400
	for i := range dirs {
		touch(t, filepath.Join(root, fmt.Sprintf("d%d", i), "seed"), old)
	}
	touch(t, filepath.Join(root, "trigger", "seed"), old)
	setDirTimes(t, root, old)
	var logs syncbuf.Buffer
	w, err := NewWatcher(WatcherOptions{MaxWatches: 100, Gather: 300 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	w.SetRoots(ctx, map[string]string{root: "kb"})

	// A first write, seen: the watcher then gathers while the burst is made.
	trigger := filepath.Join(root, "trigger")
	if err := os.WriteFile(filepath.Join(trigger, "seed"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, trigger, old)
	before := time.Now()
	// One directory after the other: the last one's events come last in
	// the queue, thousands of events after the first.
	for i := range dirs {
		for f := range files {
			if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("d%d", i), fmt.Sprintf("f%d", f)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Events are handled in order: once the last directory's change is
	// seen, the whole queue was read.
	waitChange(t, w, filepath.Join(root, fmt.Sprintf("d%d", dirs-1)), before)
	for i := range dirs {
		d := filepath.Join(root, fmt.Sprintf("d%d", i))
		if ch, known := w.ChangedSince(d, before); !ch || !known {
			t.Errorf("%s: changed %v known %v after the burst", d, ch, known)
		}
	}
	if strings.Contains(logs.String(), "overflow") {
		t.Errorf("events lost:\n%s", logs.String())
	}
}
