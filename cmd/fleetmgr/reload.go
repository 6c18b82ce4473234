package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
)

// reloader is serve's config reload: it re-reads the file serve was started
// with and swaps it into the Manager (lifecycle.Manager.Reload), which every
// part of the daemon reads its config from. It runs on SIGHUP, on the tool
// fleetmgr_reload (`fleetmgr reload`), and when a manager tool names a
// fleet the config in force does not define while the file changed. One
// reload at a time; a file that does not load changes nothing, and each of
// its problems is logged with file:line.
type reloader struct {
	path string // the absolute fleets.toml serve was started with
	m    *lifecycle.Manager
	log  *slog.Logger
	kick func() // after a swap: the proxy re-lists its catalogue at once

	mu      sync.Mutex
	last    [sha256.Size]byte // digest of the file's bytes as last read
	lastErr error             // why those bytes could not be applied (nil: they were)
}

func newReloader(cfg *registry.Config, m *lifecycle.Manager, log *slog.Logger) *reloader {
	r := &reloader{path: cfg.Path, m: m, log: log, kick: func() {}}
	if sum, ok := fileDigest(r.path); ok {
		r.last = sum // what serve loaded at start, near enough
	}
	return r
}

// fileDigest is the SHA-256 of the regular file at path (at most 1 MiB,
// the most registry.Load accepts); false when it cannot be read as such.
func fileDigest(path string) ([sha256.Size]byte, bool) {
	var sum [sha256.Size]byte
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return sum, false // never open a FIFO: it would block
	}
	f, err := os.Open(path)
	if err != nil {
		return sum, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(b), true
}

// reload re-reads the file and swaps it in. With ifChanged, when the
// file's bytes are those last read, it does nothing and returns (nil, the
// error that kept them from being applied, if any).
func (r *reloader) reload(ctx context.Context, ifChanged bool) (rep *lifecycle.ReloadReport, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, ok := fileDigest(r.path)
	if ifChanged && ok && sum == r.last {
		return nil, r.lastErr
	}
	if ok {
		r.last = sum
		defer func() { r.lastErr = err }()
	}
	cfg, err := registry.Load(r.path)
	if err == nil {
		err = cfg.AllocatePorts()
	}
	if err == nil {
		rep, err = r.m.Reload(cfg)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			r.log.Error("reload: fleets.toml not applied; the config in force stays", "problem", line)
		}
		return nil, err
	}
	r.log.Info("config reloaded", "config", rep.Config, "generation", rep.Generation, "fleets", rep.Fleets,
		"added", rep.Added, "removed", rep.Removed, "retired", rep.Retired, "changed", rep.Changed)
	for _, l := range rep.Lines()[1:] {
		r.log.Info("reload: " + l)
	}
	if len(rep.ServeRestart) > 0 {
		r.log.Warn("reload: these keys changed but only a new fleetmgr serve applies them; the daemon keeps their old values", "keys", rep.ServeRestart)
	}
	r.kick()
	return rep, nil
}

// onHangup reloads at every SIGHUP on hup until ctx ends. A SIGHUP never
// stops serve.
func (r *reloader) onHangup(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("SIGHUP: re-reading fleets.toml", "config", r.path)
			_, _ = r.reload(ctx, false)
		}
	}
}

// catchHangup makes SIGHUP a request to reload instead of the end of
// the process, from now on; signals arrive on the returned channel
// (buffered: one pending reload stands for any number of signals).
func catchHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// reloadExitInvalid is `fleetmgr reload`'s exit status when the file
// cannot be applied (the daemon keeps its config): as for any command
// given a config that does not load.
const reloadExitInvalid = 2

func (a *app) reloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reload",
		Args:  cobra.NoArgs,
		Short: "Make the running fleetmgr serve re-read fleets.toml (as SIGHUP does)",
		Long: `Ask the running fleetmgr serve (the daemon of this config's state dir) to re-read its
fleets.toml, through its tool fleetmgr_reload; kill -HUP <serve's pid> does the same.

  added fleets      can be started at once (fleetmgr start NAME, or fleetmgr_start); their
                    tools appear, and their names join every tool's fleet enum, once they run
  removed fleets    still running: listed as not in the config and stoppable (fleetmgr stop
                    NAME), never restarted; gone from every list once stopped
  changed settings  of a running fleet apply at its next start; list and status say
                    "restart pending" until then (fleetmgr restart NAME applies them)
  [manager] listen and mcp_socket, [guard] and [status] apply only when serve restarts;
  a changed state_dir is refused.

An invalid file changes nothing: the daemon keeps the config in force and logs each problem
with file:line. Exit status: 0 reloaded; 2 the file cannot be applied (the problems are
printed); 1 no daemon runs for this state dir, or it could not be asked.`,
		Example: "  fleetmgr reload\n  fleetmgr reload --json\n  kill -HUP $(jq .pid ~/.local/state/fleetmgr/serve.json)",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					err = ee.err
				}
				return &exitError{code: reloadExitInvalid, err: fmt.Errorf("%w\nnothing was reloaded: a running fleetmgr serve keeps the config in force", err)}
			}
			info, sock := daemonOf(cfg)
			if sock == "" {
				return &exitError{code: 1, err: fmt.Errorf("no fleetmgr serve runs for state dir %s, so there is nothing to reload (a serve reads %s when it starts: fleetmgr serve --detach)", cfg.Manager.StateDir, cfg.Path)}
			}
			res, err := daemonCall(cmd.Context(), sock, proxy.ReloadTool, map[string]any{})
			if err != nil {
				return err
			}
			text := resultText(res)
			if res.IsError {
				return &exitError{code: reloadExitInvalid, err: fmt.Errorf("fleetmgr serve (pid %d) kept its config; %s cannot be applied:\n%s", info.PID, cfg.Path, text)}
			}
			if a.jsonOut {
				var rep lifecycle.ReloadReport
				if b, err := json.Marshal(res.StructuredContent); err == nil {
					if err := json.Unmarshal(b, &rep); err != nil {
						return fmt.Errorf("fleetmgr_reload: unexpected result: %v", err)
					}
				}
				return a.printJSON(rep)
			}
			fmt.Fprintln(a.stdout, text)
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print what changed as JSON")
	return cmd
}

// daemonOf returns serve.json of cfg's state dir and the daemon's socket
// when that daemon runs and answers ("" otherwise).
func daemonOf(cfg *registry.Config) (daemonInfo, string) {
	var info daemonInfo
	if b, err := os.ReadFile(daemonInfoPath(cfg)); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	return info, daemonSocket(cfg)
}

// daemonCall calls one manager tool of the daemon on sock over a one-shot
// MCP session. Not reaching the daemon is a *daemonUnusable (exit 3 when
// its guard refused this caller).
func daemonCall(ctx context.Context, sock, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s: %w", sock, err)}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr-cli", Version: version}, nil)
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		conn.Close()
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code == refusalCode {
			err = &exitError{code: 3, err: err}
		}
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s refused or failed: %w", sock, err)}
	}
	defer cs.Close()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
}

// resultText joins a tool result's text content.
func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
