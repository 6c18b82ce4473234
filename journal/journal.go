package journal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Defaults of [manager] journal_max_mb and journal_max_age
// (registry.Manager documents them; fleets.example.toml shows them).
const (
	DefaultMaxBytes = 64 << 20
	DefaultMaxAge   = 30 * 24 * time.Hour
	// DefaultBuffer is how many events Append holds for the writer; past
	// it an event is dropped and counted (Stats.Dropped), never waited for.
	DefaultBuffer = 4096
)

var (
	bucketEvents = []byte("events") // key: time (8, BE unix ns) + seq (8, BE) → JSON Event
	bucketFleets = []byte("fleets") // nested bucket per fleet: same key → nothing
)

// Options configure Open.
type Options struct {
	// Path is the journal file (serve: <state_dir>/journal.db).
	Path string
	// MaxBytes bounds the data the file holds (0: DefaultMaxBytes); the
	// oldest events are deleted past it, and the file reuses their pages.
	MaxBytes int64
	// MaxAge bounds how old an event may grow (0: DefaultMaxAge).
	MaxAge time.Duration
	// Buffer is how many events Append may queue (0: DefaultBuffer).
	Buffer int
	// Linger is how long Run waits after an event for more to commit
	// with it in one transaction (group commit; 0: DefaultLinger,
	// negative: none). A commit costs about as much for one event as for
	// dozens, so at a few hundred calls a second this divides the
	// journal's CPU per call; the price is that an event is readable, and
	// safe from a killed process, up to Linger later.
	Linger time.Duration
	// ReadOnly opens the file only to read it (the CLI when no serve
	// holds it); Append then drops every event.
	ReadOnly bool
	// Log receives the journal's own reports (nil: discarded).
	Log *slog.Logger
}

// Stats are the journal's counters since Open (for /metrics).
type Stats struct {
	// Written, Dropped: events committed, and events lost (buffer full,
	// or a write that failed, a full disk among them).
	Written, Dropped uint64
	// WriteErrors counts failed commits; DiskFull those that failed with
	// ENOSPC.
	WriteErrors, DiskFull uint64
	// SetAside counts corrupt files set aside (at Open or while writing).
	SetAside uint64
}

// Journal is an open journal file. Append is safe from any goroutine;
// Run must be running for appended events to be written.
type Journal struct {
	opt    Options
	log    *slog.Logger
	ch     chan Event
	linger time.Duration // Options.Linger with its default; ≤ 0: none

	mu sync.RWMutex // guards db (replaced when a corrupt file is set aside)
	db *bolt.DB

	written, dropped, writeErrs, diskFull, setAside atomic.Uint64
	commits                                         atomic.Uint64 // transactions committed (group commit's tests)
	failing                                         atomic.Bool   // a write failed and no later one succeeded yet (reported once)

	subMu sync.Mutex
	subs  map[chan Event]struct{}

	count     int64 // events in the file (writer goroutine only, after Open)
	sinceTrim int64 // bytes of events written since the last trim (writer goroutine only)
}

// Open opens (creating) the journal at o.Path. A file bbolt refuses as
// corrupt is renamed to PATH.corrupt-YYYYmmddTHHMMSSZ with an error
// logged, and a new one is started; a file held by another process (a
// running serve) is an error after 1 s.
func Open(o Options) (*Journal, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	linger := o.Linger
	if linger == 0 {
		linger = DefaultLinger
	}
	j := &Journal{opt: o, log: o.Log, ch: make(chan Event, o.Buffer), subs: map[chan Event]struct{}{}, linger: linger}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	db, err := j.open()
	if err != nil {
		return nil, err
	}
	j.db = db
	return j, nil
}

