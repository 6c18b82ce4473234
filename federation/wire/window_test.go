package wire

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// seqID is the id of number n of stream st (16 hex digits).
func seqID(st string, n uint64) string { return fmt.Sprintf("%s%016x", st, n) }

const stA = "00000000000000aa"

type seenT interface {
	Add(from, id string, until time.Time) (bool, error)
}

func mustFresh(t *testing.T, s seenT, id string, until time.Time) {
	t.Helper()
	if f, err := s.Add("alpha", id, until); !f || err != nil {
		t.Fatalf("%s: fresh=%v err=%v, want fresh", id, f, err)
	}
}

func mustReplay(t *testing.T, s seenT, id string, until time.Time) {
	t.Helper()
	if f, err := s.Add("alpha", id, until); f || err != nil {
		t.Fatalf("%s: fresh=%v err=%v, want replayed", id, f, err)
	}
}

func TestSplitSeqID(t *testing.T) {
	var q Sequencer
	a1, a2, b1 := q.Next("a"), q.Next("a"), q.Next("b")
	for _, c := range []struct {
		id  string
		seq uint64
	}{{a1, 1}, {a2, 2}, {b1, 1}} {
		st, n, ok := SplitSeqID(c.id)
		if !ok || n != c.seq || st != c.id[:16] || !ValidID(c.id) {
			t.Fatalf("%s: %q %d %v", c.id, st, n, ok)
		}
	}
	if a1[:16] != a2[:16] || a1[:16] == b1[:16] {
		t.Fatalf("streams: %s %s %s", a1, a2, b1)
	}
	for range 10000 {
		if _, _, ok := SplitSeqID(NewID()); ok {
			t.Fatal("a random id reads as sequenced")
		}
	}
	if _, _, ok := SplitSeqID(seqID(stA, 0)); ok {
		t.Fatal("number 0 reads as sequenced")
	}
}

// TestWindowEdges: the bitmap at exactly WindowSize and one beyond,
// out-of-order within, reorder beyond it (judged by the gaps).
func TestWindowEdges(t *testing.T) {
	now := time.Unix(1000, 0)
	until := now.Add(time.Hour)
	s := &MemorySeen{Now: func() time.Time { return now }}
	W := uint64(WindowSize)

	// Out of order within the window: W, then 1 (W-1 behind: inside).
	mustFresh(t, s, seqID(stA, W), until)
	mustFresh(t, s, seqID(stA, 1), until)
	mustReplay(t, s, seqID(stA, 1), until)
	mustReplay(t, s, seqID(stA, W), until)
	// Exactly WindowSize behind: W+1 makes 1 leave the bitmap; it was
	// accepted, so it is no gap and stays refused.
	mustFresh(t, s, seqID(stA, W+1), until)
	mustReplay(t, s, seqID(stA, 1), until)
	// 2 is still inside (W-1 behind W+1); 3 … W-1 too.
	mustFresh(t, s, seqID(stA, 2), until)
	// Jump: 3 … W-1 leave the window unseen and become gaps; so do
	// W+2 … 3W (never inside).
	mustFresh(t, s, seqID(stA, 4*W), until)
	for _, n := range []uint64{3, W - 1, W + 2, 2 * W, 3*W - 5} {
		mustFresh(t, s, seqID(stA, n), until) // late, beyond the window
		mustReplay(t, s, seqID(stA, n), until)
	}
	// One beyond the window's edge vs at it: top-W+1 is the bitmap's
	// last, top-W the gaps' first.
	mustFresh(t, s, seqID(stA, 4*W-(W-1)), until)
	mustReplay(t, s, seqID(stA, 4*W-(W-1)), until)
	mustFresh(t, s, seqID(stA, 4*W-W), until)
	mustReplay(t, s, seqID(stA, 4*W-W), until)
	for _, n := range []uint64{W, W + 1, 2, 4 * W} {
		mustReplay(t, s, seqID(stA, n), until)
	}
	// Another stream of the same host (a sender restarted: new stream)
	// starts at 1, its own window.
	mustFresh(t, s, seqID("00000000000000bb", 1), until)
	if s.Windows() != 2 || s.Len() != 0 {
		t.Fatalf("windows %d, ids %d: want 2 windows and no id kept one by one", s.Windows(), s.Len())
	}
}

