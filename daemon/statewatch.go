package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// stateWatch tells serve's readers of the fleets' lifecycle rows when
// they may have changed, so they read them then instead of polling them:
// the dashboard (dashboard.Options.Changes, instead of every 250 ms), the
// catalogue upkeep (proxy.Options.StateChanges) and the status watcher's
// roots (status.KeepRoots), each instead of every 2 s. It signals whenever
// a fleet's state.json under <state_dir>/fleets is written (lifecycle
// writes it by renaming a new file into place, and every lifecycle change
// goes through it: a start, a stop, the supervisor's restart after a kill
// -9 of fleetd), a fleet directory appears or goes, and on every config
// reload (Poke). It uses inotify (fsnotify) on the fleets directory and on
// each fleet directory. Each subscriber's channel (Subscribe) holds one
// pending signal; more are dropped.
type stateWatch struct {
	dir  string // <state_dir>/fleets
	fsw  *fsnotify.Watcher
	log  *slog.Logger
	mu   sync.Mutex
	subs []chan struct{}
}

// newStateWatch watches stateDir/fleets (made 0700 when missing) and every
// fleet directory in it. It fails when inotify is unavailable; serve's
// dashboard then polls the rows.
func newStateWatch(stateDir string, log *slog.Logger) (*stateWatch, error) {
	dir := filepath.Join(stateDir, "fleets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, err
	}
	w := &stateWatch{dir: dir, fsw: fsw, log: log}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			w.add(filepath.Join(dir, e.Name()))
		}
	}
	return w, nil
}

// Subscribe returns a new channel the signals go to, holding one pending
// signal. Subscribers are never removed: serve makes them at start, and
// they live as long as the watch.
func (w *stateWatch) Subscribe() chan struct{} {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, c)
	w.mu.Unlock()
	return c
}

// Poke signals every subscriber once (a config reload changed the set of
// fleets or what they would be started with).
func (w *stateWatch) Poke() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (w *stateWatch) add(dir string) {
	if err := w.fsw.Add(dir); err != nil {
		w.log.Warn("dashboard: cannot watch a fleet's state directory; its changes show at the next read (5 s)", "dir", dir, "err", err)
	}
}

// Run turns inotify events into signals until ctx ends, then closes the
// inotify instance.
func (w *stateWatch) Run(ctx context.Context) {
	defer w.fsw.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// An overflow loses events: one read of the rows makes up for them.
			w.log.Warn("dashboard: state directory watch", "err", err)
			w.Poke()
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if w.relevant(ev) {
				w.Poke()
			}
		}
	}
}

// relevant says whether ev may change a lifecycle row: state.json of a
// fleet directory touched, or a fleet directory made (it is watched from
// now on) or removed.
func (w *stateWatch) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	if filepath.Dir(ev.Name) == w.dir {
		if ev.Has(fsnotify.Create) {
			if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
				w.add(ev.Name)
			}
		}
		return true
	}
	return filepath.Base(ev.Name) == "state.json" && filepath.Dir(filepath.Dir(ev.Name)) == w.dir
}
