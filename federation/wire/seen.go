package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// ErrSeenFull is returned by Add when the seen-set holds its maximum of
// unexpired ids, in all or for the sending host: the message is refused
// rather than the bound broken.
var ErrSeenFull = errors.New("seen-set full")

// MemorySeen is a Seen kept in memory. Sequenced ids (SplitSeqID) are
// judged by a replay window per (sending host, stream): O(1) per message
// and a few hundred bytes per stream whatever the rate, bounded to
// WindowsPerHost streams per sending host. Other ids are kept one by one,
// bounded to Max ids in all and PerHost ids per sending host; ids and
// windows are dropped once their time has passed. For presence and replies, whose replay window ends with the
// process (presence is soft state; a reply matters only to a caller
// still waiting).
//
// The per-host bound keeps one trusted peer — whatever its capabilities:
// ids are recorded before the capability check, and presence needs none —
// from filling the set with messages of its own (each may live an hour)
// and so having every other host's messages refused as seen-set-failed.
// A host over its bound has only its own messages refused.
type MemorySeen struct {
	// Max bounds the ids held; 0 means DefaultSeenMax.
	Max int
	// PerHost bounds the ids held for one sending host; 0 means
	// DefaultSeenPerHost.
	PerHost int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// WindowsPerHost bounds the replay windows (streams of sequenced
	// ids, SplitSeqID) held for one sending host; 0 means
	// DefaultWindowsPerHost.
	WindowsPerHost int

	mu      sync.Mutex
	until   map[string]seenEntry
	perHost map[string]int
	windows map[winKey]*window
	winHost map[string]int // windows per sending host
	next    time.Time      // earliest time a prune could drop something
}

// winKey names one replay window: the sending host and its stream.
type winKey struct{ from, stream string }

// seenEntry is one id's record: until when, and who sent it.
type seenEntry struct {
	until time.Time
	from  string
}

// DefaultSeenMax is the default bound of a seen-set: 100,000 ids, about
// 8 MB in memory, and 5 MB on disk for SeenFile.
const DefaultSeenMax = 100_000

// DefaultSeenPerHost is the default bound of the ids one host may have in
// a seen-set: 10,000 (a host making 10 calls a second with a 5-minute
// timeout holds 3,000), so at least ten trusted hosts would have to flood
// together to fill DefaultSeenMax.
const DefaultSeenPerHost = 10_000

func (s *MemorySeen) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *MemorySeen) limits() (total, perHost int) {
	total, perHost = s.Max, s.PerHost
	if total <= 0 {
		total = DefaultSeenMax
	}
	if perHost <= 0 {
		perHost = DefaultSeenPerHost
	}
	return total, perHost
}

// Add records id, sent by host from, until the given time.
func (s *MemorySeen) Add(from, id string, until time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if stream, seq, ok := SplitSeqID(id); ok {
		return s.addSeq(from, stream, seq, until)
	}
	if _, ok := s.until[id]; ok {
		return false, nil
	}
	// Only a time past the earliest expiry can free anything: a full set
	// under a flood is not walked again for every message.
	if now := s.now(); !s.next.IsZero() && now.After(s.next) {
		s.prune(now)
	}
	total, perHost := s.limits()
	if len(s.until) >= total {
		return false, fmt.Errorf("%w: %d unexpired ids", ErrSeenFull, len(s.until))
	}
	if n := s.perHost[from]; n >= perHost {
		return false, fmt.Errorf("%w: host %s has %d unexpired ids, the most one host may have", ErrSeenFull, from, n)
	}
	s.put(from, id, until)
	return true, nil
}

func (s *MemorySeen) init() {
	if s.until == nil {
		s.until = map[string]seenEntry{}
		s.perHost = map[string]int{}
		s.windows = map[winKey]*window{}
		s.winHost = map[string]int{}
	}
}

