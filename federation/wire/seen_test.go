package wire

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func TestMemorySeen(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &MemorySeen{Max: 3, Now: func() time.Time { return now }}
	a, b, c, d := NewID(), NewID(), NewID(), NewID()
	for _, id := range []string{a, b, c} {
		if fresh, err := s.Add("alpha", id, now.Add(time.Second)); !fresh || err != nil {
			t.Fatalf("add %s: %v %v", id, fresh, err)
		}
	}
	if fresh, _ := s.Add("alpha", a, now.Add(time.Hour)); fresh {
		t.Fatal("a fresh twice")
	}
	if _, err := s.Add("alpha", d, now.Add(time.Second)); !errors.Is(err, ErrSeenFull) {
		t.Fatalf("over the bound: %v", err)
	}
	now = now.Add(2 * time.Second)
	if fresh, err := s.Add("alpha", d, now.Add(time.Second)); !fresh || err != nil {
		t.Fatalf("after expiry: %v %v", fresh, err)
	}
	if s.Len() != 1 {
		t.Fatalf("len %d after the prune", s.Len())
	}
	// a expired, so it is new again (its message would be refused as
	// expired before the seen-set is asked).
	if fresh, _ := s.Add("alpha", a, now.Add(time.Second)); !fresh {
		t.Fatal("expired id still held")
	}
}

func TestMemorySeenConcurrent(t *testing.T) {
	s := &MemorySeen{}
	id := NewID()
	var fresh atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f, _ := s.Add("alpha", id, time.Now().Add(time.Minute)); f {
				fresh.Add(1)
			}
		}()
	}
	wg.Wait()
	if fresh.Load() != 1 {
		t.Fatalf("%d concurrent Adds were fresh", fresh.Load())
	}
}

// TestFileSeenSurvivesRestart: an id added by one process is refused by
// the next within its window, and forgotten after it.
func TestFileSeenSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "federation-seen")
	now := time.Unix(5000, 0)
	clock := func() time.Time { return now }
	s, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	short, long := NewID(), NewID()
	if f, err := s.Add("alpha", short, now.Add(10*time.Second)); !f || err != nil {
		t.Fatal(f, err)
	}
	if f, err := s.Add("alpha", long, now.Add(time.Hour)); !f || err != nil {
		t.Fatal(f, err)
	}
	// No Close: a crash. The lines were synced before Add returned.
	s2, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s2.Add("alpha", short, now.Add(10*time.Second)); f {
		t.Fatal("replay accepted after a restart")
	}
	s2.Close()
	now = now.Add(time.Minute)
	s3, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if s3.Len() != 1 {
		t.Fatalf("after the short window: %d ids, want 1", s3.Len())
	}
	if f, _ := s3.Add("alpha", long, now.Add(time.Hour)); f {
		t.Fatal("long-lived id forgotten")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
}

// TestFileSeenTornAndJunkLines: a crash mid-append leaves a torn line;
// it and garbage are skipped, and the next append starts a fresh line.
func TestFileSeenTornAndJunkLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seen")
	now := time.Unix(5000, 0)
	good := NewID()
	torn := NewID()
	content := good + " 9999999999999\n" + "garbage line\n" + "XYZ 12\n" + NewID() + " notanumber\n" + strings.Repeat("x", 100_000) + "\n" + torn[:20]
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFileSeen(path, 0, 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("loaded %d ids, want 1", s.Len())
	}
	if f, _ := s.Add("alpha", good, now.Add(time.Minute)); f {
		t.Fatal("good id lost")
	}
	if f, err := s.Add("alpha", torn, now.Add(time.Minute)); !f || err != nil {
		t.Fatal(f, err)
	}
	s.Close()
	s2, err := OpenFileSeen(path, 0, 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if f, _ := s2.Add("alpha", torn, now.Add(time.Minute)); f {
		t.Fatal("the id appended after a torn line was not kept")
	}
}

