package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

func (a *app) statusCmd() *cobra.Command {
	var watch, local bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status [NAME…]",
		Short: "Which fleet is working, which member is stalled (verdicts from evidence)",
		Long: `Report each fleet (state, pid, uptime, restarts, last exit, /healthz latency, herdr
session, broker, member count; the supervisor's last restart reason, a pending restart
and a crash loop when there is one; tools whose input schema differs from another fleet's
tool of the same name) and each member's verdict, judged from evidence rather than from
the member's claim:

  BLOCKED   herdr's agent_status for its pane is blocked (waiting for a human)
  WORKING   claims busy, and its worktree files and/or its pane output changed between
            two samples --interval apart (the evidence is shown: files, output)
  STALLED   claims busy, nothing changed; shows the age of the last change
  IDLE      does not claim to be busy
  UNKNOWN   pane or worktree gone, fleet unreachable, timeout (the reason is shown)
  REMOTE    the fleet's host is another machine; never probed

When a fleetmgr serve runs, the status is asked of it (tool fleetmgr_status over its unix
socket), so file evidence comes from its inotify watches; otherwise this process walks
each busy member's worktree (pruning .git, node_modules, target, vendor and [status]
ignore). --json prints the schema documented in docs/status-schema.json.`,
		Example: "  fleetmgr status\n  fleetmgr status kb --json\n  fleetmgr status --watch --interval 2s",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				return err
			}
			m := lifecycle.New(cfg, a.logger(slog.LevelWarn), os.Environ())
			for _, n := range args {
				if _, err := m.Fleet(n); err != nil { // configured, or removed while it runs
					return &exitError{code: 2, err: err}
				}
			}
			if interval < 0 {
				return &exitError{code: 2, err: errors.New("--interval must be positive")}
			}
			// A member must not read the fleets through fleetmgr either:
			// sampled from this process, every other fleet's fleetd would
			// answer it as primary (fleetd knows callers by pid).
			if err := a.refuseInPane(cmd.Context(), cfg, "read the status of"); err != nil {
				return err
			}
			tty := false
			if f, ok := a.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				tty = true
			}
			colour := tty && os.Getenv("NO_COLOR") == ""
			ctx := cmd.Context()
			for first := true; ; first = false {
				t0 := time.Now()
				rep, err := a.collectStatus(ctx, cfg, args, interval, local)
				if err != nil {
					if ctx.Err() != nil && !first {
						return nil
					}
					return err
				}
				switch {
				case a.jsonOut:
					if err := a.printJSON(rep); err != nil {
						return err
					}
				default:
					if watch && tty {
						fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // home + clear: refresh in place
					} else if !first {
						fmt.Fprintln(a.stdout)
					}
					if err := status.Render(a.stdout, rep, colour); err != nil {
						return err
					}
				}
				if !watch {
					return nil
				}
				// Refresh at most once per interval, even when nothing is
				// busy (then a status returns at once).
				period := time.Duration(rep.IntervalMS) * time.Millisecond
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Until(t0.Add(period))):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the report as JSON (schema: docs/status-schema.json)")
	cmd.Flags().BoolVar(&watch, "watch", false, "refresh continuously (in place on a terminal) until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 0, "time between a busy member's two samples (default [status] interval, 3s)")
	cmd.Flags().BoolVar(&local, "local", false, "do not ask a running fleetmgr serve; sample from this process (walking worktrees)")
	return cmd
}

// collectStatus asks the running daemon for a status, or, with no daemon
// (or local), collects one in this process.
func (a *app) collectStatus(ctx context.Context, cfg *registry.Config, names []string, interval time.Duration, local bool) (*status.Report, error) {
	if !local {
		rep, err := a.daemonStatus(ctx, cfg, names, interval)
		if err == nil {
			return rep, nil
		}
		var de *daemonRefused
		if !errors.As(err, &de) {
			return nil, err
		}
		if de.dialed {
			fmt.Fprintf(a.stderr, "fleetmgr status: the daemon on %s did not answer (%v); sampling from this process\n", cfg.Manager.MCPSocket, de.err)
		}
	}
	m := lifecycle.New(cfg, a.logger(slog.LevelWarn), os.Environ())
	c := status.New(status.Options{Manager: m, Via: "cli", Version: version})
	rep, err := c.Collect(ctx, status.Request{Fleets: names, Interval: interval})
	if err != nil {
		return nil, err
	}
	// Schema drift from each fleet's last catalogue, as fleetmgr check
	// reports it (an unreadable cache is check's to report).
	cat, _ := proxy.CachedCatalogue(m)
	proxy.NoteDrift(rep, cat)
	return rep, nil
}

// daemonRefused means: no daemon status could be had, sample locally.
type daemonRefused struct {
	dialed bool // a daemon socket answered but the MCP call failed
	err    error
}

func (e *daemonRefused) Error() string { return e.err.Error() }

// daemonStatus calls fleetmgr_status on the daemon's unix socket. Errors
// that mean "no usable daemon" are *daemonRefused; a tool error (such as an
// unknown fleet) is returned as is.
func (a *app) daemonStatus(ctx context.Context, cfg *registry.Config, names []string, interval time.Duration) (*status.Report, error) {
	conn, err := net.DialTimeout("unix", cfg.Manager.MCPSocket, time.Second)
	if err != nil {
		return nil, &daemonRefused{err: err}
	}
	wait := interval
	if wait <= 0 {
		wait = cfg.Status.Interval.Duration
	}
	cctx, cancel := context.WithTimeout(ctx, wait+cfg.Status.FleetTimeout.Duration+10*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr-status", Version: version}, nil)
	cs, err := client.Connect(cctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		conn.Close()
		return nil, &daemonRefused{dialed: true, err: err}
	}
	defer cs.Close()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: proxy.StatusTool,
		Arguments: proxy.StatusArgs{Fleets: names, IntervalMS: int(interval.Milliseconds())}})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &daemonRefused{dialed: true, err: err}
	}
	if res.IsError {
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return nil, fmt.Errorf("fleetmgr_status: %s", text)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return nil, err
	}
	var rep status.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("fleetmgr_status: unexpected result: %v", err)
	}
	return &rep, nil
}
