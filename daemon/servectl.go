package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// ServeState is `fleetmgr serve status` (and what `serve stop` stopped):
// the serve of a state dir as its serve.json and /proc say.
type ServeState struct {
	Running bool `json:"running"`
	PID     int  `json:"pid,omitempty"`
	// UptimeS is seconds since the serve process started.
	UptimeS   float64 `json:"uptime_s,omitempty"`
	Listen    string  `json:"listen,omitempty"`
	Socket    string  `json:"socket,omitempty"`
	MCPURL    string  `json:"mcp_url,omitempty"`
	Dashboard string  `json:"dashboard_url,omitempty"`
	Config    string  `json:"config,omitempty"`
	Version   string  `json:"version,omitempty"`
	Log       string  `json:"log"`
	StateDir  string  `json:"state_dir"`
	// Fleets are this state dir's fleets running (while serve stops, they
	// keep running).
	Fleets []string `json:"running_fleets"`
}

// Lines is s in words, one fact a line.
func (s ServeState) Lines() []string {
	if !s.Running {
		return []string{fmt.Sprintf("no fleetmgr serve runs for state dir %s (start one: fleetmgr serve --detach)", s.StateDir)}
	}
	l := []string{
		fmt.Sprintf("fleetmgr serve running: pid %d, up %s, version %s", s.PID, (time.Duration(s.UptimeS) * time.Second).String(), s.Version),
		"listen:    " + s.Listen + " (MCP " + s.MCPURL + ")",
		"socket:    " + s.Socket,
		"dashboard: " + s.Dashboard,
		"config:    " + s.Config,
		"log:       " + s.Log,
	}
	return append(l, fmt.Sprintf("fleets running: %d%s", len(s.Fleets), listed(s.Fleets)))
}

func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// ServeStatus is the serve of cfg's state dir: running when serve.json
// names a live pid whose socket accepts a connection.
func ServeStatus(cfg *registry.Config, m *lifecycle.Manager) ServeState {
	s := ServeState{StateDir: cfg.Manager.StateDir, Log: LogPath(cfg), Fleets: runningFleets(m)}
	info, sock := serveapi.Running(cfg)
	if sock == "" {
		return s
	}
	s.Running, s.PID, s.Listen, s.Socket, s.Config, s.Version = true, info.PID, info.Listen, info.Socket, info.Config, info.Version
	if info.Log != "" {
		s.Log = info.Log
	}
	s.MCPURL, s.Dashboard = "http://"+info.Listen+"/mcp", "http://"+info.Listen+"/"
	if st, err := procfs.ReadStat(info.PID); err == nil {
		if now, err := procfs.SinceBoot(); err == nil {
			s.UptimeS = max(0, (now - st.StartedSinceBoot()).Truncate(time.Second).Seconds())
		}
	}
	return s
}

// runningFleets are the names of m's fleets whose state is running.
func runningFleets(m *lifecycle.Manager) []string {
	out := []string{}
	for _, n := range m.Names() {
		if st, err := m.State(n); err == nil && st.Shown.Phase == lifecycle.PhaseRunning {
			out = append(out, n)
		}
	}
	return out
}

// StopServe is `fleetmgr serve stop`: SIGTERM to the serve of cfg's state
// dir, which stops serving and leaves every fleet running (as a service
// manager's stop does), then a wait until its process is gone, bounded by
// start_timeout + stop_grace + 10 s (serve answers the lifecycle calls
// under way first). waiting, when set, is told the bound once. It returns
// the serve as it was (Running false: none ran, nothing done) and the
// fleets still running after it.
func StopServe(ctx context.Context, cfg *registry.Config, m *lifecycle.Manager, waiting func(bound time.Duration)) (ServeState, error) {
	s := ServeStatus(cfg, m)
	if !s.Running {
		return s, nil
	}
	// Only a fleetmgr serve is signalled: serve.json could name a pid
	// reused by another program since.
	argv, err := procfs.Cmdline(s.PID)
	if err != nil || len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "fleetmgr") || !containsArg(argv, "serve") {
		return s, fmt.Errorf("serve.json names pid %d, which is not a fleetmgr serve (%q): nothing signalled", s.PID, argv)
	}
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil {
		return s, fmt.Errorf("signal fleetmgr serve (pid %d): %w", s.PID, err)
	}
	bound := cfg.Manager.StartTimeout.Duration + cfg.Manager.StopGrace.Duration + 10*time.Second
	if waiting != nil {
		waiting(bound)
	}
	deadline := time.Now().Add(bound)
	for {
		st, err := procfs.ReadStat(s.PID)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("fleetmgr serve (pid %d) did not stop within %s of SIGTERM; see %s", s.PID, bound, s.Log)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.Fleets = runningFleets(m)
	return s, nil
}

func containsArg(argv []string, a string) bool {
	for _, x := range argv[1:] {
		if x == a {
			return true
		}
	}
	return false
}
