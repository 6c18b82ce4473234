package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/diskreserve"
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
	// KeepFree makes the journal leave diskreserve.KeepFree bytes of its
	// file system free: a log write that would leave fewer fails as ENOSPC
	// does (events dropped, counted as disk_full). serve sets it, so what
	// the state dir's reserve frees on a full disk is left to the fleets'
	// records.
	KeepFree bool
	// Log receives the journal's own reports (nil: discarded).
	Log *slog.Logger
}

// Stats are the journal's counters since Open (for /metrics).
type Stats struct {
	// Written, Dropped: events written (to the write-ahead log, where a
	// killed process no longer loses them), and events lost (buffer full,
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
	failing                                         atomic.Bool   // a write failed and writes have not gone RecoverAfter without one since (reported once)
	lastFail                                        atomic.Int64  // unix ns of the last failed write

	subMu sync.Mutex
	subs  map[chan Event]struct{}

	count     int64 // events in the file (writer goroutine only, after Open)
	sinceTrim int64 // bytes of events written since the last trim (writer goroutine only)

	// The write-ahead log (Path + "-wal"): each batch is one write(2) of
	// its events as JSON lines, then kept in pending until a bbolt commit
	// (once per SyncEvery, before a Query, at close) takes them all.
	wmu     sync.Mutex // guards the fields below
	seq     uint64     // the last Seq given
	pending []rec      // written to the log, not yet committed
	wal     *os.File
	walSize int64
	extra   []Event // ReadOnly: the log's events (a writer killed before its commit)
}

// rec is one encoded event: its key, its JSON, its fleet (index).
type rec struct {
	k, v  []byte
	fleet string
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
	if err := j.replay(); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", walPath(o.Path), err)
	}
	return j, nil
}

// walPath is the write-ahead log of the journal at path.
func walPath(path string) string { return path + "-wal" }