// addSeq judges sequence number seq of from's stream in its window
// (created on the stream's first message, within WindowsPerHost).
func (s *MemorySeen) addSeq(from, stream string, seq uint64, until time.Time) (bool, error) {
	k := winKey{from, stream}
	w := s.windows[k]
	if w == nil {
		if now := s.now(); !s.next.IsZero() && now.After(s.next) {
			s.prune(now)
		}
		limit := s.WindowsPerHost
		if limit <= 0 {
			limit = DefaultWindowsPerHost
		}
		if n := s.winHost[from]; n >= limit {
			return false, fmt.Errorf("%w: host %s has %d live streams, the most one host may have", ErrSeenFull, from, n)
		}
		w = s.newWindow(k)
	}
	fresh, err := w.check(seq)
	if fresh {
		s.extend(w, until)
	}
	return fresh, err
}

// newWindow adds an empty window for k.
func (s *MemorySeen) newWindow(k winKey) *window {
	w := &window{}
	s.windows[k] = w
	s.winHost[k.from]++
	return w
}

// extend makes w live at least until u.
func (s *MemorySeen) extend(w *window, u time.Time) {
	if u.After(w.until) {
		w.until = u
	}
	if s.next.IsZero() || w.until.Before(s.next) {
		s.next = w.until
	}
}

// Windows returns the number of replay windows held.
func (s *MemorySeen) Windows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.windows)
}

// put records id without checking the bounds.
func (s *MemorySeen) put(from, id string, until time.Time) {
	s.until[id] = seenEntry{until: until, from: from}
	s.perHost[from]++
	if s.next.IsZero() || until.Before(s.next) {
		s.next = until
	}
}

// prune drops the ids whose time has passed.
func (s *MemorySeen) prune(now time.Time) {
	s.next = time.Time{}
	for id, e := range s.until {
		if now.After(e.until) {
			delete(s.until, id)
			if s.perHost[e.from]--; s.perHost[e.from] <= 0 {
				delete(s.perHost, e.from)
			}
		} else if s.next.IsZero() || e.until.Before(s.next) {
			s.next = e.until
		}
	}
	for k, w := range s.windows {
		if now.After(w.until) {
			delete(s.windows, k)
			if s.winHost[k.from]--; s.winHost[k.from] <= 0 {
				delete(s.winHost, k.from)
			}
		} else if s.next.IsZero() || w.until.Before(s.next) {
			s.next = w.until
		}
	}
}

// Len returns the number of ids held.
func (s *MemorySeen) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.until)
}

// LenFrom returns the number of ids held for host from.
func (s *MemorySeen) LenFrom(from string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perHost[from]
}

// FileSeen is a Seen that survives a restart: every id is appended, as
// "<id> <until, Unix ms> <sending host>\n" (files written before the host
// was recorded have lines without it), to a file in the state directory and synced
// before Add reports it fresh, so a request acted on after Add can never
// be acted on again by a later process within its window. Concurrent Adds
// share one fsync (group commit). The file is rewritten (atomicfile.Write)
// without expired ids when it has grown past twice what it must hold and
// compactMin lines: the ids kept one by one, and per replay window one
// line "w <host> <stream> <top> <until-ms> <floor> <bitmap hex>" and a
// line "g <host> <stream> <lo> <hi>" per gap. On Open the lines are
// applied in order — a sequenced id to its window whether expired or not,
// so each window comes back exactly — a torn last line (a crash
// mid-append) and lines that do not parse are skipped, and what is past
// its time is dropped. Bounded like MemorySeen, per host too.
type FileSeen struct {
	mem  MemorySeen
	path string

	mu      sync.Mutex // guards f, lines, written; held while appending
	f       *os.File
	lines   int   // lines in the file
	written int64 // appends so far (generation of the last append)

	syncMu sync.Mutex // serialises fsync; guards synced
	synced int64      // generation known durable
	err    error      // a failed write or sync: every later Add fails
}

// compactMin is the least number of lines before a rewrite is considered.
const compactMin = 4096

// OpenFileSeen opens (creating 0600, directory 0700) the seen-set file at
// path and loads its unexpired ids. max bounds the ids (0:
// DefaultSeenMax), perHost those of one sending host (0:
// DefaultSeenPerHost); now is the clock (nil: time.Now).
func OpenFileSeen(path string, max, perHost int, now func() time.Time) (*FileSeen, error) {
	s := &FileSeen{path: path, mem: MemorySeen{Max: max, PerHost: perHost, Now: now}}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("seen-set %s: %w", path, err)
	}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("seen-set %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("seen-set %s: %w", path, err)
	}
	s.f = f
	if err := s.fixTail(); err != nil {
		f.Close()
		return nil, fmt.Errorf("seen-set %s: %w", path, err)
	}
	return s, nil
}

