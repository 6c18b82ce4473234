package status

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// touch writes path (creating parents) and sets its mtime to t.
func touch(t *testing.T, path string, mt time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// setDirTimes sets every directory's mtime under root to mt (creating files
// changed them).
func setDirTimes(t *testing.T, root string, mt time.Time) {
	t.Helper()
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chtimes(p, mt, mt)
		}
		return nil
	})
}

func TestWalkerPrunes(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	touch(t, filepath.Join(root, "src", "a.go"), old)
	newer := old.Add(10 * time.Minute)
	for _, pruned := range []string{".git/index", "node_modules/x/y.js", "target/out", "vendor/v.go", "build.tmp/z", "cache/c"} {
		touch(t, filepath.Join(root, pruned), newer)
	}
	setDirTimes(t, root, old)
	w := &Walker{Prune: NewPruner([]string{"*.tmp", "cache"})}
	got, src, err := w.LastChange(context.Background(), root)
	if err != nil || src != SourceWalk {
		t.Fatal(err, src)
	}
	if !got.Equal(old) {
		t.Fatalf("newest = %v, want %v (pruned trees must not count)", got, old)
	}
	touch(t, filepath.Join(root, "src", "deep", "b.go"), newer)
	setDirTimes(t, root, old)
	if got, _, _ := w.LastChange(context.Background(), root); !got.Equal(newer) {
		t.Fatalf("newest = %v, want %v", got, newer)
	}
	if _, _, err := w.LastChange(context.Background(), filepath.Join(root, "gone")); !os.IsNotExist(err) {
		t.Fatalf("missing dir: err = %v", err)
	}
}

// waitChange polls w until LastChange(dir) is after t.
func waitChange(t *testing.T, w FileClock, dir string, after time.Time) (time.Time, string) {
	t.Helper()
	return writeUntilSeen(t, w, dir, "", after)
}