// TestWindowMatchesASet: whatever the order (reordered within and far
// beyond the window, duplicated), a window answers as a set of every id
// ever accepted would.
func TestWindowMatchesASet(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &MemorySeen{Now: func() time.Time { return now }}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	order := make([]uint64, 0, 2*n)
	for i := uint64(1); i <= n; i++ {
		order = append(order, i)
	}
	// Local shuffles (reorder within), a few long delays (beyond), and
	// duplicates anywhere.
	for i := range order {
		j := min(len(order)-1, i+r.IntN(64))
		order[i], order[j] = order[j], order[i]
	}
	for range 200 {
		// One message held back by up to 5,000 others.
		i := r.IntN(len(order))
		j := min(len(order)-1, i+r.IntN(5000))
		v := order[i]
		copy(order[i:j], order[i+1:j+1])
		order[j] = v
	}
	// Half of them delivered again, up to 3,000 messages later.
	var out []uint64
	again := map[int][]uint64{}
	for i, q := range order {
		out = append(out, q)
		if r.IntN(2) == 0 {
			k := i + 1 + r.IntN(3000)
			again[k] = append(again[k], q)
		}
		out = append(out, again[i]...)
		delete(again, i)
	}
	for _, qs := range again {
		out = append(out, qs...)
	}
	order = out
	set := map[uint64]bool{}
	for _, q := range order {
		f, err := s.Add("alpha", seqID(stA, q), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if f == set[q] {
			t.Fatalf("number %d: fresh=%v, seen before=%v", q, f, set[q])
		}
		set[q] = true
	}
}

// TestWindowGapsBounded: a stream that leaves more than MaxGaps holes has
// its oldest forgotten — refused from then on (fail closed, seen-set
// full), never accepted twice.
func TestWindowGapsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	until := now.Add(time.Hour)
	s := &MemorySeen{Now: func() time.Time { return now }}
	W := uint64(WindowSize)
	// Every other number: one gap each once they leave the window.
	top := uint64(0)
	for i := uint64(0); i < 2*(MaxGaps+W); i += 2 {
		top = W + 2 + i
		mustFresh(t, s, seqID(stA, top), until)
	}
	_, err := s.Add("alpha", seqID(stA, 1), until)
	if !errors.Is(err, ErrSeenFull) {
		t.Fatalf("a forgotten gap: %v", err)
	}
	mustFresh(t, s, seqID(stA, top-W-1), until) // a gap still kept
	mustReplay(t, s, seqID(stA, top-W-1), until)
}

// TestWindowsPerHostBound and expiry: a host's streams are bounded; a
// window goes when its latest message's time has passed.
func TestWindowsPerHostBound(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &MemorySeen{WindowsPerHost: 2, Now: func() time.Time { return now }}
	mustFresh(t, s, seqID("0000000000000001", 1), now.Add(time.Minute))
	mustFresh(t, s, seqID("0000000000000002", 1), now.Add(time.Hour))
	if _, err := s.Add("alpha", seqID("0000000000000003", 1), now.Add(time.Hour)); !errors.Is(err, ErrSeenFull) || !strings.Contains(err.Error(), "host alpha") {
		t.Fatalf("third stream: %v", err)
	}
	if f, err := s.Add("beta", seqID("0000000000000003", 1), now.Add(time.Hour)); !f || err != nil {
		t.Fatalf("another host: %v %v", f, err)
	}
	now = now.Add(2 * time.Minute)
	mustFresh(t, s, seqID("0000000000000003", 1), now.Add(time.Hour))
	if s.Windows() != 3 {
		t.Fatalf("%d windows, want 3 (one expired)", s.Windows())
	}
}