// load reads the file into memory.
func (s *FileSeen) load() error {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	now := s.mem.now()
	s.mem.init()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// No line is this long: skip to the next newline.
			for err == bufio.ErrBufferFull {
				_, err = r.ReadSlice('\n')
			}
			continue
		}
		if err == io.EOF {
			break // a torn last line (no newline) is ignored
		}
		if err != nil {
			return err
		}
		s.lines++
		f := bytes.Fields(line)
		if len(f) > 0 && (string(f[0]) == "w" || string(f[0]) == "g") {
			s.loadWindowLine(f)
			continue
		}
		if len(f) != 2 && len(f) != 3 || !ValidID(string(f[0])) {
			continue
		}
		n, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		from := ""
		if len(f) == 3 {
			if from = string(f[2]); !identity.ValidHost(from) {
				continue
			}
		}
		if stream, seq, ok := SplitSeqID(string(f[0])); ok && from != "" {
			// Every accepted number is applied, expired or not, so the
			// window comes back as it was; windows past their time go
			// in the prune below.
			k := winKey{from, stream}
			w := s.mem.windows[k]
			if w == nil {
				w = s.mem.newWindow(k)
			}
			if fresh, _ := w.check(seq); fresh {
				s.mem.extend(w, time.UnixMilli(n))
			}
			continue
		}
		if u := time.UnixMilli(n); now.Before(u) && len(s.mem.until) < s.limit() {
			if _, dup := s.mem.until[string(f[0])]; !dup {
				s.mem.put(from, string(f[0]), u)
			}
		}
	}
	s.mem.prune(now)
	return nil
}

// loadWindowLine reads a compaction's window line ("w …") or gap line
// ("g …", after its window's); lines that do not parse are skipped.
func (s *FileSeen) loadWindowLine(f [][]byte) {
	str := func(i int) string { return string(f[i]) }
	num := func(i int) (uint64, bool) {
		n, err := strconv.ParseUint(str(i), 10, 64)
		return n, err == nil
	}
	switch {
	case str(0) == "w" && len(f) == 7:
		from, stream := str(1), str(2)
		top, ok1 := num(3)
		until, ok2 := num(4)
		floor, ok3 := num(5)
		bits, ok4 := parseBits(str(6))
		if !ok1 || !ok2 || !ok3 || !ok4 || !identity.ValidHost(from) || len(stream) != 16 {
			return
		}
		k := winKey{from, stream}
		w := s.mem.windows[k]
		if w == nil {
			w = s.mem.newWindow(k)
		}
		w.top, w.bits, w.floor, w.gaps = top, bits, floor, nil
		s.mem.extend(w, time.UnixMilli(int64(until)))
	case str(0) == "g" && len(f) == 5:
		w := s.mem.windows[winKey{str(1), str(2)}]
		lo, ok1 := num(3)
		hi, ok2 := num(4)
		if w == nil || !ok1 || !ok2 || lo > hi || hi > w.top {
			return
		}
		if n := len(w.gaps); n > 0 && w.gaps[n-1].hi >= lo {
			return // out of order: not written by rewrite
		}
		w.addGap(lo, hi)
	}
}

// fixTail ends the file with a newline when a crash left a torn line, so
// the next append starts a line of its own.
func (s *FileSeen) fixTail() error {
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], st.Size()-1); err != nil {
		return err
	}
	if b[0] != '\n' {
		_, err = s.f.Write([]byte("\n"))
	}
	return err
}

func (s *FileSeen) limit() int {
	if s.mem.Max > 0 {
		return s.mem.Max
	}
	return DefaultSeenMax
}

