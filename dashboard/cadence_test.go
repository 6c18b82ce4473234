package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
	poll "github.com/fleetmgr/fleetmgr/testbed/wait" // "wait" is browser_test.go's page helper
)

// gaps returns the times between consecutive samplings from the i-th on.
func (w *world) gaps(from int) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for i := max(from, 1); i < len(w.sampled); i++ {
		out = append(out, w.sampled[i].Sub(w.sampled[i-1]))
	}
	return out
}

func (w *world) samplings() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

// TestSamplingBacksOffWhenQuiet: with a page open and nothing changing,
// the time between member samplings doubles from SampleEvery up to
// SampleIdle; a sampling that finds a member's verdict changed brings it
// back to SampleEvery; an age that grows (a STALLED member's) is no change.
func TestSamplingBacksOffWhenQuiet(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	w.setMembers("kb", members(status.Working, status.Stalled)...)
	opt := w.options()
	opt.SampleEvery, opt.SampleIdle, opt.Calls = 50*time.Millisecond, 1600*time.Millisecond, nil
	_, ts := w.serve(opt)
	es := openSSE(t, ts.URL+"/events", nil)
	defer es.close()
	// Quiet (the STALLED member's age and reason grow at every sampling):
	// 50, 100, 200, 400, 800 ms, then 1.6 s.
	poll.For(t, 20*time.Second, "a sampling gap of 1.5 s or more", poll.Bool(func() bool { g := w.gaps(0); return len(g) > 0 && g[len(g)-1] >= 1500*time.Millisecond }))
	g := w.gaps(0)
	if len(g) > 9 {
		t.Errorf("%d samplings to reach SampleIdle, want about 7: gaps %v", len(g)+1, g)
	}
	w.mu.Lock()
	w.members["kb"][1].LastChangeAgeS = ptr(9999.0)
	w.members["kb"][1].Reason = "claims busy, but no file change for 2h46m39s"
	w.mu.Unlock()
	n := w.samplings()
	poll.For(t, 10*time.Second, "w.samplings() >= n+1", poll.Bool(func() bool { return w.samplings() >= n+1 }))
	if last := w.gaps(n - 1); last[len(last)-1] < 1500*time.Millisecond {
		t.Errorf("an age that grew sped the samplings up: gaps %v", last)
	}
	// A verdict changes: found at the next sampling (≤ 1.6 s), then the pace is
	// SampleEvery again.
	w.setMembers("kb", members(status.Working, status.Working)...)
	es.until(t, 10*time.Second, func(e sseEvent) bool {
		return e.name == "report" && containsVerdicts(e.data, "WORKING", "WORKING")
	})
	n = w.samplings()
	poll.For(t, 10*time.Second, "w.samplings() >= n+2", poll.Bool(func() bool { return w.samplings() >= n+2 }))
	after := w.gaps(n)
	if slices.Max(after) > 800*time.Millisecond {
		t.Errorf("after a change the gaps are %v, want SampleEvery (50 ms) again", after)
	}
}

// containsVerdicts reports whether a "report" event's kb row has exactly
// these member verdicts, in order.
func containsVerdicts(data string, want ...string) bool {
	var d struct {
		Report status.Report `json:"report"`
	}
	if json.Unmarshal([]byte(data), &d) != nil {
		return false
	}
	for _, f := range d.Report.Fleets {
		if f.Name != "kb" || len(f.Members) != len(want) {
			continue
		}
		for i, m := range f.Members {
			if string(m.Verdict) != want[i] {
				return false
			}
		}
		return true
	}
	return false
}

