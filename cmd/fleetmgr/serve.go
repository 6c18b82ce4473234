package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/serveclient"
)

// ServeOptions are `fleetmgr serve`'s.
type ServeOptions struct {
	f        *cmdutil.Factory
	Detach   bool
	EnvFile  string
	Exposure daemon.Exposure
	TakeOver bool // --take-over-host
	Stage    int  // internal: detach stage (1, 2; 0 not detached)
	ReadyFD  int  // internal: the detach stages' readiness pipe
}

// NewCmdServe is `fleetmgr serve` (daemon.Serve, daemon.Detach).
func NewCmdServe(f *cmdutil.Factory, runF func(*ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{f: f}
	cmd := &cobra.Command{
		Use:     "serve",
		Args:    cobra.NoArgs,
		Short:   "Run the MCP front door (HTTP on [manager] listen + unix socket), outside every herdr pane",
		Long:    help("serve"),
		Example: "  fleetmgr serve\n  fleetmgr serve --detach\n  kill -HUP <pid>   # re-read fleets.toml",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runServe) },
	}
	cmd.Flags().BoolVar(&opts.Detach, "detach", false, "run as a detached daemon (setsid, double fork, null stdio, log to <state_dir>/fleetmgr.log) and return once it serves")
	cmd.Flags().StringVar(&opts.EnvFile, "env-file", "", "a private file of NAME=value lines to set in serve's environment first (e.g. ~/.config/fleetmgr/broker.env)")
	cmd.Flags().IntVar(&opts.Stage, "daemon-stage", 0, "internal: detach stage")
	cmd.Flags().IntVar(&opts.ReadyFD, "daemon-ready-fd", 0, "internal: detach stages' readiness pipe")
	_ = cmd.Flags().MarkHidden("daemon-stage")
	_ = cmd.Flags().MarkHidden("daemon-ready-fd")
	cmd.Flags().BoolVar(&opts.Exposure.Allow, "allow-remote", false, "allow [manager] listen on a non-loopback address; needs --token-file, and remote peers must send Authorization: Bearer <token>")
	cmd.Flags().BoolVar(&opts.TakeOver, "take-over-host", false, "let federation provisioning take over this host id although the broker has it registered with another key (this manager replaces that host; the other is locked out)")
	cmd.Flags().StringVar(&opts.Exposure.TokenFile, "token-file", "", "file holding the bearer token for remote peers (mode 0600, owned by you)")
	cmd.AddCommand(NewCmdServeStop(f, nil), NewCmdServeStatus(f, nil))
	return cmd
}

// ServeCtlOptions are `fleetmgr serve stop`'s and `serve status`'.
type ServeCtlOptions struct {
	f      *cmdutil.Factory
	Action string // "stop", "status"
	JSON   bool
}

// NewCmdServeStop is `fleetmgr serve stop` (daemon.StopServe).
func NewCmdServeStop(f *cmdutil.Factory, runF func(*ServeCtlOptions) error) *cobra.Command {
	opts := &ServeCtlOptions{f: f, Action: "stop"}
	cmd := &cobra.Command{
		Use:     "stop",
		Args:    cobra.NoArgs,
		Short:   "Stop the running fleetmgr serve gracefully; fleets keep running",
		Long:    help("serve-stop"),
		Example: "  fleetmgr serve stop\n  systemctl --user stop fleetmgr   # the same, for a serve the service manager runs",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runServeCtl) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the serve that was stopped as JSON")
	return cmd
}

