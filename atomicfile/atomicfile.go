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
	// The rename is durable once the directory is synced; a failure to sync
	// it (a file system without directory fsync) leaves the new file in
	// place, so it is not an error.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
