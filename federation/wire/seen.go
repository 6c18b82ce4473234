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

// MemorySeen is a Seen kept in memory, bounded to Max ids in all and
// PerHost ids per sending host; ids are dropped once their time has
// passed. For presence and replies, whose replay window ends with the
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

	mu      sync.Mutex
	until   map[string]seenEntry
	perHost map[string]int
	next    time.Time // earliest time a prune could drop something
}

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
	if s.until == nil {
		s.until = map[string]seenEntry{}
		s.perHost = map[string]int{}
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
// share one fsync (group commit). The file is rewritten (temporary file,
// fsync, rename, fsync of the directory) without expired ids when it has
// grown past twice the live ids and compactMin lines. On Open, a torn last
// line (a crash mid-append) and lines that do not parse are skipped; ids
// already past their time are dropped. Bounded like MemorySeen, per host
// too.
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
	s.mem.until, s.mem.perHost = map[string]seenEntry{}, map[string]int{}
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
		if u := time.UnixMilli(n); now.Before(u) && len(s.mem.until) < s.limit() {
			if _, dup := s.mem.until[string(f[0])]; !dup {
				s.mem.put(from, string(f[0]), u)
			}
		}
	}
	s.mem.prune(now)
	return nil
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
	live := make(map[string]seenEntry, len(s.mem.until))
	for id, e := range s.mem.until {
		live[id] = e
	}
	s.mem.mu.Unlock()
	if s.lines < 2*len(live) {
		return
	}
	if err := s.rewrite(live); err != nil {
		s.err = fmt.Errorf("seen-set %s: compaction: %w", s.path, err)
	}
}

// rewrite replaces the file with the given ids; s.mu and s.syncMu are
// held.
func (s *FileSeen) rewrite(live map[string]seenEntry) error {
	var b bytes.Buffer
	for id, e := range live {
		b.WriteString(id)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(e.until.UnixMilli(), 10))
		if e.from != "" {
			b.WriteByte(' ')
			b.WriteString(e.from)
		}
		b.WriteByte('\n')
	}
	if err := atomicfile.Write(s.path, b.Bytes(), 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.f.Close()
	s.f = f
	s.lines = len(live)
	s.synced = s.written
	return nil
}

// Len returns the number of unexpired ids held.
func (s *FileSeen) Len() int { return s.mem.Len() }

// LenFrom returns the number of unexpired ids held for host from.
func (s *FileSeen) LenFrom(from string) int { return s.mem.LenFrom(from) }

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
