package serveapi

import (
	"encoding/json"
	"net"
	"path/filepath"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Info is <state_dir>/serve.json, written by a serve once it serves and
// removed when it stops: how the CLI finds the daemon of its state dir.
type Info struct {
	PID     int    `json:"pid"`
	Listen  string `json:"listen"`
	Socket  string `json:"socket"`
	Log     string `json:"log,omitempty"`
	Version string `json:"version"`
	// Config is the fleets.toml the daemon reads (and re-reads on reload).
	Config string `json:"config,omitempty"`
}

// InfoPath is serve.json's path in cfg's state dir.
func InfoPath(cfg *registry.Config) string {
	return filepath.Join(cfg.Manager.StateDir, "serve.json")
}

// ReadInfo reads serve.json of cfg's state dir; the zero Info when there
// is none or it does not parse (no daemon, or one that is starting).
func ReadInfo(cfg *registry.Config) Info {
	return readInfoIn(cfg.Manager.StateDir)
}

func readInfoIn(stateDir string) Info {
	var info Info
	if b, err := atomicfile.Read(filepath.Join(stateDir, "serve.json"), atomicfile.MaxSmall); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	return info
}

// Running returns serve.json of cfg's state dir and the daemon's unix
// socket when that daemon runs: serve.json names a live pid and its
// socket accepts a connection. The socket is "" when no daemon runs (then
// the CLI acts itself and the next daemon adopts what it started).
func Running(cfg *registry.Config) (Info, string) {
	return RunningIn(cfg.Manager.StateDir)
}

// RunningIn is Running for the state dir stateDir, which a fleets.toml
// that does not load may still name (registry.StateDirOf).
func RunningIn(stateDir string) (Info, string) {
	info := readInfoIn(stateDir)
	if info.PID <= 0 || info.Socket == "" {
		return info, ""
	}
	if !alive(info.PID) {
		return info, ""
	}
	c, err := net.DialTimeout("unix", info.Socket, time.Second)
	if err != nil {
		return info, ""
	}
	c.Close()
	return info, info.Socket
}

// MCPURL is the MCP endpoint a client on this host reaches cfg's serve
// at: http://<[manager] listen>/mcp, an unspecified address (0.0.0.0, ::)
// replaced by 127.0.0.1.
func MCPURL(cfg *registry.Config) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Manager.Listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/mcp", nil
}

// ServePID is the pid serve.json of stateDir names when that process
// lives (0: none), without connecting to its socket: a probe connection
// that closes at once is one the guard has to judge and log.
func ServePID(stateDir string) int {
	info := readInfoIn(stateDir)
	if info.PID <= 0 {
		return 0
	}
	if !alive(info.PID) {
		return 0
	}
	return info.PID
}

// alive reports whether pid runs: /proc has it and it is not a zombie (a
// killed serve its parent has not reaped yet).
func alive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// JournalPath is the journal's file in the state dir.
func JournalPath(cfg *registry.Config) string {
	return filepath.Join(cfg.Manager.StateDir, "journal.db")
}
