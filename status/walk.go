package status

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// FileClock tells when something last changed under a member's worktree.
// The Walker walks the tree each time; the serve daemon's Watcher reads
// inotify counters and walks only where it could not place a watch.
type FileClock interface {
	// LastChange returns the time of the newest change seen under dir
	// (zero for an empty tree) and the source, SourceWalk, SourceWatch or
	// SourceMixed. A missing dir is an error satisfying
	// errors.Is(err, fs.ErrNotExist).
	LastChange(ctx context.Context, dir string) (time.Time, string, error)
}

// Pruner decides which names a walk or watch skips: DefaultStatusIgnore
// plus configured names or filepath.Match patterns on a base name.
type Pruner struct {
	names    map[string]bool
	patterns []string
}

// NewPruner returns a Pruner for registry.DefaultStatusIgnore plus extra.
func NewPruner(extra []string) *Pruner {
	p := &Pruner{names: map[string]bool{}}
	for _, n := range append(slices.Clone(registry.DefaultStatusIgnore), extra...) {
		if hasMeta(n) {
			p.patterns = append(p.patterns, n)
		} else {
			p.names[n] = true
		}
	}
	return p
}

func hasMeta(s string) bool {
	for _, r := range s {
		switch r {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}

// Skip reports whether base name is pruned.
func (p *Pruner) Skip(name string) bool {
	if p.names[name] {
		return true
	}
	for _, pat := range p.patterns {
		if ok, _ := filepath.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// Walker is the FileClock that walks: the newest modification time of any
// file or directory under the worktree, pruned. It costs about 0.2 CPU-s
// per 50,000 files (measured: docs/ARCHITECTURE.md "Status: working or
// stalled"), which is why serve watches.
type Walker struct {
	// Prune decides what is skipped; nil means NewPruner(nil).
	Prune *Pruner
}

// LastChange walks dir. Unreadable subdirectories are skipped; ctx is
// checked between entries so a deadline stops a slow walk.
func (w *Walker) LastChange(ctx context.Context, dir string) (time.Time, string, error) {
	p := w.Prune
	if p == nil {
		p = NewPruner(nil)
	}
	t, err := NewestMtime(ctx, dir, p)
	return t, SourceWalk, err
}

// NewestMtime returns the newest mtime of dir itself and everything below it
// that p does not prune. Symlinks are not followed (their own mtime counts).
func NewestMtime(ctx context.Context, dir string, p *Pruner) (time.Time, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}, err
	}
	if !st.IsDir() {
		return time.Time{}, &fs.PathError{Op: "walk", Path: dir, Err: errors.New("not a directory")}
	}
	newest := st.ModTime()
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // vanished or unreadable: skip
		}
		if n++; n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if path == dir {
			return nil
		}
		if p.Skip(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if m := info.ModTime(); m.After(newest) {
			newest = m
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return newest, nil
}
