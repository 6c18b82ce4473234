// Package envfile reads the private file that holds secrets for `fleetmgr
// serve` under a service manager: the broker administrator's user and
// password, in the variables [broker] admin_user_env and
// admin_password_env name. systemd reads it itself (EnvironmentFile=);
// launchd has no such key, so the launchd agent runs `fleetmgr serve
// --env-file PATH`, which calls Load before anything reads the
// environment. Either way the secrets never appear in the unit, the plist,
// or a command line.
//
// The format is the part of systemd's EnvironmentFile= syntax
// (systemd.exec(5)) that systemd and this package read the same way, one
// assignment per line:
//
//	# a comment (also ';'); blank lines are skipped
//	NAME=value            leading and trailing blanks of value dropped;
//	                      no '\' or '$' in it
//	NAME='value'          verbatim, on one line
//	NAME="value"          verbatim, on one line, no '\', '$' or '`' inside
//
// Anything else — a backslash in an unquoted value, a quote that does not
// close on its line, a line without '=', an invalid NAME — is refused with
// the file and line, rather than read one way here and another by
// systemd.
package envfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fleetmgr/fleetmgr/privdir"
)

// Var is one assignment.
type Var struct {
	Name, Value string
	// Line is the 1-based line it was read from.
	Line int
}

// maxBytes bounds the file: it holds a few variables.
const maxBytes = 64 << 10

// CheckPrivate returns nil when path (symbolic links followed) passes
// privdir.FileProblem: a regular file owned by the effective uid with no
// permission bits for group or others; otherwise an error saying how to
// fix it (chmod 600 PATH).
func CheckPrivate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if p := privdir.FileProblem(path, st); p != "" {
		return fmt.Errorf("%s: %s (it holds secrets for your fleetmgr)", path, p)
	}
	return nil
}

// Ensure makes sure a private file exists at path: an existing one must
// pass CheckPrivate; a missing one is created empty with mode 0600 (its
// directory 0700 when missing). created reports whether it was created.
func Ensure(path string) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		return false, CheckPrivate(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	if _, err := f.WriteString("# Secrets for fleetmgr serve, one NAME=value per line (see `fleetmgr service --help`), e.g.\n# FLEETMGR_BROKER_USER=admin\n# FLEETMGR_BROKER_PASSWORD=...\n"); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}

// Read checks that path is private (CheckPrivate) and parses it.
func Read(path string) ([]Var, error) {
	if err := CheckPrivate(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxBytes)
	}
	return Parse(path, data)
}

// Load reads path (Read) and sets each variable in this process's
// environment, over any value it had. It is what `fleetmgr serve
// --env-file PATH` does first. It returns the names it set.
func Load(path string) ([]string, error) {
	vars, err := Read(path)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(vars))
	for _, v := range vars {
		if err := os.Setenv(v.Name, v.Value); err != nil {
			return names, fmt.Errorf("%s:%d: %s: %w", path, v.Line, v.Name, err)
		}
		names = append(names, v.Name)
	}
	return names, nil
}

// Parse reads data (the file's bytes; name is used in errors) in the
// format described in the package documentation. A name assigned twice
// keeps its last value, as in systemd.
func Parse(name string, data []byte) ([]Var, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s: not valid UTF-8", name)
	}
	var out []Var
	idx := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		ln := i + 1
		line = strings.TrimRight(line, "\r")
		t := strings.TrimLeft(line, " \t")
		if t == "" || t[0] == '#' || t[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: no '=' (expected NAME=value, or a comment starting with #)", name, ln)
		}
		k = strings.TrimRight(k, " \t")
		if !validName(k) {
			return nil, fmt.Errorf("%s:%d: %q is not a variable name (letters, digits and _, not starting with a digit)", name, ln, k)
		}
		val, err := value(strings.Trim(v, " \t"))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %v", name, ln, k, err)
		}
		if strings.ContainsRune(val, 0) || strings.ContainsRune(val, '\uFEFF') {
			return nil, fmt.Errorf("%s:%d: %s: a NUL or byte order mark in the value", name, ln, k)
		}
		if j, seen := idx[k]; seen {
			out[j] = Var{Name: k, Value: val, Line: ln}
			continue
		}
		idx[k] = len(out)
		out = append(out, Var{Name: k, Value: val, Line: ln})
	}
	return out, nil
}

// value reads one value (already trimmed of surrounding blanks).
func value(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	switch q := v[0]; q {
	case '\'', '"':
		if len(v) < 2 || v[len(v)-1] != q || strings.IndexByte(v[1:len(v)-1], q) >= 0 {
			return "", fmt.Errorf("a %c-quoted value must close at the end of its line, with no %c inside", q, q)
		}
		inner := v[1 : len(v)-1]
		if q == '"' && strings.ContainsAny(inner, "\\$`") {
			return "", errors.New(`'\', '$' and '` + "`" + `' are not allowed in a "-quoted value (systemd would read escapes there); use '-quotes`)
		}
		return inner, nil
	}
	if strings.ContainsAny(v, "\\$") {
		return "", errors.New(`a '\' or '$' in an unquoted value may be read as an escape or a variable; put the value in '-quotes`)
	}
	return v, nil
}

// validName reports whether s is a portable variable name.
func validName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
