package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
)

// daemonSocket returns the unix socket of a running `fleetmgr serve` for
// cfg: serve.json names a live pid and its socket accepts a connection.
// "" when no daemon runs (then the CLI acts itself and the next daemon
// adopts what it started).
func daemonSocket(cfg *registry.Config) string {
	b, err := os.ReadFile(daemonInfoPath(cfg))
	if err != nil {
		return ""
	}
	var info daemonInfo
	if json.Unmarshal(b, &info) != nil || info.PID <= 0 || info.Socket == "" {
		return ""
	}
	if _, err := procfs.ReadStat(info.PID); err != nil {
		return ""
	}
	c, err := net.DialTimeout("unix", info.Socket, time.Second)
	if err != nil {
		return ""
	}
	c.Close()
	return info.Socket
}

// daemonUnusable is a failure to reach the daemon at all (dial, or an MCP
// handshake its guard refused): every other fleet would meet it too.
type daemonUnusable struct{ err error }

func (e *daemonUnusable) Error() string { return e.err.Error() }
func (e *daemonUnusable) Unwrap() error { return e.err }

// daemonAct runs one lifecycle verb (fleetmgr_start/stop/restart) through
// the daemon on sock, so that its supervisor owns the processes and its
// guard judges this caller. Progress notifications become opt.Progress
// steps as they arrive. Not reaching the daemon is a *daemonUnusable.
func daemonAct(ctx context.Context, sock, verb, fleet string, lead bool, opt lifecycle.Options) (*lifecycle.State, error) {
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s: %w", sock, err)}
	}
	t0 := time.Now()
	var mu sync.Mutex // serialises progress output; done drops notifications that lose the race with the reply
	seen, done := 0, false
	c := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr-cli", Version: version}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			name, detail, _ := strings.Cut(req.Params.Message, ": ")
			mu.Lock()
			defer mu.Unlock()
			if done {
				return
			}
			seen++
			if opt.Progress != nil {
				opt.Progress(lifecycle.Step{Fleet: fleet, Name: name, Detail: detail, Elapsed: time.Since(t0)})
			}
		},
	})
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		conn.Close()
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code == refusalCode {
			// The daemon's guard refused this caller: exit 3, as a verb
			// refused in a pane and `fleetmgr mcp` do.
			err = &exitError{code: 3, err: err}
		}
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s refused or failed: %w", sock, err)}
	}
	defer cs.Close()
	args := map[string]any{"fleet": fleet}
	if lead {
		args["lead"] = true
	}
	params := &mcp.CallToolParams{Name: proxy.ManagerToolPrefix + verb, Arguments: args}
	params.SetProgressToken("cli-" + verb)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return nil, err
	}
	var ar proxy.ActionResult
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			_ = json.Unmarshal(b, &ar)
		}
	}
	mu.Lock()
	done = true
	if opt.Progress != nil { // steps whose notifications lost the race with the reply
		for i := seen; i < len(ar.Steps); i++ {
			opt.Progress(ar.Steps[i])
		}
	}
	mu.Unlock()
	st := &lifecycle.State{Name: fleet, Phase: ar.State, Port: ar.Port}
	if ar.PID != 0 {
		st.Fleetd = &lifecycle.Proc{PID: ar.PID}
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return st, errors.New(b.String())
	}
	return st, nil
}

// verbVia returns the function fleetAction runs per fleet for verb: through
// the running daemon when there is one, else local (the Manager itself).
func (a *app) verbVia(ctx context.Context, verb string, lead bool,
	local func(*lifecycle.Manager, string, lifecycle.Options) (*lifecycle.State, error)) func(*lifecycle.Manager, string, lifecycle.Options) (*lifecycle.State, error) {
	return func(m *lifecycle.Manager, n string, o lifecycle.Options) (*lifecycle.State, error) {
		if sock := daemonSocket(m.Config()); sock != "" {
			st, err := daemonAct(ctx, sock, verb, n, lead, o)
			if err != nil && strings.Contains(err.Error(), fmt.Sprintf("unknown fleet %q", n)) {
				err = unknownToDaemon(m.Config(), n, verb, err)
			}
			return st, err
		}
		o.Lead = lead
		return local(m, n, o)
	}
}

