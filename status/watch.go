package status

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// errWatchBound marks a directory left unwatched by MaxWatches.
var errWatchBound = errors.New("max_watches reached")

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// MaxWatches bounds the inotify watches placed under one root (one
	// fleet's worktree root); directories beyond it are walked when asked
	// about. Zero or less means registry.DefaultMaxWatches.
	MaxWatches int
	// Prune decides what is neither watched nor walked; nil means
	// NewPruner(nil).
	Prune *Pruner
	// Log receives warnings (watch limits, overflows); nil discards.
	Log *slog.Logger
	// Gather is how long Run leaves new events in the kernel's inotify
	// queue after it handled some, so that a tree being written wakes it
	// (and fsnotify's reader) once per Gather for a batch instead of once
	// per write; a change is recorded at most this late. Zero means
	// DefaultGather; negative, no gathering.
	Gather time.Duration
}

// DefaultGather is WatcherOptions.Gather's default: 20 members each
// writing a file every 0.3 s woke serve 67 times a second without it.
const DefaultGather = 250 * time.Millisecond

// Watcher is the FileClock of `fleetmgr serve`: inotify watches (through
// fsnotify) on every directory of each watched root, up to MaxWatches per
// root, and a "last change" time per directory, kept for the directory's
// whole subtree. A status then reads a counter instead of walking 50,000
// files. Where a watch cannot be placed (the bound, the kernel's
// max_user_watches, a permission), that directory's subtree is walked at
// query time instead, and the answer's source says "watch+walk".
//
// Times: a directory's last change starts as the newest mtime found when the
// root was added, and becomes the event's arrival time on every create,
// write, remove or rename below it (chmod is ignored, as a walk ignores it).
type Watcher struct {
	opt  WatcherOptions
	fsw  *fsnotify.Watcher
	walk *Walker

	mu    sync.Mutex
	roots map[string]*watchRoot
}

// watchRoot is one watched tree.
type watchRoot struct {
	path      string
	fleet     string               // the fleet whose worktree root it is, for the log
	last      map[string]time.Time // directory → newest change in its subtree
	watched   map[string]bool      // directories holding a watch
	unwatched []string             // directories whose subtree is walked instead
}

// NewWatcher opens an inotify instance. Call Run to process events and
// Close (or end Run's context) to release it.
func NewWatcher(opt WatcherOptions) (*Watcher, error) {
	if opt.MaxWatches <= 0 {
		opt.MaxWatches = 8192
	}
	if opt.Prune == nil {
		opt.Prune = NewPruner(nil)
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Gather == 0 {
		opt.Gather = DefaultGather
	}
	// Unbuffered: while Run gathers, fsnotify's reader waits to hand over
	// the event it read, and the next ones stay in the kernel's queue (up
	// to fs.inotify.max_queued_events, 16384 by default; an overflow makes
	// Run re-scan the roots), read in one go afterwards.
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &Watcher{opt: opt, fsw: fsw, walk: &Walker{Prune: opt.Prune}, roots: map[string]*watchRoot{}}, nil
}

// Run processes events until ctx ends, then closes the inotify instance.
// After events it handles those already read and then lets new ones
// gather for WatcherOptions.Gather before it takes the next.
func (w *Watcher) Run(ctx context.Context) {
	defer w.fsw.Close()
	var gather *time.Timer
	if w.opt.Gather > 0 {
		gather = time.NewTimer(time.Hour)
		gather.Stop()
		defer gather.Stop()
	}
	handled := false
	for {
		if handled && gather != nil {
			handled = false
			gather.Reset(w.opt.Gather)
			select {
			case <-ctx.Done():
				return
			case <-gather.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			w.event(ctx, ev)
			if gather != nil {
				// The rest of what gathered, until the queue is drained
				// (no event for a moment), before gathering again.
				if !w.drain(ctx, gather) {
					return
				}
				handled = true
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: re-read every root's mtimes so no
				// change goes unseen.
				w.opt.Log.Warn("status watcher: inotify queue overflow; re-scanning roots")
				w.mu.Lock()
				roots := make(map[string]string, len(w.roots))
				for p, r := range w.roots {
					roots[p] = r.fleet
				}
				w.mu.Unlock()
				for _, p := range slices.Sorted(maps.Keys(roots)) {
					w.addRoot(ctx, p, roots[p])
				}
				continue
			}
			w.opt.Log.Warn("status watcher", "err", err)
		}
	}
}

// drainQuiet is how long drain waits for one more event before it takes
// the kernel's queue as empty.
const drainQuiet = 2 * time.Millisecond

// drain handles events until none came for drainQuiet; false when the
// watcher was closed or ctx ended. t is Run's timer, stopped.
func (w *Watcher) drain(ctx context.Context, t *time.Timer) bool {
	t.Reset(drainQuiet)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return false
			}
			w.event(ctx, ev)
			t.Reset(drainQuiet)
		case <-t.C:
			return true
		}
	}
}

