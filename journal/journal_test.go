package journal

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// run opens a journal at path and runs its writer until the test ends.
func run(t *testing.T, o Options) (*Journal, func()) {
	t.Helper()
	j, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { j.Run(ctx) })
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return j, stop
}

// waitWritten waits until n events were committed.
func waitWritten(t *testing.T, j *Journal, n uint64) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("%d events written", n), func() (bool, string) {
		w := j.Stats().Written
		return w >= n, fmt.Sprintf("written %d", w)
	})
}

func TestAppendQueryAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, stop := run(t, Options{Path: path})
	t0 := time.Now().Add(-time.Hour)
	for i := range 30 {
		fleet := []string{"kb", "docs", "kb@beta"}[i%3]
		kind := []string{KindPhase, KindCall, KindVerdict}[i%3]
		j.Append(Event{Time: t0.Add(time.Duration(i) * time.Minute), Fleet: fleet, Kind: kind, Detail: strconv.Itoa(i)})
	}
	j.Append(Event{Time: t0.Add(31 * time.Minute), Kind: KindReload, Outcome: "ok"})
	waitWritten(t, j, 31)
	stop() // serve ends: the file is closed

	j2, _ := run(t, Options{Path: path})
	all, err := j2.Query(Query{})
	if err != nil || len(all) != 31 {
		t.Fatalf("all: %d events, %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) || all[i].Seq <= all[i-1].Seq {
			t.Fatalf("not in order at %d: %+v after %+v", i, all[i], all[i-1])
		}
	}
	kb, _ := j2.Query(Query{Fleets: []string{"kb"}})
	if len(kb) != 10 || kb[0].Detail != "0" || kb[9].Detail != "27" {
		t.Fatalf("kb: %+v", kb)
	}
	both, _ := j2.Query(Query{Fleets: []string{"kb", "kb@beta"}, Limit: 4})
	if len(both) != 4 || both[3].Detail != "29" || both[0].Detail != "24" {
		t.Fatalf("kb and kb@beta, newest 4: %+v", both)
	}
	calls, _ := j2.Query(Query{Kinds: []string{"member"}})
	if len(calls) != 10 || calls[0].Kind != KindVerdict {
		t.Fatalf("member.*: %+v", calls)
	}
	win, _ := j2.Query(Query{Since: t0.Add(10 * time.Minute), Until: t0.Add(20 * time.Minute)})
	if len(win) != 10 || win[0].Detail != "10" || win[9].Detail != "19" {
		t.Fatalf("window: %+v", win)
	}
	after, _ := j2.Query(Query{After: all[29].Seq})
	if len(after) != 1 || after[0].Kind != KindReload {
		t.Fatalf("after: %+v", after)
	}
	// New events continue the sequence after a reopen.
	j2.Append(Event{Kind: KindControl, Fleet: "kb"})
	waitWritten(t, j2, 1)
	last, _ := j2.Query(Query{Limit: 1})
	if last[0].Seq != all[30].Seq+1 {
		t.Fatalf("seq after reopen: %d, want %d", last[0].Seq, all[30].Seq+1)
	}
}

