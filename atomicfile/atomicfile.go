// Package atomicfile replaces a file's contents so that a reader, or the
// next start after a crash, sees either the old file or the new one, never
// a part: the data goes to a temporary file beside the target, is synced,
// and is renamed over it (github.com/google/renameio/v2 does the work).
//
// One policy for every file fleetmgr writes this way (state files, port
// allocations, cached catalogues, unit files, client configurations): the
// temporary file is made in the target's own directory (never $TMPDIR, so
// the rename cannot cross file systems and nothing is probed elsewhere),
// and the result has exactly the mode asked for, whatever the umask or the
// mode of the file it replaces. The directory is synced after the rename,
// so the new file survives a power loss. Read is the other half: such a
// file read back, refusing what fleetmgr never writes (a named pipe, a
// device, a file over its bound) instead of blocking or filling memory.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// Staged is data written to a synced temporary file beside its target,
// not yet in place: the caller may read or check it by Name, then put it
// in place with Replace (rename over the target) or Link (only where
// nothing is yet). Cleanup removes the temporary file if it was not put in
// place; call it (deferred) on every path.
type Staged struct {
	path string
	t    *renameio.PendingFile
}

// Stage writes data to a temporary file in path's own directory (which
// must exist), with exactly mode perm (permission bits only), and syncs
// it. On error nothing is left behind.
func Stage(path string, data []byte, perm fs.FileMode) (*Staged, error) {
	t, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(filepath.Dir(path)),
		renameio.WithStaticPermissions(perm))
	if err != nil {
		return nil, err
	}
	if _, err := t.Write(data); err != nil {
		t.Cleanup()
		return nil, err
	}
	if err := t.Sync(); err != nil {
		t.Cleanup()
		return nil, err
	}
	return &Staged{path: path, t: t}, nil
}

// Name is the temporary file's path, for reading or checking it before it
// is put in place.
func (s *Staged) Name() string { return s.t.Name() }

// Replace renames the staged file over its target and syncs the directory:
// a reader sees the old file or the new one, never a part.
func (s *Staged) Replace() error {
	if err := s.t.CloseAtomicallyReplace(); err != nil {
		return err
	}
	syncDir(filepath.Dir(s.path))
	return nil
}

// Link puts the staged file in place only if nothing is at its target: a
// link never replaces. created is false, with a nil error, when the target
// already existed.
func (s *Staged) Link() (created bool, err error) {
	if err := os.Link(s.t.Name(), s.path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	syncDir(filepath.Dir(s.path))
	return true, nil
}

// Cleanup closes and removes the temporary file; after Replace or Link it
// only removes the temporary name (the target keeps the data).
func (s *Staged) Cleanup() { _ = s.t.Cleanup() }

// Write replaces path's contents with data, mode perm (permission bits
// only). The directory must exist. On any error path is left as it was and
// the temporary file is removed; the error is the file system's (*fs.PathError).
func Write(path string, data []byte, perm fs.FileMode) error {
	s, err := Stage(path, data, perm)
	if err != nil {
		return err
	}
	defer s.Cleanup()
	return s.Replace()
}

// Create writes data to path, mode perm, only if nothing is there yet:
// like Write, the file appears whole (temporary file beside it, synced),
// but it is linked into place rather than renamed, and a link never
// replaces. created is false, with a nil error, when path already existed
// (another process got there first: the caller reads what it wrote). For
// secrets made once, such as a key or a password, where two writers racing
// must end up agreeing on one. The directory must exist.
func Create(path string, data []byte, perm fs.FileMode) (created bool, err error) {
	s, err := Stage(path, data, perm)
	if err != nil {
		return false, err
	}
	defer s.Cleanup()
	return s.Link()
}

// syncDir makes a rename or link in dir durable; a failure to sync (a
// file system without directory fsync) leaves the new name in place, so
// it is not an error.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