// TestFileSeenWindowsSurviveRestart: a receiver that restarts — before
// and after its file is compacted — refuses every number it accepted,
// inside the bitmap and in the gaps, and still accepts the gaps' late
// numbers once.
func TestFileSeenWindowsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seen")
	now := time.Unix(5000, 0)
	clock := func() time.Time { return now }
	until := now.Add(time.Hour)
	s, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	W := uint64(WindowSize)
	accepted := []uint64{1, 2, 5, W + 10, 3 * W}
	for _, n := range accepted {
		mustFresh(t, s, seqID(stA, n), until)
	}
	s.Close()
	check := func(s *FileSeen, late uint64) {
		t.Helper()
		for _, n := range accepted {
			mustReplay(t, s, seqID(stA, n), until)
		}
		mustFresh(t, s, seqID(stA, late), until)
		mustReplay(t, s, seqID(stA, late), until)
		accepted = append(accepted, late)
	}
	s2, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	check(s2, 3) // a gap below the window
	// Enough numbers for a compaction (the file then holds the window's
	// snapshot, not its numbers).
	for i := uint64(0); i < compactMin+compactMin/8; i++ {
		n := 4*W + i
		if i%20 == 0 {
			continue // holes
		}
		mustFresh(t, s2, seqID(stA, n), until)
		accepted = append(accepted, n)
	}
	b, _ := os.ReadFile(path)
	if lines := strings.Count(string(b), "\n"); lines >= compactMin {
		t.Fatalf("file has %d lines: not compacted", lines)
	}
	check(s2, 4*W+20)
	s2.Close()
	s3, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	check(s3, 4*W+40)
	check(s3, 6) // gaps survived the snapshot
	if s3.Windows() != 1 || s3.Len() != 0 {
		t.Fatalf("windows %d, ids %d", s3.Windows(), s3.Len())
	}
	// Past its time the window goes.
	now = now.Add(2 * time.Hour)
	mustFresh(t, s3, seqID("00000000000000bb", 1), now.Add(time.Hour))
	if s3.Windows() != 1 {
		t.Fatalf("windows %d after the first expired", s3.Windows())
	}
}

// BenchmarkSeenWindow: one sequenced Add in memory (no disk): constant,
// whatever the rate and however many came before.
func BenchmarkSeenWindow(b *testing.B) {
	s := &MemorySeen{}
	until := time.Now().Add(time.Hour)
	var q Sequencer
	for i := 0; i < b.N; i++ {
		if f, err := s.Add("alpha", q.Next("x"), until); !f || err != nil {
			b.Fatal(f, err)
		}
	}
}

// TestArrivalBound: on a route judged on arrival (presence), a sender's
// clock may be off by up to ArrivalBound either way — its message is
// taken, however far outside its own [issued, expires] this receiver's
// clock is — and not beyond; the id is kept long enough that a replay
// after it is forgotten is refused as expired.
func TestArrivalBound(t *testing.T) {
	f := newFixture(t)
	r := rosterRoute()
	r.ArrivalBound = time.Hour
	seen := &MemorySeen{Now: func() time.Time { return f.now }}
	for _, c := range []struct {
		name string
		off  time.Duration
		want Reason
	}{
		{"10 min ahead", 10 * time.Minute, ""},
		{"40 s behind", -40 * time.Second, ""},
		{"59 min behind", -59 * time.Minute, ""},
		{"61 min ahead", 61 * time.Minute, ReasonNotYetValid},
		{"61 min behind", -61 * time.Minute, ReasonExpired},
	} {
		d := f.presence(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(c.off), f.now.Add(c.off+6*time.Second) })
		_, rej := f.v.Verify(d, r, seen)
		if c.want == "" && rej != nil || c.want != "" && (rej == nil || rej.Reason != c.want) {
			t.Errorf("%s: %v, want %q", c.name, rej, c.want)
		}
		if c.want != "" || c.off != 10*time.Minute {
			continue
		}
		// Replayed while kept: replayed; once forgotten, too old anyway.
		if _, rej := f.v.Verify(d, r, seen); rej == nil || rej.Reason != ReasonReplayed {
			t.Errorf("replay: %v", rej)
		}
		saved := f.now
		f.now = f.now.Add(time.Hour + 10*time.Minute + 7*time.Second)
		if _, rej := f.v.Verify(d, r, seen); rej == nil || rej.Reason != ReasonExpired {
			t.Errorf("replay after the id went: %v", rej)
		}
		f.now = saved
	}
	// Without the bound (requests), 40 s off is refused.
	d := f.request(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(40*time.Second), f.now.Add(55*time.Second) })
	if _, rej := f.v.Verify(d, controlRoute(), nil); rej == nil || rej.Reason != ReasonNotYetValid {
		t.Errorf("a request 40 s ahead: %v", rej)
	}
}
