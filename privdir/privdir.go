// Package privdir makes and checks the private directories fleetmgr keeps
// its state in (docs/SECURITY.md "Files"). fleetmgr writes into the state
// dir by names it chooses (fleetd.log, state.json, lock files, the
// federation seen-set …), so whoever else can create entries there can plant
// a symbolic link at such a name and have fleetmgr write through it into a
// file of the operator's (a fleet's log appended to ~/.bashrc, say), or
// replace what fleetmgr reads back. A directory another uid owns (one made
// first under /tmp by someone else, the classic squatting) or one that
// group or others may write into is therefore refused, as is one whose
// parent directories let another user rename or replace it (OpenSSH's
// StrictModes applies the same rule to ~/.ssh).
package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Error is a directory Check refuses.
type Error struct {
	// Path is the directory refused (the given one, or one above it).
	Path string
	// Msg says what is wrong and what to do.
	Msg string
}

// Error names the directory and the fix.
func (e *Error) Error() string { return "directory " + e.Path + ": " + e.Msg }

// Ensure creates dir (mode 0700, and its missing parents) when it does not
// exist, then checks it as Check does.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return Check(dir)
}

// Check returns nil when dir — symbolic links resolved — is a directory
// owned by this process's effective uid that neither group nor others may
// write into, and every directory above it is owned by this uid or root and
// is either not writable by group or others or sticky (as /tmp is: there
// nobody can rename another's entry). Anything else is an *Error saying
// how to fix it. A missing dir is an error wrapping fs.ErrNotExist.
func Check(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return err
	}
	uid := os.Geteuid()
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return &Error{Path: dir, Msg: "not a directory"}
	}
	owner, ok := ownerOf(st)
	if !ok {
		return &Error{Path: dir, Msg: "its owner cannot be read"}
	}
	name := dir
	if real != filepath.Clean(dir) {
		name = dir + " (" + real + ")"
	}
	if owner != uid {
		return &Error{Path: name, Msg: fmt.Sprintf("owned by uid %d, not by uid %d that fleetmgr runs as: whoever owns it can plant links there that fleetmgr would write through (give [manager] state_dir a directory of your own, or chown it after checking its content)", owner, uid)}
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return &Error{Path: name, Msg: fmt.Sprintf("mode %04o lets group or others create entries in it, such as links fleetmgr would write through; run chmod 700 %s (and check its content)", perm, real)}
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		pst, err := os.Stat(p)
		if err != nil {
			return err
		}
		o, ok := ownerOf(pst)
		switch {
		case !ok:
			return &Error{Path: p, Msg: fmt.Sprintf("its owner cannot be read (it holds %s)", real)}
		case o != uid && o != 0:
			return &Error{Path: p, Msg: fmt.Sprintf("owned by uid %d, who could rename %s and put another directory in its place; keep the state dir under directories of your own or root's", o, real)}
		case pst.Mode().Perm()&0o022 != 0 && pst.Mode()&fs.ModeSticky == 0:
			return &Error{Path: p, Msg: fmt.Sprintf("mode %04o without the sticky bit lets group or others rename %s and put another directory in its place; run chmod go-w %s", pst.Mode().Perm(), real, p)}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// IsError reports whether err is (or wraps) an *Error.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func ownerOf(st fs.FileInfo) (int, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Uid), true
}

// FileProblem is the one rule for a file fleetmgr keeps a secret in (a
// key, a password, a token, serve's environment file): st, as stat or
// fstat read the file at path, must be a regular file owned by this
// process's effective uid with no permission bits for group or others.
// It returns "" when st passes, and otherwise one clause naming what is
// wrong and how to fix it ("not a regular file", "owned by uid N, not by
// uid M that fleetmgr runs as; …", "mode 0640 lets group or others read or
// change it; run chmod 600 PATH"), for the caller to put after the file's
// name and before what the secret is.
func FileProblem(path string, st fs.FileInfo) string {
	if !st.Mode().IsRegular() {
		return "not a regular file"
	}
	uid := os.Geteuid()
	if owner, ok := ownerOf(st); !ok {
		return "its owner cannot be read"
	} else if owner != uid {
		return fmt.Sprintf("owned by uid %d, not by uid %d that fleetmgr runs as; whoever owns it can read or replace it (chown it, or make a new one)", owner, uid)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Sprintf("mode %04o lets group or others read or change it; run chmod 600 %s", perm, path)
	}
	return ""
}