func (a *app) restartCmd() *cobra.Command {
	var all, lead bool
	cmd := &cobra.Command{
		Use:   "restart [NAME…]",
		Short: "Restart fleets' fleetd, keeping their herdr session; clears a crash loop",
		Long: `Restart each named fleet (or --all): SIGTERM to fleetd's session, stop_grace, SIGKILL,
then start it again and wait until /healthz names the fleet. The herdr session is kept when
it answers (so the lead tab survives; members' panes are reaped by the new fleetd, as fleetd
does on every start), and started again when it does not. A fleet marked failed after a
crash loop is supervised again. When a fleetmgr serve runs, the restart goes through it.`,
		Example: "  fleetmgr restart kb\n  fleetmgr restart --all --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.fleetAction(cmd, args, all, "restart", a.verbVia(cmd.Context(), "restart", lead,
				func(m *lifecycle.Manager, n string, o lifecycle.Options) (*lifecycle.State, error) {
					return m.Restart(cmd.Context(), n, o)
				}))
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "restart every configured fleet")
	cmd.Flags().BoolVar(&lead, "lead", false, "also launch the fleet's lead if its tab is missing")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print a machine-readable outcome")
	return cmd
}

func (a *app) logsCmd() *cobra.Command {
	var follow, herdrLog bool
	var lines int
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Show a fleet's fleetd log (or its herdr server's with --herdr)",
		Long: `Print the last lines of a fleet's fleetd log, <state_dir>/fleets/NAME/fleetd.log (or of
its herdr server's, herdr.log, with --herdr). Logs are rotated by size ([manager] log_max_mb,
log_max_backups); rotated files sit next to the current one. -f keeps printing what is
appended, across rotations, until interrupted.`,
		Example: "  fleetmgr logs kb\n  fleetmgr logs kb -f -n 20\n  fleetmgr logs kb --herdr",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lines < 0 {
				return &exitError{code: 2, err: fmt.Errorf("-n/--lines must be 0 (all) or more, not %d", lines)}
			}
			cfg, err := a.load()
			if err != nil {
				return err
			}
			m := a.manager(cfg, a.logger(slog.LevelWarn))
			if _, err := m.Fleet(args[0]); err != nil { // configured, or removed from the file while it runs
				return &exitError{code: 2, err: err}
			}
			proc := "fleetd"
			if herdrLog {
				proc = "herdr"
			}
			tail, err := m.LogTail(args[0], proc, lines)
			if err != nil {
				return err
			}
			for _, l := range tail {
				fmt.Fprintln(a.stdout, l)
			}
			if !follow {
				return nil
			}
			return m.FollowLog(cmd.Context(), args[0], proc, a.stdout)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing appended lines")
	cmd.Flags().IntVarP(&lines, "lines", "n", 50, "how many lines to print first (0: all)")
	cmd.Flags().BoolVar(&herdrLog, "herdr", false, "the herdr server's log instead of fleetd's")
	return cmd
}

// unknownToDaemon explains a daemon's "unknown fleet" answer for fleet n,
// which this command's file defines. The daemon re-reads its file before
// it answers so (fleetmgr_start and the other manager tools do), so it
// reads another file, or predates reload: the error says what to run.
func unknownToDaemon(cfg *registry.Config, n, verb string, err error) error {
	info, _ := daemonOf(cfg)
	switch {
	case info.Config != "" && info.Config != cfg.Path:
		return fmt.Errorf("%w\nfleetmgr serve (pid %d) reads %s, not %s (which this command read and which defines %s): run `fleetmgr --config %s %s %s` to use the daemon's file, or restart the daemon on this one (kill %d; fleetmgr --config %s serve --detach)",
			err, info.PID, info.Config, cfg.Path, n, info.Config, verb, n, info.PID, cfg.Path)
	case info.Config == "":
		return fmt.Errorf("%w\nfleetmgr serve (pid %d) is older than config reload and still reads the file as it was when it started: restart it (kill %d; fleetmgr serve --detach), then `fleetmgr %s %s`",
			err, info.PID, info.PID, verb, n)
	}
	return fmt.Errorf("%w\n%s defines %s, but fleetmgr serve (pid %d) did not take it: `fleetmgr reload` says why", err, cfg.Path, n, info.PID)
}