// Close releases the inotify instance (Run also does on return).
func (w *Watcher) Close() error { return w.fsw.Close() }

// Roots returns the watched roots, sorted.
func (w *Watcher) Roots() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.roots))
	for p := range w.roots {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Stats reports, over all roots, the watches placed and the directories
// left to walking.
func (w *Watcher) Stats() (watches, unwatched int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.roots {
		watches += len(r.watched)
		unwatched += len(r.unwatched)
	}
	return watches, unwatched
}

// SetRoots makes the watched roots exactly the keys of roots (absolute
// directories; each value is the fleet whose worktree root it is, named in
// the log): new ones are scanned and watched, missing directories are
// skipped (and retried on the next call), roots no longer named are
// unwatched.
func (w *Watcher) SetRoots(ctx context.Context, roots map[string]string) {
	want := map[string]string{}
	for r, fleet := range roots {
		want[filepath.Clean(r)] = fleet
	}
	w.mu.Lock()
	var drop []*watchRoot
	for p, r := range w.roots {
		if _, ok := want[p]; !ok {
			drop = append(drop, r)
			delete(w.roots, p)
		}
	}
	var add []string
	for p := range want {
		if _, ok := w.roots[p]; !ok {
			add = append(add, p)
		}
	}
	w.mu.Unlock()
	for _, r := range drop {
		for d := range r.watched {
			_ = w.fsw.Remove(d)
		}
	}
	sort.Strings(add)
	for _, p := range add {
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue
		}
		w.addRoot(ctx, p, want[p])
	}
}

// addRoot scans root (fleet's worktree root), placing watches up to the
// bound, and records every directory's newest mtime (rolled up to its
// ancestors).
func (w *Watcher) addRoot(ctx context.Context, root, fleet string) {
	t0 := time.Now()
	r := &watchRoot{path: root, fleet: fleet, last: map[string]time.Time{}, watched: map[string]bool{}}
	w.mu.Lock()
	if old, ok := w.roots[root]; ok {
		r.watched = old.watched // re-scan: keep the placed watches
	}
	w.mu.Unlock()
	w.scan(ctx, r, root)
	w.mu.Lock()
	if old, ok := w.roots[root]; ok {
		// Events that arrived during the scan are newer than any mtime.
		for d, t := range old.last {
			if t.After(r.last[d]) {
				r.last[d] = t
			}
		}
	}
	w.roots[root] = r
	watches, walked := len(r.watched), len(r.unwatched)
	w.mu.Unlock()
	w.opt.Log.Info("status watcher: root watched", "fleet", fleet, "root", root, "watches", watches,
		"walked", walked, "scan", time.Since(t0).Round(time.Millisecond))
	if walked > 0 {
		w.opt.Log.Warn("status watcher: some directories are walked instead of watched",
			"fleet", fleet, "root", root, "watches", watches, "walked", walked, "max_watches", w.opt.MaxWatches)
	}
}

// scan walks dir (inside r), watching and timing its directories. It is
// used for a new root and for a directory created under a watched one.
func (w *Watcher) scan(ctx context.Context, r *watchRoot, dir string) {
	newest := map[string]time.Time{}
	var dirs []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || ctx.Err() != nil {
			if d != nil && d.IsDir() && path != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if path != dir && w.opt.Prune.Skip(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		parent := filepath.Dir(path)
		if path == dir {
			parent = path
		}
		if m := info.ModTime(); m.After(newest[parent]) {
			newest[parent] = m
		}
		if !d.IsDir() {
			return nil
		}
		w.mu.Lock()
		have, n := r.watched[path], len(r.watched)
		w.mu.Unlock()
		if !have {
			err := errWatchBound
			if n < w.opt.MaxWatches {
				err = w.fsw.Add(path)
			}
			w.mu.Lock()
			if err != nil {
				r.unwatched = append(r.unwatched, path)
			} else {
				r.watched[path] = true
			}
			w.mu.Unlock()
			if err != nil {
				return filepath.SkipDir
			}
		}
		dirs = append(dirs, path)
		if m := info.ModTime(); m.After(newest[path]) {
			newest[path] = m
		}
		return nil
	})
	// Roll each directory's newest time up to its ancestors (deepest
	// first), then into the root's table.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if p := filepath.Dir(d); d != dir && newest[d].After(newest[p]) {
			newest[p] = newest[d]
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for d, t := range newest {
		if t.After(r.last[d]) {
			r.last[d] = t
		}
	}
	// A new subdirectory's times also count for its ancestors.
	if dir != r.path {
		w.touchLocked(r, filepath.Dir(dir), newest[dir])
	}
}

// rootOfLocked returns the root holding path, or nil.
func (w *Watcher) rootOfLocked(path string) *watchRoot {
	for p, r := range w.roots {
		if path == p || strings.HasPrefix(path, p+string(filepath.Separator)) {
			return r
		}
	}
	return nil
}

