// Command fleetmgr drives several coding-agent fleets (fleetd + its herdr
// session + its broker vhost + its project) from one MCP mount. See
// README.md and docs/ARCHITECTURE.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// app carries what every subcommand shares; it is built per invocation.
type app struct {
	configPath string
	jsonOut    bool
	verbose    bool
	stdout     io.Writer
	stderr     io.Writer
}

// exitError carries a process exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot(&app{stdout: os.Stdout, stderr: os.Stderr}).ExecuteContext(ctx)
	interrupted := ctx.Err() != nil // before stop(), which cancels ctx too
	stop()
	if err != nil && interrupted && errors.Is(err, context.Canceled) {
		// Ctrl-C or SIGTERM: say what that means rather than "context canceled".
		fmt.Fprintln(os.Stderr, "fleetmgr: interrupted; a start that was under way was rolled back where it could be — `fleetmgr list` shows each fleet's state")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetmgr:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "fleetmgr",
		Short: "Drive several coding-agent fleets from one MCP mount",
		Long: `fleetmgr is the operator's front door to the fleets on this host. A fleet is one
fleetd daemon + its own herdr session + its own broker vhost + the project it works on.

fleetmgr serve       runs the MCP front door (streamable HTTP on [manager] listen, and a
                     unix socket for 'fleetmgr mcp'); every fleet tool appears once, with a
                     required 'fleet' argument. Callers inside any herdr pane are refused.
fleetmgr start NAME  starts a fleet: herdr session, then fleetd, waiting until it is healthy.
fleetmgr stop NAME   stops it and every process it had.
fleetmgr restart NAME  restarts its fleetd (herdr session kept); clears a crash loop.
fleetmgr logs NAME   its fleetd log (-f to follow, --herdr for the herdr server's).
fleetmgr reload      makes the running serve re-read fleets.toml (as SIGHUP does).

Fleets are declared in fleets.toml (see fleets.example.toml).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       build().Short(),
	}
	root.SetVersionTemplate(versionTemplate())
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVarP(&a.configPath, "config", "c", "", "fleets.toml to use (default ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml or ~/.config/fleetmgr/fleets.toml)")
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "log debug detail to stderr")
	root.AddCommand(a.serveCmd(), a.mcpCmd(), a.startCmd(), a.stopCmd(), a.listCmd(), a.statusCmd(), a.restartCmd(), a.logsCmd(), a.logpipeCmd(), a.checkCmd(), a.vhostCmd(), a.reloadCmd())
	root.AddCommand(a.initCmd())
	root.AddCommand(a.addCmd())
	root.AddCommand(a.removeCmd())
	root.AddCommand(a.serviceCmd())
	root.AddCommand(a.mountCmd())
	root.AddCommand(a.versionCmd())
	root.AddCommand(a.docsCmd())
	a.completeFleets(root)
	return root
}

// load reads the config and allocates ports.
func (a *app) load() (*registry.Config, error) {
	path := a.configPath
	if path == "" {
		path = registry.DefaultPath(os.Getenv)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && a.configPath == "" {
			err = fmt.Errorf("%w\nfleetmgr looks for ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml (~/.config/fleetmgr/fleets.toml); copy fleets.example.toml there, or name a file with --config", err)
		}
		return nil, &exitError{code: 2, err: err}
	}
	if err := cfg.AllocatePorts(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (a *app) logger(level slog.Level) *slog.Logger {
	if a.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
}

func (a *app) manager(cfg *registry.Config, log *slog.Logger) *lifecycle.Manager {
	m := lifecycle.New(cfg, log, os.Environ())
	if self, err := os.Executable(); err == nil {
		m.SetLogPipe(self) // fleet logs rotate through `fleetmgr logpipe`
	}
	return m
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
