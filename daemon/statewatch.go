package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// stateWatch tells the dashboard when the fleets' lifecycle rows may have
// changed, so it reads them then instead of polling them every 250 ms
// (dashboard.Options.Changes): whenever a fleet's state.json under
// <state_dir>/fleets is written (lifecycle writes it by renaming a new
// file into place, and every lifecycle change goes through it: a start, a
// stop, the supervisor's restart after a kill -9 of fleetd), a fleet
// directory appears or goes, and on every config reload (Poke). It uses
// inotify (fsnotify) on the fleets directory and on each fleet directory.
// C's channel holds one pending signal; more are dropped.
type stateWatch struct {
	dir string // <state_dir>/fleets
	fsw *fsnotify.Watcher
	log *slog.Logger
	c   chan struct{}
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
	w := &stateWatch{dir: dir, fsw: fsw, log: log, c: make(chan struct{}, 1)}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			w.add(filepath.Join(dir, e.Name()))
		}
	}
	return w, nil
}

// C is the channel the signals go to (dashboard.Options.Changes).
func (w *stateWatch) C() <-chan struct{} { return w.c }

// Poke signals once (a config reload changed the set of fleets or what
// they would be started with).
func (w *stateWatch) Poke() {
	select {
	case w.c <- struct{}{}:
	default:
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
