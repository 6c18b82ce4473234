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

// Write replaces path's contents with data, mode perm (permission bits
// only). The directory must exist. On any error path is left as it was and
// the temporary file is removed; the error is the file system's (*fs.PathError).
func Write(path string, data []byte, perm fs.FileMode) error {
	t, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(filepath.Dir(path)),
		renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer t.Cleanup()
	if _, err := t.Write(data); err != nil {
		return err
	}
	if err := t.CloseAtomicallyReplace(); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// Create writes data to path, mode perm, only if nothing is there yet:
// like Write, the file appears whole (temporary file beside it, synced),
// but it is linked into place rather than renamed, and a link never
// replaces. created is false, with a nil error, when path already existed
// (another process got there first: the caller reads what it wrote). For
// secrets made once, such as a key or a password, where two writers racing
// must end up agreeing on one. The directory must exist.
func Create(path string, data []byte, perm fs.FileMode) (created bool, err error) {
	t, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(filepath.Dir(path)),
		renameio.WithStaticPermissions(perm))
	if err != nil {
		return false, err
	}
	defer t.Cleanup() // closes and removes the temporary name
	if _, err := t.Write(data); err != nil {
		return false, err
	}
	if err := t.Sync(); err != nil {
		return false, err
	}
	if err := os.Link(t.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	syncDir(filepath.Dir(path))
	return true, nil
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