// NewCmdServeStatus is `fleetmgr serve status` (daemon.ServeStatus).
func NewCmdServeStatus(f *cmdutil.Factory, runF func(*ServeCtlOptions) error) *cobra.Command {
	opts := &ServeCtlOptions{f: f, Action: "status"}
	cmd := &cobra.Command{
		Use:     "status",
		Args:    cobra.NoArgs,
		Short:   "Whether fleetmgr serve runs: pid, uptime, listen, socket, dashboard URL (exit 3 when it does not)",
		Long:    help("serve-status"),
		Example: "  fleetmgr serve status\n  fleetmgr serve status --json",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runServeCtl) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runServeCtl(ctx context.Context, opts *ServeCtlOptions, ios *iostreams.IOStreams) error {
	cfg, err := opts.f.ConfigInForce()
	if err != nil {
		return err
	}
	m := opts.f.Manager(cfg)
	if opts.Action == "status" {
		s := daemon.ServeStatus(cfg, m)
		if err := cmdutil.PrintResult(ios, opts.JSON, s, s.Lines(), nil); err != nil || s.Running {
			return err
		}
		return &cmdutil.ExitError{Code: 3, Err: errors.New("fleetmgr serve is not running")} // as LSB's status: 3
	}
	var w *cmdutil.Waiter
	s, err := daemon.StopServe(ctx, cfg, m, func(bound time.Duration) { w = cmdutil.Wait(ios, "fleetmgr serve to stop", bound) })
	if w != nil {
		w.Done()
	}
	if err != nil {
		return err
	}
	lines := s.Lines()
	if s.Running {
		lines = []string{serveStoppedLine(s.PID, s.Fleets)}
	}
	return cmdutil.PrintResult(ios, opts.JSON, s, lines, nil)
}

func runServe(ctx context.Context, opts *ServeOptions, ios *iostreams.IOStreams) error {
	d, err := daemon.Main(ctx, daemon.MainOptions{Detach: opts.Detach, Stage: opts.Stage, ReadyFD: opts.ReadyFD,
		EnvFile: opts.EnvFile, Exposure: opts.Exposure, TakeOverHost: opts.TakeOver, Config: opts.f.Config, Log: opts.f.Logger(slog.LevelInfo), Version: opts.f.AppVersion()})
	if d != nil {
		fmt.Fprintf(ios.Out, "fleetmgr serve running (pid %d): http://%s/mcp and %s; dashboard: http://%s/; log: %s\n", d.PID, d.Info.Listen, d.Socket, d.Info.Listen, d.Log)
	}
	return err
}

// MCPOptions are `fleetmgr mcp`'s.
type MCPOptions struct {
	f       *cmdutil.Factory
	NoStart bool
}

// NewCmdMCP is `fleetmgr mcp` (daemon.Bridge).
func NewCmdMCP(f *cmdutil.Factory, runF func(*MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{f: f}
	cmd := &cobra.Command{
		Use:   "mcp",
		Args:  cobra.NoArgs,
		Short: "Bridge stdio to the running fleetmgr serve (for clients that mount a command)",
		Long:  help("mcp"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runMCP) },
	}
	cmd.Flags().BoolVar(&opts.NoStart, "no-start", false, "fail instead of starting a daemon when none runs")
	return cmd
}

func runMCP(ctx context.Context, opts *MCPOptions, ios *iostreams.IOStreams) error {
	cfg, err := opts.f.ConfigInForce() // a broken file must not cut the client off a running serve
	if err == nil && opts.f.InForce != nil && opts.f.InForce.ServePID == 0 {
		opts.NoStart = true // never start a serve on a copy of a file that does not load
	}
	if err != nil {
		return err
	}
	conn, err := daemon.Dial(ctx, cfg, !opts.NoStart, func(s string) { fmt.Fprintln(ios.ErrOut, s) })
	if err != nil {
		return err
	}
	return daemon.Bridge(ctx, conn, ios.In, ios.Out)
}

// ReloadOptions are `fleetmgr reload`'s.
type ReloadOptions struct {
	f    *cmdutil.Factory
	JSON bool
}

// NewCmdReload is `fleetmgr reload` (serveclient.Client.Reload).
func NewCmdReload(f *cmdutil.Factory, runF func(*ReloadOptions) error) *cobra.Command {
	opts := &ReloadOptions{f: f}
	cmd := &cobra.Command{
		Use:     "reload",
		Args:    cobra.NoArgs,
		Short:   "Make the running fleetmgr serve re-read fleets.toml (as SIGHUP does)",
		Long:    help("reload"),
		Example: "  fleetmgr reload\n  fleetmgr reload --json\n  kill -HUP $(jq .pid ~/.local/state/fleetmgr/serve.json)",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runReload) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what changed as JSON")
	return cmd
}

func runReload(ctx context.Context, opts *ReloadOptions, ios *iostreams.IOStreams) error {
	_, c, err := opts.f.Client()
	if err != nil { // as any command given a file that does not load: 2
		return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("%v\nnothing was reloaded: a running fleetmgr serve keeps the config in force", err)}
	}
	w := cmdutil.Wait(ios, serveclient.ReloadAwaited, serveclient.ReloadTimeout)
	rep, text, err := c.Reload(ctx) // its errors say what to do: no serve (1), a file it refused (2)
	w.Done()
	if err != nil {
		return err
	}
	return cmdutil.PrintResult(ios, opts.JSON, rep, []string{text}, nil)
}

// LogpipeOptions are the internal `fleetmgr logpipe`'s: its flags and
// the command after -- are lifecycle.LogPipeArgs' fields.
type LogpipeOptions lifecycle.LogPipeArgs

// NewCmdLogpipe is the internal `fleetmgr logpipe` (lifecycle.LogPipe):
// with a command after --, it starts a copier and execs the command with
// its stdout/stderr going through the copier; without one it is the
// copier, writing stdin to --file with size rotation.
func NewCmdLogpipe(f *cmdutil.Factory, runF func(*LogpipeOptions) error) *cobra.Command {
	opts := &LogpipeOptions{}
	cmd := &cobra.Command{
		Use:    "logpipe --file PATH [--max-mb N] [--backups N] [-- COMMAND ARGS…]",
		Short:  "internal: run COMMAND with its output written to PATH, rotated by size",
		Hidden: true,
		Args:   cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Command = args
			return cmdutil.Run(cmd, f, opts, runF, func(_ context.Context, o *LogpipeOptions, ios *iostreams.IOStreams) error {
				return lifecycle.LogPipe(ios.In, lifecycle.LogPipeArgs(*o))
			})
		},
	}
	cmd.Flags().StringVar(&opts.File, "file", "", "log file")
	cmd.Flags().IntVar(&opts.MaxMB, "max-mb", 10, "rotate at this size in megabytes")
	cmd.Flags().IntVar(&opts.Backups, "backups", 5, "rotated files to keep (0: all)")
	cmd.Flags().IntVar(&opts.ReadyFD, "ready-fd", 0, "internal: write a byte to this fd once signals are ignored")
	return cmd
}

// serveStoppedLine is what `fleetmgr serve stop` says once serve (pid)
// stopped: the fleets left running, which nothing supervises until the
// next serve, or that none runs.
func serveStoppedLine(pid int, fleets []string) string {
	switch len(fleets) {
	case 0:
		return fmt.Sprintf("fleetmgr serve (pid %d) stopped; no fleet runs, so none is left unsupervised", pid)
	case 1:
		return fmt.Sprintf("fleetmgr serve (pid %d) stopped; 1 fleet keeps running, unsupervised until the next serve: %s", pid, fleets[0])
	}
	return fmt.Sprintf("fleetmgr serve (pid %d) stopped; %d fleets keep running, unsupervised until the next serve: %s", pid, len(fleets), strings.Join(fleets, ", "))
}