// Add records id, sent by host from, until the given time, durably, and
// reports whether it is new. An id is only reported fresh after its line
// is on disk.
func (s *FileSeen) Add(from, id string, until time.Time) (bool, error) {
	if !ValidID(id) {
		return false, fmt.Errorf("seen-set: %q is not a message id", clip(id))
	}
	if !identity.ValidHost(from) {
		return false, fmt.Errorf("seen-set: %q is not a host id", clip(from))
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return false, err
	}
	fresh, err := s.mem.Add(from, id, until)
	if err != nil || !fresh {
		s.mu.Unlock()
		return false, err
	}
	if s.f == nil {
		s.mu.Unlock()
		return false, fmt.Errorf("seen-set %s: closed", s.path)
	}
	line := id + " " + strconv.FormatInt(until.UnixMilli(), 10) + " " + from + "\n"
	if _, err := s.f.WriteString(line); err != nil {
		s.err = fmt.Errorf("seen-set %s: %w", s.path, err)
		s.mu.Unlock()
		return false, s.err
	}
	s.lines++
	s.written++
	gen := s.written
	f := s.f
	s.mu.Unlock()

	if err := s.syncTo(f, gen); err != nil {
		return false, err
	}
	s.maybeCompact()
	return true, nil
}

// syncTo makes every append up to generation gen durable; one fsync
// covers all the appends made before it started.
func (s *FileSeen) syncTo(f *os.File, gen int64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= gen {
		return nil
	}
	s.mu.Lock()
	upto := s.written
	if s.f != f {
		// A compaction replaced the file; its rewrite was synced and
		// holds every id added before it.
		s.mu.Unlock()
		s.synced = max(s.synced, gen)
		return nil
	}
	s.mu.Unlock()
	if err := f.Sync(); err != nil {
		s.mu.Lock()
		s.err = fmt.Errorf("seen-set %s: %w", s.path, err)
		s.mu.Unlock()
		return s.err
	}
	s.synced = upto
	return nil
}

// maybeCompact rewrites the file with the live ids when it has grown past
// twice their number.
func (s *FileSeen) maybeCompact() {
	s.mu.Lock()
	need := s.f != nil && s.lines >= compactMin && s.lines >= 2*s.mem.Len()
	s.mu.Unlock()
	if !need {
		return
	}
	// Lock order everywhere: syncMu, then mu, then mem.mu. Holding syncMu
	// keeps any syncTo off the old file while it is replaced.
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil || s.lines < compactMin {
		return
	}
	s.mem.mu.Lock()
	s.mem.prune(s.mem.now())
	snap, n := s.mem.snapshot()
	s.mem.mu.Unlock()
	if s.lines < 2*n {
		return
	}
	if err := s.rewrite(snap, n); err != nil {
		s.err = fmt.Errorf("seen-set %s: compaction: %w", s.path, err)
	}
}

// snapshot returns what the file must hold for s as it is — one line per
// id kept one by one, a window line and its gap lines per window — and
// the number of lines; s.mu is held.
func (s *MemorySeen) snapshot() ([]byte, int) {
	var b []byte
	n := 0
	for id, e := range s.until {
		b = append(b, id...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, e.until.UnixMilli(), 10)
		if e.from != "" {
			b = append(b, ' ')
			b = append(b, e.from...)
		}
		b = append(b, '\n')
		n++
	}
	for k, w := range s.windows {
		b = w.snapshot(b, k.from, k.stream)
		n += 1 + len(w.gaps)
	}
	return b, n
}

// rewrite replaces the file with snap (n lines); s.mu and s.syncMu are
// held.
func (s *FileSeen) rewrite(snap []byte, n int) error {
	if err := atomicfile.Write(s.path, snap, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.f.Close()
	s.f = f
	s.lines = n
	s.synced = s.written
	return nil
}

// Len returns the number of unexpired ids held.
func (s *FileSeen) Len() int { return s.mem.Len() }

// LenFrom returns the number of unexpired ids held for host from.
func (s *FileSeen) LenFrom(from string) int { return s.mem.LenFrom(from) }

// Windows returns the number of replay windows held.
func (s *FileSeen) Windows() int { return s.mem.Windows() }

// Close closes the file; later Adds fail.
func (s *FileSeen) Close() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}