// replay reads the write-ahead log a killed writer left: a writer commits
// its events to the file (idempotent: same keys, same values) and empties
// the log; a reader keeps them to answer Query with. A torn last line
// (the write a kill cut) ends the log.
func (j *Journal) replay() error {
	b, err := os.ReadFile(walPath(j.opt.Path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		if j.opt.ReadOnly {
			return nil // unreadable: the file alone answers
		}
		return err
	}
	var recs []rec
	var evs []Event
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte{'\n'})
		if !ok {
			break // torn
		}
		b = rest
		var e Event
		if json.Unmarshal(line, &e) != nil || e.Seq == 0 {
			break
		}
		evs = append(evs, e)
		recs = append(recs, rec{k: key(e.Time, e.Seq), v: line, fleet: e.Fleet})
	}
	if j.opt.ReadOnly {
		j.extra = evs
		return nil
	}
	if len(recs) > 0 {
		if err := j.commitRecs(recs); err != nil {
			return err
		}
		j.log.Info("journal: events of a writer that ended before committing them recovered from the log", "path", j.opt.Path, "events", len(recs))
	}
	err = j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		j.seq, j.count = b.Sequence(), int64(b.Stats().KeyN)
		return nil
	})
	if err != nil {
		return err
	}
	if err := j.db.Sync(); err != nil {
		return err
	}
	if err := os.Truncate(walPath(j.opt.Path), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
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
	// The sync timer runs only while written events wait for their
	// checkpoint (armed at the write that made the log dirty): an idle
	// journal costs serve no wakeup (issue 26; it ticked every second).
	sync := time.NewTimer(SyncEvery)
	sync.Stop()
	defer sync.Stop()
	dirty, armed := false, false
	for {
		select {
		case <-sync.C:
			armed = false
			if dirty {
				dirty = false
				j.checkpoint()
				if now := time.Now(); now.Sub(lastTrim) >= time.Second || j.sinceTrim > j.opt.MaxBytes/32 {
					lastTrim, j.sinceTrim = now, 0
					j.trim(now)
				}
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
			if !armed {
				sync.Reset(SyncEvery)
				armed = true
			}
			if j.pendingLen() >= maxPending || j.sinceTrim > j.opt.MaxBytes/32 {
				j.checkpoint()
				lastTrim, j.sinceTrim = time.Now(), 0
				j.trim(lastTrim)
			}
		}
	}
}

// maxPending is how many events the writer holds written to the log
// before it commits them without waiting for the next SyncEvery.
const maxPending = 8192

func (j *Journal) pendingLen() int {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	return len(j.pending)
}

// DefaultLinger is Options.Linger's default: short beside anything a
// reader of the journal waits for, long beside a forwarded call.
const DefaultLinger = 10 * time.Millisecond

// SyncEvery is how often Run commits the events written to the log to
// the file and flushes them to the disk (fdatasync), while any were
// written: the most a power loss (not a killed process) can take.
const SyncEvery = time.Second

// checkpoint commits what the log holds to the file, flushes the file to
// the disk and empties the log. A failure is reported like a failed write
// (the events stay in the log and are retried; past maxPending·4 they are
// dropped and counted).
func (j *Journal) checkpoint() {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if err := j.commitPending(); err != nil {
		return
	}
	j.mu.RLock()
	var err error
	if j.db != nil {
		err = j.db.Sync()
	}
	j.mu.RUnlock()
	if err != nil {
		j.failed(err, 0)
		return
	}
	if j.wal != nil && j.walSize > 0 {
		if err := j.wal.Truncate(0); err != nil {
			j.failed(err, 0)
			return
		}
		j.walSize = 0
	}
}

// commitPending commits the events written to the log since the last
// commit (wmu held). They stay in the log until checkpoint empties it.
func (j *Journal) commitPending() error {
	if len(j.pending) == 0 {
		return nil
	}
	var err error
	if j.opt.KeepFree && !diskreserve.Room(filepath.Dir(j.opt.Path), 0) {
		err = &os.PathError{Op: "commit", Path: j.opt.Path, Err: diskreserve.ErrNoRoom}
	} else {
		err = j.commitRecs(j.pending)
	}
	if err != nil {
		if len(j.pending) > 4*maxPending {
			j.failed(err, len(j.pending))
			j.pending = j.pending[:0]
		} else {
			j.failed(err, 0)
		}
		var ce corruptError
		if errors.As(err, &ce) {
			j.reopen(err)
		}
		return err
	}
	j.count += int64(len(j.pending))
	clear(j.pending)
	j.pending = j.pending[:0]
	j.recovered()
	return nil
}

func (j *Journal) close() {
	if !j.opt.ReadOnly {
		j.checkpoint()
		j.wmu.Lock()
		if j.wal != nil {
			j.wal.Close()
			j.wal = nil
		}
		j.wmu.Unlock()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.db != nil {
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
	j.wmu.Lock()
	defer j.wmu.Unlock()
	recs := make([]rec, 0, len(events))
	seq := j.seq
	for _, e := range events {
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		seq++
		e.Seq = seq
		v, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("journal %s: %w", j.opt.Path, err)
		}
		recs = append(recs, rec{k: key(e.Time, seq), v: v, fleet: e.Fleet})
	}
	if err := j.commitRecs(recs); err != nil {
		return fmt.Errorf("journal %s: %w", j.opt.Path, err)
	}
	j.seq = seq
	j.count += int64(len(recs))
	j.written.Add(uint64(len(recs)))
	return nil
}

func key(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	putKey(k, t, seq)
	return k
}

// putKey writes the key of (t, seq) into k (16 bytes).
func putKey(k []byte, t time.Time, seq uint64) {
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	binary.BigEndian.PutUint64(k[8:], seq)
}

// write writes batch to the log (one write(2): from then on a killed
// process loses none of it) and queues it for the next commit; a failure
// is logged once until a write succeeds again, and counted.
func (j *Journal) write(batch []Event) {
	if j.opt.ReadOnly {
		j.dropped.Add(uint64(len(batch)))
		return
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	n0, seq0 := len(j.pending), j.seq
	// One buffer per batch for the lines and one for the keys: the
	// pending records are slices of them until their commit.
	buf := make([]byte, 0, 256*len(batch))
	keys := make([]byte, 16*len(batch))
	for i := range batch {
		e := &batch[i]
		j.seq++
		e.Seq = j.seq
		start := len(buf)
		var err error
		if buf, err = encodeEvent(buf, e); err != nil { // a Data value JSON cannot hold: this event only
			j.seq--
			j.dropped.Add(1)
			j.log.Error("journal: event not encodable; dropped", "kind", e.Kind, "err", err)
			continue
		}
		v := buf[start:len(buf):len(buf)]
		k := keys[16*i : 16*i+16 : 16*i+16]
		putKey(k, e.Time, e.Seq)
		j.sinceTrim += int64(2 * (len(v) + len(k)))
		j.pending = append(j.pending, rec{k: k, v: v, fleet: e.Fleet})
		buf = append(buf, '\n')
	}
	if err := j.walAppend(buf); err != nil {
		clear(j.pending[n0:])
		j.pending, j.seq = j.pending[:n0], seq0
		j.failed(err, len(batch))
		return
	}
	j.commits.Add(1)
	j.written.Add(uint64(len(j.pending) - n0))
	j.recovered()
	j.publish(batch)
}

// walAppend appends b to the log in one write; a short or failed write
// is cut off again, so the log never holds a torn line before good ones.
func (j *Journal) walAppend(b []byte) error {
	if j.wal == nil {
		f, err := os.OpenFile(walPath(j.opt.Path), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		j.wal, j.walSize = f, st.Size()
	}
	if j.opt.KeepFree && !diskreserve.Room(filepath.Dir(j.opt.Path), len(b)) {
		return &os.PathError{Op: "write", Path: walPath(j.opt.Path), Err: diskreserve.ErrNoRoom}
	}
	n, err := j.wal.Write(b)
	if err != nil {
		if n > 0 {
			_ = j.wal.Truncate(j.walSize)
		}
		return err
	}
	j.walSize += int64(n)
	return nil
}

// failed counts a failed write or commit (lost events dropped) and
// reports it once until writes succeed again (recovered).
func (j *Journal) failed(err error, lost int) {
	j.lastFail.Store(time.Now().UnixNano())
	j.dropped.Add(uint64(lost))
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
}

// recovered reports, once, that writing works again after a failure: a
// write that succeeds RecoverAfter after the last failure. A nearly full
// disk lets a small write through now and then (a page freed); that is
// not the end of the episode, so a flapping disk is reported once, not
// once per page.
func (j *Journal) recovered() {
	if !j.failing.Load() || time.Since(time.Unix(0, j.lastFail.Load())) < RecoverAfter {
		return
	}
	if j.failing.Swap(false) {
		j.log.Info("journal: writing again", "path", j.opt.Path)
	}
}

// RecoverAfter is how long writes must go without a failure before a
// failing journal says it writes again.
const RecoverAfter = 5 * time.Second

type corruptError struct{ error }

// commitRecs puts recs (keys, values, fleet index) in one transaction and
// moves the events bucket's sequence past them.
func (j *Journal) commitRecs(recs []rec) (err error) {
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
		top := b.Sequence()
		var fb *bolt.Bucket
		fbName := ""
		for _, r := range recs {
			if err := b.Put(r.k, r.v); err != nil {
				return err
			}
			top = max(top, binary.BigEndian.Uint64(r.k[8:]))
			if r.fleet != "" {
				if fb == nil || fbName != r.fleet {
					var err error
					if fb, err = fl.CreateBucketIfNotExists([]byte(r.fleet)); err != nil {
						return err
					}
					fbName = r.fleet
				}
				if err := fb.Put(r.k, nil); err != nil {
					return err
				}
			}
		}
		return b.SetSequence(top)
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
