package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// NewGuard builds the guard of cfg's [guard] table over m's fleets; uids
// are the peer uids it lets through the uid rule (the daemon passes
// [guard] allowed_uids). herdr servers are recognised by executable too,
// wherever their sockets live: herdr_bin as configured and as resolved.
// onDecision, if set, is told of every decision (serve's journal records
// the refusals).
func NewGuard(cfg *registry.Config, m *lifecycle.Manager, uids []int, log *slog.Logger, onDecision func(guard.Decision)) *guard.Guard {
	confDir := herdr.ConfigDir(os.Getenv)
	var ops []guard.Session
	for _, s := range cfg.Guard.OperatorSessions {
		ops = append(ops, guard.Session{Name: s, Socket: herdr.SocketPath(confDir, s)})
	}
	exes := []string{filepath.Base(cfg.Manager.HerdrBin)}
	if p, err := exec.LookPath(cfg.Manager.HerdrBin); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			exes = append(exes, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				exes = append(exes, real, filepath.Base(real))
			}
		}
	}
	return guard.New(guard.Options{
		AllowedUIDs:      uids,
		OperatorSessions: ops,
		Sessions:         herdrSessions(m),
		HerdrExes:        exes,
		Log:              log,
		OnDecision:       onDecision,
	})
}

// herdrSessions lists the sockets the guard must inspect: every fleet's
// herdr session (at the socket its state records, which a start under
// another environment may have put elsewhere, and where this environment
// would put it) and every running session herdr itself lists. The fleets
// are those of the config in force (a reload adds its new fleets at once)
// and those removed from it while they may still run.
func herdrSessions(m *lifecycle.Manager) func(context.Context) []guard.Session {
	confDir := herdr.ConfigDir(os.Getenv)
	return func(context.Context) []guard.Session {
		var out []guard.Session
		for _, n := range m.Names() {
			f, err := m.Fleet(n)
			if err != nil {
				continue
			}
			out = append(out, guard.Session{Name: f.HerdrSession, Socket: m.HerdrSocket(f)})
			if st, err := m.State(n); err == nil && st.HerdrSocket != "" && st.HerdrSocket != m.HerdrSocket(f) {
				out = append(out, guard.Session{Name: f.HerdrSession, Socket: st.HerdrSocket})
			}
		}
		if ss, err := herdr.ListSessions(confDir); err == nil {
			for _, s := range ss {
				if s.Running {
					out = append(out, guard.Session{Name: s.Name, Socket: s.SocketPath})
				}
			}
		}
		return out
	}
}

// SelfInPane applies the guard's rules to this process, except the uid
// rule: its own uid passes it, so the pane rules after it always run (a
// refusal on [guard] allowed_uids would end the check before them and let
// a process in a pane through). Not Allowed means this process lives in a
// herdr pane (or that cannot be ruled out); the decision says why. Nothing
// is logged: the caller's error carries the rule and reason.
func SelfInPane(ctx context.Context, cfg *registry.Config, m *lifecycle.Manager) guard.Decision {
	g := NewGuard(cfg, m, []int{os.Getuid()}, slog.New(slog.DiscardHandler), nil)
	return g.Check(ctx, os.Getpid(), os.Getuid())
}

// RefuseInPane stops a verb that changes fleets (start, stop, restart,
// add, remove, vhost delete) or reads them through fleetd (status) when
// this process itself lives in a herdr pane, by the same rules the
// daemon's guard applies to its callers: a *Refusal naming the rule, or
// nil. Without it a member could act on every fleet through the CLI when
// no daemon runs, and `fleetmgr start` of a fleet whose command it wrote
// would carry that command out of its pane (fleetmgr starts children
// detached and with HERDR_* removed). what completes "refusing to … fleets".
func RefuseInPane(ctx context.Context, cfg *registry.Config, m *lifecycle.Manager, what string) error {
	d := SelfInPane(ctx, cfg, m)
	if d.Allowed {
		return nil
	}
	return &serveapi.Refusal{Err: fmt.Errorf("refusing to %s fleets from inside a herdr pane (rule %s: %s).\n"+
		"Fleet members must not drive fleetmgr: fleetd trusts it as primary on every fleet. Run this from the operator's own terminal", what, d.Rule, d.Reason)}
}

// MountTarget is what `fleetmgr mount` gives an MCP client for cfg: with
// stdio the command `<this executable> --config <cfg.Path> mcp`, else the
// HTTP endpoint (MCPURL). It refuses with a *Refusal naming the rule when
// this process lives in a herdr pane: a fleet member must never mount the
// manager (fleetd issue #160), since fleetd trusts fleetmgr as primary on
// every fleet.
func MountTarget(ctx context.Context, cfg *registry.Config, m *lifecycle.Manager, stdio bool) (url string, command []string, err error) {
	if d := SelfInPane(ctx, cfg, m); !d.Allowed {
		return "", nil, &serveapi.Refusal{Err: fmt.Errorf("refusing to mount fleetmgr from inside a herdr pane (rule %s: %s).\n"+
			"A fleet member must never mount the manager (fleetd issue #160): fleetd trusts fleetmgr as primary on every fleet. Run this from the operator's own terminal", d.Rule, d.Reason)}
	}
	if !stdio {
		url, err = serveapi.MCPURL(cfg)
		return url, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	return "", []string{exe, "--config", cfg.Path, "mcp"}, nil
}

// NewManager is the lifecycle.Manager of cfg for serve and the CLI alike:
// this process's environment, and fleet logs rotated through this
// executable's `fleetmgr logpipe`.
func NewManager(cfg *registry.Config, log *slog.Logger) *lifecycle.Manager {
	m := lifecycle.New(cfg, log, os.Environ())
	if self, err := os.Executable(); err == nil {
		m.SetLogPipe(self)
	}
	return m
}
