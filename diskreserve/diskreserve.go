// Package diskreserve keeps room on a file system for the writes that must
// not fail when it fills up: fleetmgr's records of its fleets (state.json),
// without which serve cannot restart a fleetd (issue 25: "a full disk
// (ENOSPC) … never stops supervision").
//
// Two halves. A Reserve is a file of a fixed size in the state dir whose
// blocks are really allocated (written, not sparse); when a record write
// meets ENOSPC the writer releases it (removes the file), so the record,
// rewritten, finds room; it is made again once the file system has room
// (Ensure). And the writers that may drop what they write when the disk is
// full (the journal, the log pipe) leave the last KeepFree bytes alone
// (Room), so what the Reserve frees is left to the records. Both are
// heuristics over one shared file system: another program may still take
// the space freed; what fleetmgr itself writes does not.
package diskreserve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Size is the reserve's size in bytes: room for a few hundred record
// writes (a record is 1–4 KiB; each write frees the one it replaces).
const Size = 1 << 20

// KeepFree is how many bytes the droppable writers (journal, log pipe)
// leave free on the state dir's file system: twice the reserve, so a
// released reserve is not taken back by them before the file system has
// room again for the reserve itself.
const KeepFree = 2 * Size

// Name is the reserve's file name in the state dir.
const Name = ".reserve"

// Free reports the bytes of dir's file system an unprivileged writer may
// still use (statfs f_bavail × f_bsize).
func Free(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Room reports whether a droppable write of n bytes to dir leaves
// KeepFree bytes free. An unreadable file system counts as room: the
// write itself then says what is wrong.
func Room(dir string, n int) bool {
	free, err := Free(dir)
	return err != nil || free >= uint64(n)+KeepFree
}

// ErrNoRoom wraps syscall.ENOSPC for a droppable write held back by Room:
// errors.Is(err, syscall.ENOSPC) holds for it.
var ErrNoRoom = fmt.Errorf("fewer than %d bytes free, kept for fleetmgr's records: %w", KeepFree, syscall.ENOSPC)

// Reserve is the reserve file of one state dir. Its methods are safe for
// concurrent use.
type Reserve struct {
	path string
	size int64

	mu       sync.Mutex
	released uint64 // how many times Release freed the file
}

// New returns the reserve at dir/Name of size bytes (Size when 0); nothing
// is written until Ensure.
func New(dir string, size int64) *Reserve {
	if size <= 0 {
		size = Size
	}
	return &Reserve{path: filepath.Join(dir, Name), size: size}
}

// Path is the reserve file's path.
func (r *Reserve) Path() string { return r.path }

// Ensure makes the reserve file if it is missing (or short) and the file
// system has room for it and KeepFree beside it; made reports whether it
// wrote one. Its blocks are written and synced, so they are allocated.
// A file system without room is not an error (made is false); other
// failures are.
func (r *Reserve) Ensure() (made bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, err := os.Stat(r.path); err == nil && st.Mode().IsRegular() && st.Size() >= r.size {
		return false, nil
	}
	dir := filepath.Dir(r.path)
	if free, err := Free(dir); err != nil {
		return false, err
	} else if free < uint64(r.size)+KeepFree {
		return false, nil
	}
	tmp := r.path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return false, err
	}
	buf := make([]byte, 64<<10)
	for n := int64(0); n < r.size; n += int64(len(buf)) {
		if _, err = f.Write(buf[:min(int64(len(buf)), r.size-n)]); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, syscall.ENOSPC) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Release removes the reserve file, freeing its blocks for a write that
// met ENOSPC; freed reports whether there was one to remove.
func (r *Reserve) Release() (freed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.Remove(r.path); err != nil {
		return false
	}
	r.released++
	return true
}

// Released counts the releases so far (for /metrics).
func (r *Reserve) Released() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}