// TestChangesSignalReadsRows: with Options.Changes the rows are read on a
// signal, not polled: a fleetd killed shows only when the signal comes
// (StateEvery an hour, no member sampling), and then at once.
func TestChangesSignalReadsRows(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	changes := make(chan struct{}, 1)
	opt := w.options()
	opt.Changes, opt.StateEvery, opt.SampleEvery, opt.SampleIdle, opt.Calls = changes, 0, time.Hour, time.Hour, nil
	s, ts := w.serve(opt)
	if s.opt.StateEvery != 5*time.Second {
		t.Errorf("StateEvery with Changes defaults to %v, want 5s", s.opt.StateEvery)
	}
	es := openSSE(t, ts.URL+"/events", nil)
	defer es.close()
	es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "snapshot" })
	poll.For(t, 5*time.Second, "w.rowsN >= 2", poll.Bool(func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.rowsN >= 2 })) // Run's first read, the loop's first
	w.mu.Lock()
	r0 := w.rowsN
	w.mu.Unlock()
	w.kill9("kb")
	// Three polls' worth without Changes.
	poll.Never(t, 300*time.Millisecond, "rows read without a signal", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.rowsN != r0, fmt.Sprintf("%d reads", w.rowsN-r0)
	})
	changes <- struct{}{}
	ev := es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "fleet" })
	var d struct{ Row status.Fleet }
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil || d.Row.State == "running" {
		t.Fatalf("after the signal: %+v %v", d.Row, err)
	}
}

// TestFileChangeSamplesFleet: with Options.Files (a real status.Watcher on
// the members' worktrees) a file written under a STALLED member's worktree
// samples its fleet at once, long before the next sampling is due; one
// written under a member already WORKING on files does not; a worktree the
// watcher cannot answer for from memory is not asked again.
func TestFileChangeSamplesFleet(t *testing.T) {
	root := t.TempDir()
	stuck, busy, outside := filepath.Join(root, "stuck"), filepath.Join(root, "busy"), t.TempDir()
	for _, d := range []string{stuck, busy} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := status.NewWatcher(status.WatcherOptions{MaxWatches: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go fw.Run(ctx)
	fw.SetRoots(ctx, map[string]string{root: "kb"})

	w := newWorld(t, "kb")
	w.run("kb")
	w.setMembers("kb",
		status.Member{ID: "busy", Worktree: busy, Verdict: status.Working, Evidence: []string{"files"}},
		status.Member{ID: "stuck", Worktree: stuck, Verdict: status.Stalled, Reason: "no change"},
		status.Member{ID: "far", Worktree: outside, Verdict: status.Idle})
	opt := w.options()
	opt.Files, opt.FilesEvery, opt.SampleEvery, opt.SampleIdle, opt.Calls = fw, 50*time.Millisecond, time.Hour, time.Hour, nil
	s, ts := w.serve(opt)
	es := openSSE(t, ts.URL+"/events", nil)
	defer es.close()
	es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "snapshot" })
	poll.For(t, 5*time.Second, "w.samplings() >= 1", poll.Bool(func() bool { return w.samplings() >= 1 }))
	// The outside worktree is dropped from the probes at the first ask.
	poll.For(t, 5*time.Second, "slices.Equal(s.hub.fleets[\"kb\"].probes, []string{stuck})", poll.Bool(func() bool {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		return slices.Equal(s.hub.fleets["kb"].probes, []string{stuck})
	}))
	n := w.samplings()
	if err := os.WriteFile(filepath.Join(busy, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Ten asks.
	poll.Never(t, 500*time.Millisecond, "a sampling for a change under a member WORKING on files", func() (bool, string) {
		got := w.samplings()
		return got != n || s.filesSamplings.Load() != 0, fmt.Sprintf("%d → %d", n, got)
	})
	if err := os.WriteFile(filepath.Join(stuck, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll.For(t, 5*time.Second, "w.samplings() == n+1 && s.filesSamplings.Load() == 1", poll.Bool(func() bool { return w.samplings() == n+1 && s.filesSamplings.Load() == 1 }))
	// Sampled once: the change is before that sampling began.
	poll.Never(t, 500*time.Millisecond, "a second sampling after one file change", func() (bool, string) {
		got := w.samplings()
		return got != n+1, fmt.Sprintf("%d samplings", got-n)
	})
}
