package lifecycle

import (
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// logWatch wakes FollowLog when its log may have grown or rotated: one
// inotify instance (fsnotify) for every follower of a Manager, however
// many fleets and pages follow, each woken by events on its own file
// name in its directory, instead of a poll per follower every 200 ms (a
// dashboard following 10 fleets polled 50 times a second). The first
// subscriber opens the instance and starts its reader; the last one
// closes it, which ends the reader. The zero value is ready.
type logWatch struct {
	mu   sync.Mutex
	fsw  *fsnotify.Watcher    // nil while nobody follows
	dirs map[string]int       // watched directory → its subscribers
	subs map[*logSub]struct{} // guarded by mu
}

// logSub is one follower: c gets a signal (one pending at most) when an
// event names path.
type logSub struct {
	path string
	c    chan struct{}
}

func (s *logSub) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// subscribe registers a follower of path. false: no inotify (no instance
// to be had, the directory cannot be watched); the caller polls.
func (lw *logWatch) subscribe(path string) (*logSub, bool) {
	path = filepath.Clean(path)
	dir := filepath.Dir(path)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.fsw == nil {
		fsw, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, false
		}
		lw.fsw, lw.dirs, lw.subs = fsw, map[string]int{}, map[*logSub]struct{}{}
		go lw.read(fsw)
	}
	if lw.dirs[dir] == 0 {
		if err := lw.fsw.Add(dir); err != nil {
			lw.closeIfUnusedLocked()
			return nil, false
		}
	}
	lw.dirs[dir]++
	s := &logSub{path: path, c: make(chan struct{}, 1)}
	lw.subs[s] = struct{}{}
	return s, true
}

// unsubscribe removes s; the last one closes the inotify instance.
func (lw *logWatch) unsubscribe(s *logSub) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if _, ok := lw.subs[s]; !ok {
		return
	}
	delete(lw.subs, s)
	dir := filepath.Dir(s.path)
	if lw.dirs[dir]--; lw.dirs[dir] <= 0 {
		delete(lw.dirs, dir)
		_ = lw.fsw.Remove(dir)
	}
	lw.closeIfUnusedLocked()
}

// closeIfUnusedLocked closes the instance when nobody follows. Its reader
// sees the channels close and returns; Close runs in a goroutine of its
// own so that it never waits for a reader waiting for mu.
func (lw *logWatch) closeIfUnusedLocked() {
	if len(lw.subs) > 0 || lw.fsw == nil {
		return
	}
	fsw := lw.fsw
	lw.fsw, lw.dirs, lw.subs = nil, nil, nil
	go fsw.Close()
}

// read dispatches fsw's events until it is closed: each to the followers
// of the file it names (any change: a write, the rename of rotation, a
// new file), an error (an overflow lost events) to every follower.
func (lw *logWatch) read(fsw *fsnotify.Watcher) {
	for {
		select {
		case ev, ok := <-fsw.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			name := filepath.Clean(ev.Name)
			lw.mu.Lock()
			for s := range lw.subs {
				if s.path == name {
					s.wake()
				}
			}
			lw.mu.Unlock()
		case _, ok := <-fsw.Errors:
			if !ok {
				return
			}
			lw.mu.Lock()
			for s := range lw.subs {
				s.wake()
			}
			lw.mu.Unlock()
		}
	}
}
