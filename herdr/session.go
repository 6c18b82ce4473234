package herdr

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultSession is the literal session name herdr treats as the default session.
const DefaultSession = "default"

// ConfigDir returns herdr's config dir (herdr src/config/io.rs config_dir):
// $XDG_CONFIG_HOME/herdr when XDG_CONFIG_HOME is non-empty, else $HOME/.config/herdr when HOME is
// non-empty, else <tmpdir>/herdr with tmpdir = $TMPDIR or "/tmp". getenv is usually os.Getenv.
//
// Deviation: herdr tests only whether XDG_CONFIG_HOME is set, so a set-but-empty value gives the
// relative path "herdr"; a getenv function cannot tell empty from unset, so empty counts as unset.
func ConfigDir(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "herdr")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "herdr")
	}
	tmp := getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "herdr")
}

// SessionDir returns a session's data dir: the config dir itself for "default", else
// <configDir>/sessions/<name> (herdr src/session.rs data_dir_for). name is not validated.
func SessionDir(configDir, name string) string {
	if name == DefaultSession {
		return configDir
	}
	return filepath.Join(configDir, "sessions", name)
}

// SocketPath returns a session's API socket, <SessionDir>/herdr.sock.
func SocketPath(configDir, name string) string {
	return filepath.Join(SessionDir(configDir, name), "herdr.sock")
}

// ClientSocketPath returns a session's TUI-client socket,
// <SessionDir>/herdr-client.sock (herdr src/session.rs
// client_socket_path_for). A server binds it next to the API socket, so it
// is the longer of the two paths a server must be able to bind.
func ClientSocketPath(configDir, name string) string {
	return filepath.Join(SessionDir(configDir, name), "herdr-client.sock")
}

// ValidateSessionName accepts 1–64 bytes of [A-Za-z0-9._-] other than "." and ".."
// (herdr src/session.rs validate_name). "default" is valid and names the default session.
func ValidateSessionName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("invalid session name %q: must be 1-64 characters", name)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("invalid session name %q", name)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		ok := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
		if !ok {
			return fmt.Errorf("invalid session name %q: only A-Z a-z 0-9 . _ - allowed", name)
		}
	}
	return nil
}

// SessionInfo is one entry of `herdr session list --json` (herdr src/cli.rs session_list).
type SessionInfo struct {
	// Name is the session name; "default" for the default session.
	Name string `json:"name"`
	// Default is true only for the default session.
	Default bool `json:"default"`
	// Running means the socket file exists and accepts a connection.
	Running bool `json:"running"`
	// SocketPath is the session's API socket.
	SocketPath string `json:"socket_path"`
	// SessionDir is the session's data dir.
	SessionDir string `json:"session_dir"`
}

// SessionInfoFor describes one session of configDir, probing its socket.
func SessionInfoFor(configDir, name string) SessionInfo {
	sock := SocketPath(configDir, name)
	return SessionInfo{
		Name:       name,
		Default:    name == DefaultSession,
		Running:    SocketReachable(sock),
		SocketPath: sock,
		SessionDir: SessionDir(configDir, name),
	}
}

// ListSessions lists sessions as `herdr session list --json` does (herdr src/cli.rs session_list): "default"
// always first, then every subdirectory of <configDir>/sessions with a valid name, sorted by
// name. Stopped sessions stay listed while their directory exists. A missing sessions dir is not
// an error; another failure to read it is.
func ListSessions(configDir string) ([]SessionInfo, error) {
	out := []SessionInfo{SessionInfoFor(configDir, DefaultSession)}
	entries, err := os.ReadDir(filepath.Join(configDir, "sessions"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return out, nil
		}
		return nil, fmt.Errorf("list herdr sessions: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == DefaultSession || ValidateSessionName(e.Name()) != nil {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, SessionInfoFor(configDir, n))
	}
	return out, nil
}

// SocketReachable reports whether a Unix socket at path accepts a connection within 1 s. The
// connection is closed at once without a request (herdr then drops it after its 5 s read wait).
func SocketReachable(path string) bool {
	if _, err := os.Lstat(path); err != nil {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// ScrubEnv returns env ("KEY=value" entries) without any HERDR_* variable, so that a process
// started from inside a herdr pane does not address the enclosing server (herdr src/session.rs; a
// superset of herdr's scrub_herdr_runtime_env list). The input is not modified.
func ScrubEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "HERDR_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