// TestFileSeenCompaction: the file is rewritten without expired ids and
// stays bounded; live ids survive the rewrite and a restart.
func TestFileSeenCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seen")
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	keep := NewID()
	if _, err := s.Add("alpha", keep, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*compactMin; i++ {
		if _, err := s.Add("alpha", NewID(), clock().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			mu.Lock()
			now = now.Add(2 * time.Second)
			mu.Unlock()
		}
	}
	b, _ := os.ReadFile(path)
	lines := strings.Count(string(b), "\n")
	if lines > 2*compactMin+100 {
		t.Fatalf("file has %d lines after %d adds: not compacted", lines, 3*compactMin)
	}
	s.Close()
	s2, err := OpenFileSeen(path, 0, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if f, _ := s2.Add("alpha", keep, now.Add(time.Hour)); f {
		t.Fatal("live id lost in compaction")
	}
}

// TestFileSeenConcurrent: concurrent Adds of distinct ids all succeed and
// all reach the file (group commit loses none).
func TestFileSeenConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seen")
	s, err := OpenFileSeen(path, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 400)
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = NewID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f, err := s.Add("alpha", ids[i], time.Now().Add(time.Minute)); !f || err != nil {
				t.Errorf("add: %v %v", f, err)
			}
		}()
	}
	wg.Wait()
	s.Close()
	s2, err := OpenFileSeen(path, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Len() != len(ids) {
		t.Fatalf("reloaded %d ids, want %d", s2.Len(), len(ids))
	}
	if _, err := s.Add("alpha", NewID(), time.Now().Add(time.Minute)); err == nil {
		t.Fatal("Add after Close succeeded")
	}
}

func TestFileSeenRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFileSeen(dir, 0, 0, nil); err == nil {
		t.Fatal("a directory opened as a seen-set")
	}
}

// BenchmarkFileSeenAdd measures one durable Add (an fsync each when
// serial; shared when parallel).
func BenchmarkFileSeenAdd(b *testing.B) {
	s, err := OpenFileSeen(filepath.Join(b.TempDir(), "seen"), 10*b.N+10, 10*b.N+10, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Add("alpha", NewID(), time.Now().Add(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestSeenPerHostBound: one host that fills its share of a seen-set has
// only its own messages refused; another host's are still recorded. The
// share is kept across a restart (each line names its host), and a file
// written before hosts were recorded still loads.
func TestSeenPerHostBound(t *testing.T) {
	now := time.Unix(9000, 0)
	clock := func() time.Time { return now }
	m := &MemorySeen{Max: 10, PerHost: 3, Now: clock}
	for range 3 {
		if f, err := m.Add("flood", NewID(), now.Add(time.Hour)); !f || err != nil {
			t.Fatalf("within the share: %v %v", f, err)
		}
	}
	_, err := m.Add("flood", NewID(), now.Add(time.Hour))
	if !errors.Is(err, ErrSeenFull) || !strings.Contains(err.Error(), "host flood") {
		t.Fatalf("over the share: %v", err)
	}
	if f, err := m.Add("beta", NewID(), now.Add(time.Minute)); !f || err != nil {
		t.Fatalf("another host after one filled its share: %v %v", f, err)
	}
	if m.LenFrom("flood") != 3 || m.LenFrom("beta") != 1 {
		t.Fatalf("per host: flood %d, beta %d", m.LenFrom("flood"), m.LenFrom("beta"))
	}
	// Expired ids free the share.
	now = now.Add(2 * time.Hour)
	if f, err := m.Add("flood", NewID(), now.Add(time.Hour)); !f || err != nil {
		t.Fatalf("after expiry: %v %v", f, err)
	}
	if m.LenFrom("flood") != 1 || m.LenFrom("beta") != 0 {
		t.Fatalf("after expiry: flood %d, beta %d", m.LenFrom("flood"), m.LenFrom("beta"))
	}

	path := filepath.Join(t.TempDir(), "seen")
	old := NewID()
	if err := os.WriteFile(path, []byte(old+" "+strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFileSeen(path, 10, 2, clock)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("a line without host: %d ids loaded", s.Len())
	}
	for range 2 {
		if f, err := s.Add("flood", NewID(), now.Add(time.Hour)); !f || err != nil {
			t.Fatal(f, err)
		}
	}
	if _, err := s.Add("flood", NewID(), now.Add(time.Hour)); !errors.Is(err, ErrSeenFull) {
		t.Fatalf("file seen-set over the share: %v", err)
	}
	if _, err := s.Add("bad host!", NewID(), now.Add(time.Hour)); err == nil {
		t.Fatal("an invalid host id was recorded")
	}
	s.Close()
	s2, err := OpenFileSeen(path, 10, 2, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.LenFrom("flood") != 2 {
		t.Fatalf("after a restart flood holds %d ids, want 2", s2.LenFrom("flood"))
	}
	if _, err := s2.Add("flood", NewID(), now.Add(time.Hour)); !errors.Is(err, ErrSeenFull) {
		t.Fatalf("the share was forgotten across a restart: %v", err)
	}
	if f, _ := s2.Add("beta", old, now.Add(time.Hour)); f {
		t.Fatal("the id of an old-format line was forgotten")
	}
	if f, err := s2.Add("beta", NewID(), now.Add(time.Hour)); !f || err != nil {
		t.Fatalf("another host: %v %v", f, err)
	}
}