// writeUntilSeen writes file (when not "") and polls w until
// LastChange(dir) is after mark, writing file again at each check: a
// write in the same clock tick as mark (file times are coarse) is not
// after it, a later one is.
func writeUntilSeen(t *testing.T, w FileClock, dir, file string, after time.Time) (time.Time, string) {
	t.Helper()
	var got time.Time
	var src string
	wait.For(t, 5*time.Second, fmt.Sprintf("a change under %s after %v", dir, after), func() (bool, string) {
		if file != "" {
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		got, src, err = w.LastChange(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return got.After(after), fmt.Sprintf("%v from %s", got, src)
	})
	return got, src
}

func TestWatcherCountsChanges(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, m := range []string{"m1", "m2"} {
		touch(t, filepath.Join(root, m, "src", "a.go"), old)
	}
	setDirTimes(t, root, old)
	w, err := NewWatcher(WatcherOptions{MaxWatches: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	w.SetRoots(ctx, map[string]string{root: "kb"})
	m1, m2 := filepath.Join(root, "m1"), filepath.Join(root, "m2")
	got, src, err := w.LastChange(ctx, m1)
	if err != nil || src != SourceWatch || !got.Equal(old) {
		t.Fatalf("seeded: %v %s %v, want %v from watch", got, src, err, old)
	}
	// A write deep inside m1 moves m1 (and the root), not m2.
	before := time.Now()
	if err := os.WriteFile(filepath.Join(m1, "src", "a.go"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, src := waitChange(t, w, m1, before.Add(-time.Millisecond)); src != SourceWatch {
		t.Fatalf("source %s", src)
	}
	if got, _, _ := w.LastChange(ctx, m2); !got.Equal(old) {
		t.Fatalf("m2 moved to %v", got)
	}
	// ChangedSince, from memory: m1 changed after before, m2 did not; a
	// directory outside the roots is not known.
	if ch, known := w.ChangedSince(m1, before.Add(-time.Millisecond)); !ch || !known {
		t.Errorf("ChangedSince(m1) = %v %v, want changed", ch, known)
	}
	if ch, known := w.ChangedSince(m2, before); ch || !known {
		t.Errorf("ChangedSince(m2) = %v %v, want known, unchanged", ch, known)
	}
	if ch, known := w.ChangedSince(m1, time.Now()); ch || !known {
		t.Errorf("ChangedSince(m1, now) = %v %v", ch, known)
	}
	if _, known := w.ChangedSince(t.TempDir(), old); known {
		t.Error("ChangedSince known outside every root")
	}
	// A new directory is watched, and files made in it later count.
	watches, _ := w.Stats()
	if err := os.MkdirAll(filepath.Join(m2, "new", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, m2, old)
	wait.For(t, 5*time.Second, "watches on new and new/sub", func() (bool, string) {
		n, _ := w.Stats()
		return n >= watches+2, fmt.Sprintf("%d watches, %d before", n, watches)
	})
	mark, _, _ := w.LastChange(ctx, m2)
	if _, src := writeUntilSeen(t, w, m2, filepath.Join(m2, "new", "sub", "f"), mark); src != SourceWatch {
		t.Fatalf("source %s", src)
	}
	// Pruned names do not count.
	mark, _, _ = w.LastChange(ctx, m1)
	touch(t, filepath.Join(m1, "node_modules", "x.js"), time.Now())
	// Events are handled in order: once a later write in m2 is seen, the
	// pruned ones before it were handled too.
	mark2, _, _ := w.LastChange(ctx, m2)
	writeUntilSeen(t, w, m2, filepath.Join(m2, "new", "sub", "g"), mark2)
	// Creating node_modules itself is pruned too (its name is skipped).
	if got, _, _ := w.LastChange(ctx, m1); got.After(mark) {
		t.Fatalf("a pruned directory moved the clock: %v > %v", got, mark)
	}
	if n, _ := w.Stats(); n == 0 {
		t.Fatal("no watches placed")
	}
	// Unwatching the root: answers come from walking.
	w.SetRoots(ctx, nil)
	if _, src, _ := w.LastChange(ctx, m1); src != SourceWalk {
		t.Fatalf("after removal source = %s", src)
	}
}

func TestWatcherBoundFallsBackToWalk(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, d := range []string{"a/1", "a/2", "b/1", "b/2", "c/1"} {
		touch(t, filepath.Join(root, "m1", d, "f"), old)
	}
	setDirTimes(t, root, old)
	var logs syncbuf.Buffer
	w, err := NewWatcher(WatcherOptions{MaxWatches: 3, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	w.SetRoots(ctx, map[string]string{root: "kb"})
	watches, walked := w.Stats()
	if watches != 3 || walked == 0 {
		t.Fatalf("watches %d walked %d; want 3 and some walked", watches, walked)
	}
	// Both log lines about the root name its fleet.
	for _, msg := range []string{`msg="status watcher: root watched"`, `msg="status watcher: some directories are walked instead of watched"`} {
		var line string
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, msg) {
				line = l
			}
		}
		if !strings.Contains(line, " fleet=kb ") {
			t.Errorf("no %s line with fleet=kb in the log:\n%s", msg, logs.String())
		}
	}
	m1 := filepath.Join(root, "m1")
	if got, src, err := w.LastChange(ctx, m1); err != nil || src != SourceMixed || !got.Equal(old) {
		t.Fatalf("%v %s %v", got, src, err)
	}
	// Memory alone cannot tell for a directory holding unwatched ones.
	if _, known := w.ChangedSince(m1, old); known {
		t.Error("ChangedSince known for a directory with unwatched subdirectories")
	}
	// A change in an unwatched directory is still seen (by the walk).
	newer := old.Add(time.Minute)
	touch(t, filepath.Join(root, "m1", "c", "1", "f"), newer)
	if got, _, _ := w.LastChange(ctx, m1); !got.Equal(newer) {
		t.Fatalf("unwatched change: got %v want %v", got, newer)
	}
}

func TestParseRoster(t *testing.T) {
	res := &mcp.CallToolResult{StructuredContent: map[string]any{"fleet": "kb", "members": []any{
		map[string]any{"id": "m1", "pane_id": "w1:p2", "worktree": "/w/m1", "state": "ready", "liveStatus": "working"},
		map[string]any{"memberId": "m2", "paneId": "w1:p3", "live_status": "idle"},
	}}}
	rows, err := ParseRoster(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0] != (RosterRow{ID: "m1", PaneID: "w1:p2", Worktree: "/w/m1", State: "ready", LiveStatus: "working"}) ||
		rows[1].ID != "m2" || rows[1].PaneID != "w1:p3" || rows[1].LiveStatus != "idle" {
		t.Fatalf("%+v", rows)
	}
	text := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"members":[]}`}}}
	if rows, err := ParseRoster(text); err != nil || len(rows) != 0 {
		t.Fatal(rows, err)
	}
	bad := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "forbidden"}}}
	if _, err := ParseRoster(bad); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatal(err)
	}
}

func TestRememberOutput(t *testing.T) {
	c := &Collector{outputs: map[string]outputMemo{}}
	a, b := [32]byte{1}, [32]byte{2}
	t0 := time.Now()
	if s := c.remember("f", "p", a, a, t0, t0.Add(time.Second)); !s.IsZero() {
		t.Fatalf("first unchanged look: since %v, want unknown", s)
	}
	t1 := t0.Add(10 * time.Second)
	if s := c.remember("f", "p", a, a, t1, t1.Add(time.Second)); !s.IsZero() {
		t.Fatalf("still unknown: %v", s)
	}
	t2 := t0.Add(20 * time.Second)
	if s := c.remember("f", "p", a, b, t2, t2.Add(time.Second)); !s.Equal(t2.Add(time.Second)) {
		t.Fatalf("changed in sample: %v", s)
	}
	t3 := t0.Add(30 * time.Second)
	if s := c.remember("f", "p", b, b, t3, t3.Add(time.Second)); !s.Equal(t2.Add(time.Second)) {
		t.Fatalf("unchanged since: %v", s)
	}
}

func TestRender(t *testing.T) {
	age := 125.0
	r := &Report{IntervalMS: 3000, Via: "cli", GeneratedAt: time.Now(), Fleets: []Fleet{
		{Name: "kb", Host: "local", State: "running", PID: 42, UptimeS: 61, MemberCount: 2,
			Health: &Health{OK: true, LatencyMS: 1.25}, Herdr: &HerdrCheck{Session: "kb", Alive: true},
			Broker: &Broker{Note: "no broker configured"}, Summary: map[Verdict]int{Working: 1, Stalled: 1},
			Members: []Member{
				{ID: "m1", PaneID: "w1:p2", State: "ready", LiveStatus: "working", Verdict: Working, Evidence: []string{"files"}},
				{ID: "m2", PaneID: "w1:p3", State: "ready", LiveStatus: "working", Verdict: Stalled, LastChangeAgeS: &age, Reason: "claims busy"},
			}},
		{Name: "zz", Host: "other", State: "remote", Verdict: Remote, MemberCount: -1, Members: []Member{}},
		{Name: "old", Host: "local", State: "stopped", LastExit: "exit status 3", Members: []Member{},
			SchemaDrift:   []string{"spawn: lacks properties c (offered by docs)", "fleet_status: also requires depth"},
			ExcludedTools: []ToolNote{{Tool: "own_fleet", Reason: "its input schema already has a \"fleet\" property"}, {Tool: "bad name", Reason: "name breaks"}},
			RelaxedTools:  []ToolNote{{Tool: "remote_ref", Reason: "allOf/0: $ref is not local"}}},
	}}
	var plain, col bytes.Buffer
	if err := Render(&plain, r, false); err != nil {
		t.Fatal(err)
	}
	out := plain.String()
	for _, want := range []string{"WORKING (files)", "STALLED 2m5s", "REMOTE", "last exit: exit status 3", "\n  m1 ", "1 STALLED, 1 WORKING", "1.2ms",
		"last exit: exit status 3; schema drift: spawn, fleet_status (--json or fleetmgr check says how); " +
			"tools not exposed: own_fleet, bad name (--json or fleetmgr check says why); schemas relaxed: remote_ref (--json or fleetmgr check says why)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("plain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("plain output has escapes:\n%s", out)
	}
	if err := Render(&col, r, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(col.String(), colGreen+"WORKING (files)"+colDefault) || !strings.Contains(col.String(), colYellow+"STALLED") {
		t.Errorf("colour output:\n%q", col.String())
	}
}

// TestRenderFrame: in place, each report clears the screen first; in a
// pipe, reports after the first are parted by one blank line; the table
// itself is Render's.
func TestRenderFrame(t *testing.T) {
	r := &Report{IntervalMS: 3000, Via: "cli", GeneratedAt: time.Now(), Fleets: []Fleet{{Name: "kb", Host: "local", State: "stopped", Members: []Member{}}}}
	var table bytes.Buffer
	if err := Render(&table, r, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		first, inPlace bool
		want           string
	}{
		{true, false, table.String()},
		{false, false, "\n" + table.String()},
		{true, true, "\x1b[H\x1b[2J" + table.String()},
		{false, true, "\x1b[H\x1b[2J" + table.String()},
	} {
		var out bytes.Buffer
		if err := RenderFrame(&out, r, tc.first, tc.inPlace, false, true); err != nil || out.String() != tc.want {
			t.Errorf("first %v in place %v: %v\n%q\nwant\n%q", tc.first, tc.inPlace, err, out.String(), tc.want)
		}
	}
}

// TestRenderNarrowFits: the default table never takes more than
// TableWidth columns, however long a fleet's detail or a member's reason,
// coloured or not; a cut line is cut at a word and ends in "… (--wide)"
// (it ended in "…" mid-word, and did not say where the rest is).
func TestRenderNarrowFits(t *testing.T) {
	long := strings.Repeat("a very long reason that goes on ", 10)
	r := &Report{Supervision: SupervisionText(42), Fleets: []Fleet{{Name: "kb", State: "running", PID: 7, UptimeS: 3725, LastError: long,
		Members: []Member{{ID: "m1", State: "ready", Verdict: Stalled, PaneID: "w1:p2", Reason: long}}}}}
	for _, colour := range []bool{false, true} {
		var out bytes.Buffer
		if err := RenderNarrow(&out, r, colour); err != nil {
			t.Fatal(err)
		}
		cut := 0
		for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if n := utf8.RuneCountInString(stripANSI(l)); n > TableWidth {
				t.Errorf("colour %v: %d columns: %q", colour, n, l)
			}
			if strings.HasSuffix(stripANSI(l), "… (--wide)") {
				cut++
				// Cut at a word: what precedes the mark is a whole word
				// of the text.
				if w := strings.Fields(strings.TrimSuffix(stripANSI(l), "… (--wide)")); len(w) > 0 && !strings.Contains(long, " "+w[len(w)-1]+" ") && w[len(w)-1] != "m1" {
					t.Errorf("colour %v: cut inside a word: %q", colour, l)
				}
			}
		}
		if cut == 0 || !strings.Contains(out.String(), "supervised by serve pid 42") {
			t.Errorf("colour %v: no line cut, or no supervision line:\n%s", colour, out.String())
		}
	}
}

// TestRenderResources: the default table shows each row's CPU and
// resident memory, "-" where none was measured; --wide adds processes,
// open fds and the pane's age.
func TestRenderResources(t *testing.T) {
	cpu, memberCPU, age := 150.0, 12.3, 3725.0
	r := &Report{GeneratedAt: time.Now(), Fleets: []Fleet{{Name: "kb", State: "running", PID: 7,
		Resources: &resources.Usage{CPUPercent: &cpu, RSSBytes: 210 << 20, Procs: 9, FDs: 77},
		Members: []Member{
			{ID: "m1", State: "ready", Verdict: Working, PaneID: "w1:p2", PaneAgeS: &age,
				Resources: &resources.Usage{CPUPercent: &memberCPU, RSSBytes: 1536 << 20, Procs: 3, FDs: 21}},
			{ID: "m2", State: "ready", Verdict: Idle, PaneID: "w1:p3"},
		}}}}
	var narrow, wide bytes.Buffer
	if err := RenderNarrow(&narrow, r, false); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(narrow.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	if h := rows["FLEET"]; !slices.Contains(h, "CPU") || !slices.Contains(h, "MEM") {
		t.Fatalf("no CPU/MEM header:\n%s", narrow.String())
	}
	for id, want := range map[string][]string{"kb": {"150%", "210M"}, "m1": {"12.3%", "1.5G"}} {
		if f := rows[id]; !slices.Contains(f, want[0]) || !slices.Contains(f, want[1]) {
			t.Errorf("row %s = %q, want cells %q:\n%s", id, f, want, narrow.String())
		}
	}
	if f := rows["m2"]; len(f) < 6 || f[4] != "-" || f[5] != "-" {
		t.Errorf("unmeasured member row %q, want - for CPU and MEM", f)
	}
	if err := Render(&wide, r, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROCS", "FDS", "PANE AGE", " 77 ", " 21 ", "1h2m5s"} {
		if !strings.Contains(wide.String(), want) {
			t.Errorf("wide lacks %q:\n%s", want, wide.String())
		}
	}
}