// touchLocked sets dir and its ancestors up to the root to t when newer.
func (w *Watcher) touchLocked(r *watchRoot, dir string, t time.Time) {
	for {
		if t.After(r.last[dir]) {
			r.last[dir] = t
		}
		if dir == r.path {
			return
		}
		parent := filepath.Dir(dir)
		if parent == dir || len(parent) < len(r.path) {
			return
		}
		dir = parent
	}
}

// event records one inotify event.
func (w *Watcher) event(ctx context.Context, ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod || w.opt.Prune.Skip(filepath.Base(ev.Name)) {
		return
	}
	now := time.Now()
	w.mu.Lock()
	r := w.rootOfLocked(ev.Name)
	if r == nil {
		w.mu.Unlock()
		return
	}
	w.touchLocked(r, filepath.Dir(ev.Name), now)
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		for d := range r.watched {
			if d == ev.Name || strings.HasPrefix(d, ev.Name+string(filepath.Separator)) {
				delete(r.watched, d)
				delete(r.last, d)
			}
		}
		r.unwatched = slices.DeleteFunc(r.unwatched, func(d string) bool {
			return d == ev.Name || strings.HasPrefix(d, ev.Name+string(filepath.Separator))
		})
	}
	w.mu.Unlock()
	if ev.Has(fsnotify.Create) {
		if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
			// A new directory: watch it and what was already put in it.
			w.scan(ctx, r, ev.Name)
			w.mu.Lock()
			w.touchLocked(r, ev.Name, now)
			w.mu.Unlock()
		}
	}
}

// LastChange answers from the counters when dir is under a watched root,
// walking only the parts of dir that hold no watch; outside every root it
// walks. A missing dir is an fs.ErrNotExist error.
func (w *Watcher) LastChange(ctx context.Context, dir string) (time.Time, string, error) {
	dir = filepath.Clean(dir)
	st, err := os.Stat(dir)
	if err != nil {
		return time.Time{}, "", err
	}
	if !st.IsDir() {
		return time.Time{}, "", &fs.PathError{Op: "status", Path: dir, Err: errors.New("not a directory")}
	}
	w.mu.Lock()
	r := w.rootOfLocked(dir)
	if r == nil {
		w.mu.Unlock()
		return w.walk.LastChange(ctx, dir)
	}
	t, known := r.last[dir]
	var walk []string
	for _, u := range r.unwatched {
		switch {
		case dir == u || strings.HasPrefix(dir, u+string(filepath.Separator)):
			known = false // dir itself is in an unwatched subtree
		case strings.HasPrefix(u, dir+string(filepath.Separator)):
			walk = append(walk, u)
		}
	}
	w.mu.Unlock()
	if !known {
		// Not (yet) watched: a directory made a moment ago, or one beyond
		// the bound.
		return w.walk.LastChange(ctx, dir)
	}
	if len(walk) == 0 {
		return t, SourceWatch, nil
	}
	for _, u := range walk {
		m, err := NewestMtime(ctx, u, w.opt.Prune)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return time.Time{}, "", err
		}
		if m.After(t) {
			t = m
		}
	}
	return t, SourceMixed, nil
}

// ChangedSince answers from the watcher's memory alone, without a stat or
// a walk, whether anything changed under dir after t. known is false when
// it cannot tell so: dir is under no watched root, holds no watch yet, or
// is or holds a directory without one (LastChange walks those). It is
// cheap enough to ask for every member every second (the dashboard does
// while a page is open).
func (w *Watcher) ChangedSince(dir string, t time.Time) (changed, known bool) {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rootOfLocked(dir)
	if r == nil {
		return false, false
	}
	last, ok := r.last[dir]
	if !ok {
		return false, false
	}
	sep := string(filepath.Separator)
	for _, u := range r.unwatched {
		if dir == u || strings.HasPrefix(dir, u+sep) || strings.HasPrefix(u, dir+sep) {
			return false, false
		}
	}
	return last.After(t), true
}

// KeepRoots keeps w's roots equal to the worktree roots of m's running
// local fleets, checking at once, on every signal of changes (a fleet's
// state changed; nil: none) and every `every` until ctx ends. It is the
// owner loop `fleetmgr serve` runs next to Watcher.Run.
func KeepRoots(ctx context.Context, w *Watcher, m *lifecycle.Manager, changes <-chan struct{}, every time.Duration) {
	host, _ := os.Hostname()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		roots := map[string]string{}
		for _, n := range m.Names() {
			f, err := m.Fleet(n)
			if err != nil || !isLocal(host, f.Host) || f.WorktreeRoot == "" {
				continue
			}
			if st, err := m.State(n); err == nil && st.Shown.Phase == lifecycle.PhaseRunning {
				roots[f.WorktreeRoot] = n
			}
		}
		w.SetRoots(ctx, roots)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changes:
		}
	}
}
