package lifecycle

import (
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// fileWatch wakes whoever waits for a file of the state dir to change:
// FollowLog when its log may have grown or rotated, the supervisor when a
// fleet's state.json was renamed into place (supervise.go). One inotify
// instance (fsnotify) serves every subscriber of a Manager, however many
// fleets and pages follow, each woken by events on its own file name in
// its directory, instead of a poll per subscriber (a dashboard following
// 10 fleets polled 50 times a second; the supervisor read every state
// file 4 times a second). The first subscriber opens the instance and
// starts its reader; the last one closes it, which ends the reader. The
// zero value is ready.
type fileWatch struct {
	mu   sync.Mutex
	fsw  *fsnotify.Watcher     // nil while nobody subscribes
	dirs map[string]int        // watched directory → its subscribers
	subs map[*fileSub]struct{} // guarded by mu
}

// fileSub is one subscriber: c gets a signal (one pending at most) when
// an event names path, and when events were lost (an overflow).
type fileSub struct {
	path string
	c    chan struct{}
}

func (s *fileSub) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// subscribe registers a subscriber of path, whose directory must exist.
// false: no inotify (no instance to be had, the directory cannot be
// watched); the caller polls.
func (fw *fileWatch) subscribe(path string) (*fileSub, bool) {
	path = filepath.Clean(path)
	dir := filepath.Dir(path)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.fsw == nil {
		fsw, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, false
		}
		fw.fsw, fw.dirs, fw.subs = fsw, map[string]int{}, map[*fileSub]struct{}{}
		go fw.read(fsw)
	}
	if fw.dirs[dir] == 0 {
		if err := fw.fsw.Add(dir); err != nil {
			fw.closeIfUnusedLocked()
			return nil, false
		}
	}
	fw.dirs[dir]++
	s := &fileSub{path: path, c: make(chan struct{}, 1)}
	fw.subs[s] = struct{}{}
	return s, true
}

// unsubscribe removes s; the last one closes the inotify instance.
func (fw *fileWatch) unsubscribe(s *fileSub) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if _, ok := fw.subs[s]; !ok {
		return
	}
	delete(fw.subs, s)
	dir := filepath.Dir(s.path)
	if fw.dirs[dir]--; fw.dirs[dir] <= 0 {
		delete(fw.dirs, dir)
		_ = fw.fsw.Remove(dir)
	}
	fw.closeIfUnusedLocked()
}

// closeIfUnusedLocked closes the instance when nobody subscribes. Its reader
// sees the channels close and returns; Close runs in a goroutine of its
// own so that it never waits for a reader waiting for mu.
func (fw *fileWatch) closeIfUnusedLocked() {
	if len(fw.subs) > 0 || fw.fsw == nil {
		return
	}
	fsw := fw.fsw
	fw.fsw, fw.dirs, fw.subs = nil, nil, nil
	go fsw.Close()
}

// read dispatches fsw's events until it is closed: each to the subscribers
// of the file it names (any change: a write, the rename of rotation, a
// new file), an error (an overflow lost events) to every subscriber.
func (fw *fileWatch) read(fsw *fsnotify.Watcher) {
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
			fw.mu.Lock()
			for s := range fw.subs {
				if s.path == name {
					s.wake()
				}
			}
			fw.mu.Unlock()
		case _, ok := <-fsw.Errors:
			if !ok {
				return
			}
			fw.mu.Lock()
			for s := range fw.subs {
				s.wake()
			}
			fw.mu.Unlock()
		}
	}
}
