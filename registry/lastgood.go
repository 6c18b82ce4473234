package registry

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// LoadData is Load of data as if it were the file at path: relative paths
// resolve against path's directory and the Config's Path is path's
// absolute form. A last good copy of fleets.toml kept in the state dir is
// loaded so, as the file it was read from.
func LoadData(path string, data []byte) (*Config, error) {
	return loadData(path, data, env{getenv: os.Getenv, uid: os.Getuid()})
}

// StateDirOf is the state dir the fleets.toml at path names, read as
// leniently as possible for a file that does not load: [manager]
// state_dir when the TOML parses and it is a string, else a line
// `state_dir = "…"` under a [manager] header, else the default
// ($XDG_STATE_HOME/fleetmgr, ~/.local/state/fleetmgr). ~ and $VAR are
// expanded and a relative path is taken against the file's directory, as
// Load does. "" when nothing can be named.
func StateDirOf(path string) string {
	s := stateDirValue(path)
	getenv := os.Getenv
	if s == "" {
		if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
			return filepath.Join(filepath.Clean(x), "fleetmgr")
		}
		if h := getenv("HOME"); h != "" {
			return filepath.Join(h, ".local", "state", "fleetmgr")
		}
		return ""
	}
	if s == "~" || strings.HasPrefix(s, "~/") {
		s = getenv("HOME") + s[1:]
	}
	s = os.Expand(s, getenv)
	if !filepath.IsAbs(s) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return ""
		}
		s = filepath.Join(filepath.Dir(abs), s)
	}
	return filepath.Clean(s)
}

// stateDirValue is [manager] state_dir as written in the file at path, ""
// when it is not there or cannot be read.
func stateDirValue(path string) string {
	data, err := readBounded(path)
	if err != nil {
		return ""
	}
	var raw struct {
		Manager struct {
			StateDir any `toml:"state_dir"`
		} `toml:"manager"`
	}
	if _, err := toml.Decode(string(data), &raw); err == nil {
		s, _ := raw.Manager.StateDir.(string)
		return s
	}
	// The TOML does not parse: the line, under [manager].
	inManager := false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[") {
			inManager = strings.TrimSpace(strings.Trim(l, "[]")) == "manager"
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !inManager || !ok || strings.TrimSpace(k) != "state_dir" {
			continue
		}
		v = strings.TrimSpace(v)
		if i := strings.Index(v, " #"); i > 0 {
			v = strings.TrimSpace(v[:i])
		}
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			return v[1 : len(v)-1]
		}
	}
	return ""
}

// LoadBytes is Load that also returns the bytes that loaded (for a last
// good copy of the file, package lastgood).
func LoadBytes(path string) (*Config, []byte, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := LoadData(path, data)
	if err != nil {
		return nil, nil, err
	}
	return cfg, data, nil
}
