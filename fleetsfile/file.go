package fleetsfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/registry"
)

// maxFileBytes is the largest fleets.toml Edit reads (registry.Load's own
// bound).
const maxFileBytes = 1 << 20

// Create writes data as a new file at path (mode 0600), creating its
// directory (0700) when missing. It never replaces a file: when path
// exists, the error names it and says how to go on. The file appears whole
// or not at all (written to a temporary file beside it, then hard-linked
// into place, which fails if path exists by then). Before that, data is
// validated with registry.Load; its problems are reported with path and
// line, and nothing is written. check, when not nil, is given the
// configuration data loads as (its Path already path's) and may refuse it.
func Create(path string, data []byte, check func(*registry.Config) error) (*registry.Config, error) {
	if st, err := os.Lstat(path); err == nil {
		return nil, existsError(path, st)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	staged, err := atomicfile.Stage(path, data, 0o600)
	if err != nil {
		return nil, err
	}
	defer staged.Cleanup()
	cfg, err := validate(staged.Name(), path)
	if err != nil {
		return nil, err
	}
	cfg.Path = absPath(path)
	if check != nil {
		if err := check(cfg); err != nil {
			return nil, fmt.Errorf("%w; nothing was written", err)
		}
	}
	created, err := staged.Link()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !created {
		st, err := os.Lstat(path)
		if err != nil {
			return nil, fmt.Errorf("%s: appeared and went while being created: %w", path, err)
		}
		return nil, existsError(path, st)
	}
	return cfg, nil
}

func existsError(path string, st fs.FileInfo) error {
	what := "a file"
	if !st.Mode().IsRegular() {
		what = "something"
	}
	return fmt.Errorf("%s exists already (%s); fleetmgr never overwrites it: add fleets with `fleetmgr add`, or name another file with --config", path, what)
}

// Edit replaces the fleets.toml at path by edit(its bytes), in place:
//   - a symbolic link is followed and its target edited (the link stays);
//   - concurrent Edits of the same file by fleetmgr processes take turns
//     (flock on the file); a change made by anything else between the read
//     and the replace makes Edit fail, changing nothing;
//   - the result is validated with registry.Load before it replaces the
//     file, and every problem is reported as path:line;
//   - the new file is written beside the old one, given its mode, synced,
//     and renamed over it, so a reader sees the old file or the new one.
//
// check, when not nil, is given the configuration the result loads as (its
// Path already path's, absolute) and may refuse it. On any error the file
// is left as it was, and the error names it. Edit returns the configuration
// the new file loads as.
func Edit(path string, edit func(src []byte) ([]byte, error), check func(*registry.Config) error) (*registry.Config, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	unlock, err := lock(real)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer unlock()
	st, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	src, err := readBounded(real)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out, err := edit(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w; the file is unchanged", path, err)
	}
	staged, err := atomicfile.Stage(real, out, st.Mode().Perm())
	if err != nil {
		return nil, fmt.Errorf("%s: %w; the file is unchanged", path, err)
	}
	defer staged.Cleanup()
	cfg, err := validate(staged.Name(), path)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s is unchanged: the edit would leave it invalid", err, path)
	}
	cfg.Path = absPath(path)
	if check != nil {
		if err := check(cfg); err != nil {
			return nil, fmt.Errorf("%w; %s is unchanged", err, path)
		}
	}
	if now, err := readBounded(real); err != nil || !bytes.Equal(now, src) {
		return nil, fmt.Errorf("%s changed while fleetmgr was editing it; it is left as it is now: run the command again", path)
	}
	if err := staged.Replace(); err != nil {
		return nil, fmt.Errorf("%s: %w; the file is unchanged", path, err)
	}
	return cfg, nil
}

// lock takes an exclusive flock on the file at path and returns its
// release. The lock is on the file's inode, which a finished Edit replaces:
// after the lock is granted, path must still name the locked inode, else
// the lock is taken again on the new one.
func lock(path string) (func(), error) {
	for range 100 {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() { f.Close() }, nil
		}
		f.Close()
		if err2 != nil {
			return nil, err2
		}
	}
	return nil, errors.New("the file kept being replaced while waiting for it")
}

// readBounded reads a regular file of at most maxFileBytes (through
// atomicfile.Read: bounded, never blocking on a named pipe).
func readBounded(path string) ([]byte, error) {
	b, err := atomicfile.Read(path, maxFileBytes)
	if errors.Is(err, atomicfile.ErrTooLarge) {
		return nil, fmt.Errorf("more than the %d bytes fleets.toml may hold", maxFileBytes)
	}
	return b, err
}

// validate loads the file at tmp with registry.Load and reports its
// problems as problems of path (the file tmp will become): the temporary
// name is replaced by path in every message.
func validate(tmp, path string) (*registry.Config, error) {
	cfg, err := registry.Load(tmp)
	if err == nil {
		return cfg, nil
	}
	return nil, renameErr(err, tmp, path)
}

// renameErr rewrites err, which speaks of the file tmp, to speak of path.
func renameErr(err error, tmp, path string) error {
	var re *registry.Error
	if errors.As(err, &re) {
		if multi, ok := err.(interface{ Unwrap() []error }); ok {
			var out []error
			for _, e := range multi.Unwrap() {
				out = append(out, renameErr(e, tmp, path))
			}
			return errors.Join(out...)
		}
		if re2, ok := err.(*registry.Error); ok {
			c := *re2
			c.File = path
			c.Msg = strings.ReplaceAll(c.Msg, tmp, path)
			return &c
		}
	}
	return errors.New(strings.ReplaceAll(err.Error(), tmp, path))
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