// open opens the file, setting it aside once when it is corrupt.
func (j *Journal) open() (*bolt.DB, error) {
	db, err := j.tryOpen()
	if err == nil || j.opt.ReadOnly || errors.Is(err, berrors.ErrTimeout) || errors.Is(err, os.ErrPermission) {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("journal %s: %w", j.opt.Path, ErrHeld)
		}
		if err != nil {
			return nil, fmt.Errorf("journal %s: %w", j.opt.Path, err)
		}
		return db, nil
	}
	if _, serr := os.Stat(j.opt.Path); serr != nil {
		return nil, fmt.Errorf("journal %s: %w", j.opt.Path, err)
	}
	aside := j.opt.Path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	if rerr := os.Rename(j.opt.Path, aside); rerr != nil {
		return nil, fmt.Errorf("journal %s: %w (and it could not be set aside: %v)", j.opt.Path, err, rerr)
	}
	j.setAside.Add(1)
	j.log.Error("journal: corrupt file set aside; a new journal is started (earlier events are in the file set aside)", "path", j.opt.Path, "set_aside_as", aside, "err", err)
	db, err = j.tryOpen()
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.opt.Path, err)
	}
	return db, nil
}

// tryOpen opens the file and checks that its buckets read; a panic in
// bbolt (a corrupt page) is an error here.
func (j *Journal) tryOpen() (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, fmt.Errorf("corrupt: %v", r)
		}
	}()
	db, err = bolt.Open(j.opt.Path, 0o600, &bolt.Options{
		Timeout: time.Second, ReadOnly: j.opt.ReadOnly,
		NoFreelistSync: true, FreelistType: bolt.FreelistMapType,
		// A commit writes its pages and meta page but does not fsync
		// (Run syncs at most once per SyncEvery): an fsync per commit
		// cost every forwarded call ~0.3 ms of serve's CPU, a commit
		// being one event at a time when calls come one by one. A
		// process killed at any moment loses nothing committed (the
		// kernel holds the writes, in order); a power loss may lose the
		// last SyncEvery, and a torn file is set aside (open).
		NoSync: true,
	})
	if err != nil {
		return nil, err
	}
	if j.opt.ReadOnly {
		err = db.View(func(tx *bolt.Tx) error { return probe(tx) })
	} else {
		err = db.Update(func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(bucketEvents); err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists(bucketFleets); err != nil {
				return err
			}
			if err := probe(tx); err != nil {
				return err
			}
			j.count = int64(tx.Bucket(bucketEvents).Stats().KeyN)
			return nil
		})
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// probe reads the newest and oldest event, which walks the tree's edges:
// a torn or foreign file fails (or panics) here rather than later.
func probe(tx *bolt.Tx) error {
	b := tx.Bucket(bucketEvents)
	if b == nil {
		return nil // a read-only open of a file never written
	}
	c := b.Cursor()
	for _, v := range [][]byte{first(c), last(c)} {
		if v == nil {
			continue
		}
		var e Event
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("corrupt: undecodable event: %w", err)
		}
	}
	return nil
}

func first(c *bolt.Cursor) []byte { _, v := c.First(); return v }
func last(c *bolt.Cursor) []byte  { _, v := c.Last(); return v }

// Append queues e for the writer and returns at once; a zero Time is
// now. When the buffer is full (or the journal is read-only) e is dropped
// and counted: the journal never slows supervision or calls.
func (j *Journal) Append(e Event) {
	if j == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	select {
	case j.ch <- e:
	default:
		j.dropped.Add(1)
	}
}

// Stats returns the counters.
func (j *Journal) Stats() Stats {
	return Stats{Written: j.written.Load(), Dropped: j.dropped.Load(), WriteErrors: j.writeErrs.Load(),
		DiskFull: j.diskFull.Load(), SetAside: j.setAside.Load()}
}

