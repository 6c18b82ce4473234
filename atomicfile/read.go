package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Size bounds for Read, by what fleetmgr writes: far above the largest
// such file it makes, far below what would hurt to hold in memory.
const (
	// MaxSmall bounds a record: state.json, serve.json, a spawned
	// process, a password, ports.json.
	MaxSmall = 4 << 20
	// MaxCatalogue bounds a cached tool catalogue, which holds a fleet's
	// tools/list result (itself bounded by the proxy's 64 MiB message cap).
	MaxCatalogue = 64 << 20
)

// ErrNotRegular is wrapped by Read's error for a path that is not a
// regular file (a named pipe, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by Read's error for a file over its bound.
var ErrTooLarge = errors.New("larger than any such file fleetmgr writes")

// Read reads back a file fleetmgr wrote with Write: it must be a regular
// file of at most max bytes. The open never blocks (O_NONBLOCK), so a
// named pipe at the path is refused at once instead of hanging the caller
// where neither its context nor SIGTERM reaches it. Errors: the open's own
// (fs.ErrNotExist for a missing file, to test with errors.Is), or one
// naming path and wrapping ErrNotRegular (with the kind of file found) or
// ErrTooLarge, with what to do.
func Read(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s): fleetmgr writes only regular files there; remove it", path, ErrNotRegular, kind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w (over %d bytes); fix or remove it", path, ErrTooLarge, max)
	}
	return b, nil
}

// kind names a file mode's type for a message.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "mode " + m.Type().String()
	}
}