func TestAppendNeverBlocks(t *testing.T) {
	j, err := Open(Options{Path: filepath.Join(t.TempDir(), "j.db"), Buffer: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	done := make(chan struct{})
	go func() { // no writer runs: the buffer fills, and Append goes on
		for range 100 {
			j.Append(Event{Kind: KindCall})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Append blocked with the buffer full")
	}
	if d := j.Stats().Dropped; d != 92 {
		t.Fatalf("dropped %d, want 92", d)
	}
}

func TestCorruptFileSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a journal "), 2000), 0o600); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	j, _ := run(t, Options{Path: path, Log: log})
	if j.Stats().SetAside != 1 {
		t.Fatalf("set aside %d", j.Stats().SetAside)
	}
	m, _ := filepath.Glob(path + ".corrupt-*")
	if len(m) != 1 {
		t.Fatalf("set-aside files: %v", m)
	}
	if !strings.Contains(logBuf.String(), "corrupt file set aside") || !strings.Contains(logBuf.String(), m[0]) {
		t.Fatalf("log: %s", logBuf.String())
	}
	j.Append(Event{Kind: KindReload})
	waitWritten(t, j, 1)
}

func TestRetentionByAge(t *testing.T) {
	j, _ := run(t, Options{Path: filepath.Join(t.TempDir(), "j.db"), MaxAge: time.Hour})
	old := time.Now().Add(-2 * time.Hour)
	for i := range 50 {
		j.Append(Event{Time: old.Add(time.Duration(i) * time.Second), Fleet: "kb", Kind: KindCall})
	}
	j.Append(Event{Fleet: "kb", Kind: KindPhase})
	waitWritten(t, j, 51)
	wait.For(t, 10*time.Second, "events older than max age gone", func() (bool, string) {
		ev, _ := j.Query(Query{Fleets: []string{"kb"}})
		if len(ev) == 1 && ev[0].Kind == KindPhase {
			return true, ""
		}
		j.Append(Event{Kind: KindCall}) // retention runs after a write
		return false, fmt.Sprintf("%d kb events", len(ev))
	})
}

func TestRetentionBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	const max = 1 << 20
	j, _ := run(t, Options{Path: path, MaxBytes: max})
	detail := strings.Repeat("x", 500)
	for i := range 20000 {
		j.Append(Event{Fleet: "kb", Kind: KindCall, Detail: detail})
		if i%1000 == 999 {
			waitWritten(t, j, uint64(i+1)-j.Stats().Dropped)
			time.Sleep(1100 * time.Millisecond / 10) // pacing: batches spread over about 2 s, as a writer's would, so trims run between them
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// 20000 × ~600 B is ~12 MB of events; the file stays near the bound
	// (bbolt grows it in steps, so allow 4×).
	if fi.Size() > 4*max {
		t.Fatalf("file is %d bytes with journal_max_mb of %d", fi.Size(), max)
	}
	ev, _ := j.Query(Query{Limit: 100000})
	if len(ev) == 0 || len(ev) >= 20000 {
		t.Fatalf("%d events kept", len(ev))
	}
}

// TestKillNineKeepsEarlierEvents kills a writing process with SIGKILL
// many times at random moments: every reopen finds the file intact and
// its events a gapless run of sequence numbers.
func TestKillNineKeepsEarlierEvents(t *testing.T) {
	if os.Getenv("JOURNAL_CHILD") != "" {
		j, err := Open(Options{Path: os.Getenv("JOURNAL_CHILD")})
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(3)
		}
		go j.Run(context.Background())
		fmt.Println("ready")
		for i := 0; ; i++ {
			j.Append(Event{Fleet: "kb", Kind: KindCall, Detail: strconv.Itoa(i)})
			if i%64 == 0 {
				time.Sleep(time.Millisecond) // pacing: a steady stream to be killed in the middle of
			}
		}
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillNineKeepsEarlierEvents$")
		cmd.Env = append(os.Environ(), "JOURNAL_CHILD="+path)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("round %d: child said %q, %v", round, buf, err)
		}
		time.Sleep(time.Duration(50+round*37) * time.Millisecond) // a sleep: the kill lands at a different moment each round
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()

		// A reader (the CLI with no serve) sees the events the killed
		// writer had written to its log but not committed.
		r, err := Open(Options{Path: path, ReadOnly: true})
		if err != nil {
			t.Fatalf("round %d: read-only open: %v", round, err)
		}
		rev, err := r.Query(Query{Limit: 1 << 30})
		r.Close()
		if err != nil || len(rev) == 0 || rev[len(rev)-1].Seq != uint64(len(rev)) {
			t.Fatalf("round %d: reader: %d events, last %+v, %v", round, len(rev), rev[len(rev)-1:], err)
		}
		j, err := Open(Options{Path: path})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if n, _ := j.Query(Query{Limit: 1 << 30}); len(n) != len(rev) {
			t.Fatalf("round %d: the writer's reopen has %d events, the reader saw %d", round, len(n), len(rev))
		}
		if j.Stats().SetAside != 0 {
			t.Fatalf("round %d: file set aside after kill -9", round)
		}
		ev, err := j.Query(Query{Limit: 1 << 30})
		j.Close()
		if err != nil || len(ev) == 0 {
			t.Fatalf("round %d: %d events, %v", round, len(ev), err)
		}
		for i := range ev {
			if ev[i].Seq != uint64(i+1) {
				t.Fatalf("round %d: event %d has seq %d: a gap or a torn record", round, i, ev[i].Seq)
			}
		}
	}
}

// TestQueryKindsSkipsOthersUndecoded: a kind query finds exactly the
// events of that kind (or under it) among many others, including one whose
// data holds the same text under a key "kind" (the byte pre-filter lets it
// through and the decoded kind refuses it), and a kind with a byte JSON
// escapes is still answered (without the pre-filter).
func TestQueryKindsSkipsOthersUndecoded(t *testing.T) {
	j, _ := run(t, Options{Path: filepath.Join(t.TempDir(), "j.db")})
	t0 := time.Now().Add(-time.Hour)
	n := 0
	for i := range 3000 {
		e := Event{Time: t0.Add(time.Duration(i) * time.Second), Fleet: "kb", Kind: KindCall, Outcome: "ok"}
		switch i % 1000 {
		case 10:
			e.Kind, e.Detail = KindRestart, strconv.Itoa(i)
		case 20:
			e.Data = map[string]any{"kind": KindRestart}
		case 30:
			e.Kind = "fleet.restart.odd"
		case 40:
			e.Kind = "a<b"
		}
		j.Append(e)
		n++
	}
	waitWritten(t, j, uint64(n))
	rs, err := j.Query(Query{Fleets: []string{"kb"}, Kinds: []string{KindRestart}})
	if err != nil || len(rs) != 6 {
		t.Fatalf("fleet.restart (and under it): %d events, %v", len(rs), err)
	}
	for _, e := range rs {
		if e.Kind != KindRestart && e.Kind != "fleet.restart.odd" {
			t.Fatalf("kind %q answered a query for %s", e.Kind, KindRestart)
		}
	}
	if rs[0].Detail != "10" || rs[len(rs)-1].Kind != "fleet.restart.odd" {
		t.Fatalf("order: first %+v, last %+v", rs[0], rs[len(rs)-1])
	}
	if odd, _ := j.Query(Query{Kinds: []string{"a<b"}}); len(odd) != 3 {
		t.Fatalf("kind a<b: %d events, want 3", len(odd))
	}
	if two, _ := j.Query(Query{Fleets: []string{"kb"}, Kinds: []string{KindRestart}, Limit: 2}); len(two) != 2 || two[1].Kind != "fleet.restart.odd" || two[0].Detail != "2010" {
		t.Fatalf("newest 2: %+v", two)
	}
}

// TestGroupCommit: events appended while the writer lingers are
// written to the log in one write (Options.Linger); with Linger < 0 each
// event that arrives alone is a write of its own.
func TestGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		linger     time.Duration
		maxCommits uint64
		minCommits uint64
	}{{linger: time.Second, maxCommits: 2, minCommits: 1}, {linger: -1, maxCommits: 20, minCommits: 20}} {
		j, stop := run(t, Options{Path: filepath.Join(t.TempDir(), "j.db"), Linger: tc.linger})
		for i := range 20 {
			j.Append(Event{Kind: "call", Fleet: "kb", Outcome: strconv.Itoa(i)})
			if tc.linger < 0 {
				waitWritten(t, j, uint64(i+1)) // alone in the queue when the writer takes it
			} else { // taken by the writer, which lingers for the next
				wait.For(t, 10*time.Second, "the writer took the event", func() (bool, string) { return len(j.ch) == 0, "" })
			}
		}
		waitWritten(t, j, 20)
		if c := j.commits.Load(); c < tc.minCommits || c > tc.maxCommits {
			t.Errorf("linger %v: 20 events in %d commits, want %d to %d", tc.linger, c, tc.minCommits, tc.maxCommits)
		}
		ev, err := j.Query(Query{Fleets: []string{"kb"}})
		if err != nil || len(ev) != 20 || ev[0].Outcome != "0" || ev[19].Outcome != "19" {
			t.Errorf("linger %v: read back %d events (%v)", tc.linger, len(ev), err)
		}
		stop()
	}
}