// Run writes appended events until ctx ends (syncing them to the disk at
// most once per SyncEvery), then writes what is still
// queued and closes the file. Each batch is whatever is queued (at most
// 512 events), one commit; retention (Options.MaxAge, MaxBytes) is
// enforced after a write once a second, or sooner after writes of a 32nd
// of MaxBytes.
func (j *Journal) Run(ctx context.Context) {
	defer j.close()
	batch := make([]Event, 0, 512)
	var lastTrim time.Time
	sync := time.NewTicker(SyncEvery)
	defer sync.Stop()
	dirty := false
	for {
		select {
		case <-sync.C:
			if dirty {
				dirty = false
				j.sync()
			}
		case <-ctx.Done():
			for {
				batch = batch[:0]
				for len(batch) < cap(batch) {
					select {
					case e := <-j.ch:
						batch = append(batch, e)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				j.write(batch)
			}
		case e := <-j.ch:
			batch = append(batch[:0], e)
			var linger <-chan time.Time // nil: take what is queued, no wait
			var t *time.Timer
			if j.linger > 0 {
				t = time.NewTimer(j.linger)
				linger = t.C
			}
		fill:
			for len(batch) < cap(batch) {
				select {
				case e := <-j.ch:
					batch = append(batch, e)
					continue
				default:
				}
				if linger == nil {
					break
				}
				select {
				case e := <-j.ch:
					batch = append(batch, e)
				case <-linger:
					break fill
				case <-ctx.Done():
					break fill
				}
			}
			if t != nil {
				t.Stop()
			}
			j.write(batch)
			dirty = true
			if now := time.Now(); now.Sub(lastTrim) >= time.Second || j.sinceTrim > j.opt.MaxBytes/32 {
				lastTrim, j.sinceTrim = now, 0
				j.trim(now)
			}
		}
	}
}

// DefaultLinger is Options.Linger's default: short beside anything a
// reader of the journal waits for, long beside a forwarded call.
const DefaultLinger = 10 * time.Millisecond

// SyncEvery is how often Run flushes committed events to the disk
// (fdatasync) while any were written: the most a power loss (not a killed
// process) can take.
const SyncEvery = time.Second

// sync flushes what was committed to the disk; a failure is counted like
// a failed write (it is one, found late).
func (j *Journal) sync() {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return
	}
	if err := j.db.Sync(); err != nil {
		j.writeErrs.Add(1)
		if errors.Is(err, syscall.ENOSPC) {
			j.diskFull.Add(1)
		}
		j.log.Error("journal: flushing to disk failed", "path", j.opt.Path, "err", err)
	}
}

func (j *Journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db != nil {
		if !j.opt.ReadOnly {
			_ = j.db.Sync() // what NoSync left to the page cache
		}
		j.db.Close()
		j.db = nil
	}
}

// Close closes a journal whose Run is not running (a reader's, or one
// Write used).
func (j *Journal) Close() error { j.close(); return nil }

// ErrHeld is Open's error when another process (a running or starting
// serve) holds the file: bbolt's lock on it says so.
var ErrHeld = errors.New("held by another process (a running serve?)")

// Write commits events at once, in one transaction, without Run: for a
// process that writes a few events and closes (the CLI recording a
// change while no serve holds the journal). A zero Time is now.
func (j *Journal) Write(events ...Event) error {
	if j.opt.ReadOnly {
		return fmt.Errorf("journal %s: opened read-only", j.opt.Path)
	}
	batch := make([]Event, len(events))
	for i, e := range events {
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		batch[i] = e
	}
	if err := j.commit(batch); err != nil {
		return fmt.Errorf("journal %s: %w", j.opt.Path, err)
	}
	j.written.Add(uint64(len(batch)))
	return nil
}

func key(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// write commits batch; a failure is logged once until a write succeeds
// again, and counted.
func (j *Journal) write(batch []Event) {
	if j.opt.ReadOnly {
		j.dropped.Add(uint64(len(batch)))
		return
	}
	err := j.commit(batch)
	if err == nil {
		j.commits.Add(1)
		j.written.Add(uint64(len(batch)))
		j.count += int64(len(batch))
		if j.failing.Swap(false) {
			j.log.Info("journal: writing again", "path", j.opt.Path)
		}
		j.publish(batch)
		return
	}
	j.dropped.Add(uint64(len(batch)))
	j.writeErrs.Add(1)
	full := errors.Is(err, syscall.ENOSPC)
	if full {
		j.diskFull.Add(1)
	}
	if !j.failing.Swap(true) {
		if full {
			j.log.Error("journal: disk full; events are dropped (counted in /metrics) until space frees; supervision and calls go on", "path", j.opt.Path, "err", err)
		} else {
			j.log.Error("journal: write failed; events are dropped (counted in /metrics) until a write succeeds; supervision and calls go on", "path", j.opt.Path, "err", err)
		}
	}
	var ce corruptError
	if errors.As(err, &ce) {
		j.reopen(err)
	}
}

type corruptError struct{ error }

func (j *Journal) commit(batch []Event) (err error) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return errors.New("journal closed")
	}
	defer func() {
		if r := recover(); r != nil {
			err = corruptError{fmt.Errorf("corrupt: %v", r)}
		}
	}()
	return j.db.Update(func(tx *bolt.Tx) error {
		b, fl := tx.Bucket(bucketEvents), tx.Bucket(bucketFleets)
		for i := range batch {
			e := &batch[i]
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			e.Seq = seq
			v, err := json.Marshal(e)
			if err != nil {
				return err
			}
			k := key(e.Time, seq)
			j.sinceTrim += int64(2 * (len(v) + len(k)))
			if err := b.Put(k, v); err != nil {
				return err
			}
			if e.Fleet != "" {
				fb, err := fl.CreateBucketIfNotExists([]byte(e.Fleet))
				if err != nil {
					return err
				}
				if err := fb.Put(k, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// reopen sets a file that panicked bbolt aside and starts a new one.
func (j *Journal) reopen(cause error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db != nil {
		j.db.Close()
		j.db = nil
	}
	aside := j.opt.Path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(j.opt.Path, aside); err != nil {
		j.log.Error("journal: corrupt file could not be set aside; journal off until serve restarts", "path", j.opt.Path, "err", err)
		return
	}
	j.setAside.Add(1)
	j.log.Error("journal: corrupt file set aside; a new journal is started", "path", j.opt.Path, "set_aside_as", aside, "err", cause)
	db, err := j.tryOpen()
	if err != nil {
		j.log.Error("journal: no new journal; journal off until serve restarts", "path", j.opt.Path, "err", err)
		return
	}
	j.db = db
}

// trim deletes events older than MaxAge and, when the data in use exceeds
// MaxBytes, the oldest events in proportion, down to 80% of it.
func (j *Journal) trim(now time.Time) {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return
	}
	cutoff := key(now.Add(-j.opt.MaxAge), 0)
	inUse := j.inUse()
	n := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		b, fl := tx.Bucket(bucketEvents), tx.Bucket(bucketFleets)
		limit := int64(0)
		if inUse > j.opt.MaxBytes {
			// Down to 80% of the bound, in proportion to the events held.
			frac := 1 - 0.8*float64(j.opt.MaxBytes)/float64(inUse)
			limit = max(int64(float64(j.count)*frac), 1)
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.First() {
			if int64(n) >= limit && string(k) >= string(cutoff) {
				break
			}
			if n >= 100000 { // bounded work per commit; the rest next second
				break
			}
			var e struct {
				Fleet string `json:"fleet"`
			}
			_ = json.Unmarshal(v, &e)
			if e.Fleet != "" {
				if fb := fl.Bucket([]byte(e.Fleet)); fb != nil {
					if err := fb.Delete(k); err != nil {
						return err
					}
				}
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil {
		j.count -= int64(n)
	}
}

// inUse is the file's size less its free pages.
func (j *Journal) inUse() int64 {
	var size int64
	_ = j.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	st := j.db.Stats()
	return size - int64(st.FreePageN+st.PendingPageN)*int64(j.db.Info().PageSize)
}
