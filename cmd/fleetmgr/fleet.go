package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// ActOptions are start's, stop's and restart's.
type ActOptions struct {
	f     *cmdutil.Factory
	Verb  serveapi.Verb
	Names []string
	All   bool
	Lead  bool // start, restart
	JSON  bool
	// Yes: go on with a stop or restart that ends live members without
	// asking (without it: asked on a terminal, refused with exit 2
	// elsewhere).
	Yes bool
}

// actHelp is each lifecycle verb's help: Short, Long, Example, --all.
var actHelp = map[serveapi.Verb][4]string{
	serveapi.Start: {"Start fleets: herdr session, then fleetd, waiting until /healthz names the fleet",
		help("start"),
		"  fleetmgr start kb\n  fleetmgr start --all --json", "start every configured fleet"},
	serveapi.Stop: {"Stop fleets: fleetd, then the herdr session and every pane process",
		help("stop"),
		"  fleetmgr stop kb\n  fleetmgr stop --all", "stop every configured fleet, and every fleet removed from fleets.toml while it ran"},
	serveapi.Restart: {"Restart fleets' fleetd, keeping their herdr session; clears a crash loop",
		help("restart"),
		"  fleetmgr restart kb\n  fleetmgr restart --all --json", "restart every configured fleet"},
}

// NewCmdAct is `fleetmgr start`, `stop` or `restart` (verb). Through a
// running serve when there is one (serveclient.Client.Act).
func NewCmdAct(f *cmdutil.Factory, verb serveapi.Verb, runF func(*ActOptions) error) *cobra.Command {
	opts := &ActOptions{f: f, Verb: verb}
	h := actHelp[verb]
	cmd := &cobra.Command{
		Use:   string(verb) + " [NAME…]",
		Short: h[0], Long: h[1], Example: h[2],
		ValidArgsFunction: f.CompleteFleets(false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names = args
			if len(args) == 0 && !opts.All {
				// A wrong argv, told as every other one is: with the
				// usage line (exit 2), and the names it could take.
				configured := "none"
				if names := f.FleetNames(); len(names) > 0 {
					configured = strings.Join(names, ", ")
				}
				return cmdutil.UsageError(cmd, fmt.Errorf("name a fleet to %s (or --all); configured: %s", verb, configured))
			}
			return cmdutil.Run(cmd, f, opts, runF, runAct)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, h[3])
	switch verb {
	case serveapi.Start:
		cmd.Flags().BoolVar(&opts.Lead, "lead", false, "also launch the fleet's lead (lead_command in a tab labelled lead_tab)")
	case serveapi.Restart:
		cmd.Flags().BoolVar(&opts.Lead, "lead", false, "also launch the fleet's lead if its tab is missing")
	}
	if verb != serveapi.Start {
		cmd.Flags().BoolVarP(&opts.Yes, "yes", "y", false, "do not ask before ending a fleet's live members (without a terminal, a "+string(verb)+" that would end members is refused unless --yes)")
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print a machine-readable outcome")
	return cmd
}

func runAct(ctx context.Context, opts *ActOptions, ios *iostreams.IOStreams) error {
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	if in := opts.f.InForce; in != nil && opts.Verb == serveapi.Start && in.ServePID == 0 {
		// A start in this process would launch the fleet from a copy of a
		// file the operator has since changed: only a running serve, which
		// has that configuration in force, starts fleets meanwhile.
		return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("%v\nno fleetmgr serve runs to start fleets on the configuration in force: fix the file first", in.Err)}
	}
	names, err := c.Fleets(opts.Verb, opts.Names, opts.All)
	if err != nil {
		return err
	}
	if len(names) == 0 { // nothing to do is not a failure (as `check` finds 0 fleets OK)
		fmt.Fprintf(ios.ErrOut, "fleetmgr: no fleets are configured in %s; nothing to %s\n", cfg.Path, opts.Verb)
		return cmdutil.PrintResult(ios, opts.JSON, []serveclient.Outcome{}, nil, nil)
	}
	if err := opts.f.RefuseInPane(ctx, cfg, string(opts.Verb)); err != nil {
		return err
	}
	req := serveclient.ActRequest{Verb: opts.Verb, Fleets: names, Lead: opts.Lead, Confirm: opts.Yes}
	if !opts.JSON {
		req.PrintTo(ios.Out)
	}
	// Every wait longer than 2 s says what it waits for (stderr).
	// The bound a progress line names is its wait's: stop_grace for a
	// stop and for a restart's first half (fleetd's exit), the fleet's
	// lead_ready_timeout for its lead's agent, else start_timeout.
	// A fleet of another host is waited for as its host's answer, bounded
	// by [federation] control_timeout (its steps come with the answer).
	peerOf := func(fleet string) string {
		if _, host, ok := peerview.SplitRemote(fleet); ok {
			return host
		}
		if f, err := cfg.Fleet(fleet); err == nil && cfg.Federation != nil && f.Host != "" && f.Host != registry.LocalHost && f.Host != cfg.Federation.Host {
			return f.Host
		}
		return ""
	}
	awaited := func(fleet, last string) string {
		if host := peerOf(fleet); host != "" && last == "" {
			return serveclient.AwaitedRemote(opts.Verb, fleet, host)
		}
		return serveclient.Awaited(opts.Verb, fleet, last)
	}
	bound := func(fleet, last string) time.Duration {
		if peerOf(fleet) != "" && cfg.Federation != nil {
			return cfg.Federation.ControlTimeout.Duration
		}
		if opts.Verb == serveapi.Stop || serveclient.AwaitsExit(opts.Verb, last) {
			return cfg.Manager.StopGrace.Duration
		}
		if serveclient.AwaitsLead(opts.Verb, last) {
			if f, err := cfg.Fleet(fleet); err == nil {
				return f.LeadReadyTimeout.Duration
			}
		}
		return cfg.Manager.StartTimeout.Duration
	}
	w := cmdutil.Wait(ios, awaited(names[0], ""), bound(names[0], ""))
	if !opts.Yes && ios.CanPrompt() {
		// A stop or restart that would end live members asks first (issue
		// 24 item 3); without a terminal it stays refused (exit 2).
		in := bufio.NewReader(ios.In)
		req.Ask = func(o serveclient.Outcome) (yes bool) {
			w.Hold(func() {
				// The refusal says how many members end, and which.
				fmt.Fprintf(ios.ErrOut, "%s\n%s %s anyway? [y/N] ", termtext.Text(o.Error), opts.Verb, termtext.Cell(o.Fleet))
				line, _ := in.ReadString('\n')
				a := strings.ToLower(strings.TrimSpace(line))
				yes = a == "y" || a == "yes"
			})
			return yes
		}
	}
	progress, done := req.Progress, req.Done
	req.Begin = func(n string) { w.Set(awaited(n, ""), bound(n, ""), true) }
	req.Progress = func(s lifecycle.Step) {
		w.Set(awaited(s.Fleet, s.Name), bound(s.Fleet, s.Name), false)
		if progress != nil {
			progress(s)
		}
	}
	req.Done = func(o serveclient.Outcome) {
		w.Pause()
		if done != nil {
			done(o)
		}
	}
	outs, err := c.Act(ctx, req)
	w.Done()
	return cmdutil.PrintResult(ios, opts.JSON, outs, nil, err)
}

// LogsOptions are `fleetmgr logs`'.
type LogsOptions struct {
	f          *cmdutil.Factory
	Fleets     []string
	All        bool
	Follow     bool
	Herdr      bool
	Lines      int
	Since      time.Duration
	Timestamps bool
	JSON       bool
	Serve      bool
}

// NewCmdLogs is `fleetmgr logs`.
func NewCmdLogs(f *cmdutil.Factory, runF func(*LogsOptions) error) *cobra.Command {
	opts := &LogsOptions{f: f}
	cmd := &cobra.Command{
		Use:               "logs [NAME…] [--all] [--serve]",
		Short:             "Show fleets' fleetd logs (herdr's with --herdr, serve's with --serve), interleaved by time",
		Long:              help("logs"),
		Example:           "  fleetmgr logs kb\n  fleetmgr logs kb docs -f\n  fleetmgr logs --all --since 10m --timestamps\n  fleetmgr logs kb --herdr\n  fleetmgr logs --serve -f",
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: f.CompleteFleets(true, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				opts.Fleets = args
			}
			if len(args) == 0 && !opts.All && !opts.Serve {
				return cmdutil.UsageError(cmd, fmt.Errorf("name a fleet (or several), or --all, or --serve"))
			}
			return cmdutil.Run(cmd, f, opts, runF, runLogs)
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing appended lines (of every log named)")
	cmd.Flags().IntVarP(&opts.Lines, "lines", "n", 50, "how many lines of each log to print first (0: all within the last 1 MiB)")
	cmd.Flags().BoolVar(&opts.Herdr, "herdr", false, "the herdr servers' logs instead of fleetd's")
	cmd.Flags().BoolVar(&opts.All, "all", false, "every fleet of this host")
	cmd.Flags().DurationVar(&opts.Since, "since", 0, "only lines logged at most this long ago, e.g. 10m (lines without a timestamp are left out)")
	cmd.Flags().BoolVar(&opts.Timestamps, "timestamps", false, "show when the log pipe read each line (UTC)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "one JSON object per line: fleet, proc, time, line")
	cmd.Flags().BoolVar(&opts.Serve, "serve", false, "fleetmgr serve's own log (<state_dir>/fleetmgr.log, written by serve --detach)")
	return cmd
}

func runLogs(ctx context.Context, opts *LogsOptions, ios *iostreams.IOStreams) error {
	_, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	if opts.Follow { // end with the reader of a pipe, as tail -f does
		var cancel context.CancelFunc
		ctx, cancel = ios.UntilReaderGoes(ctx)
		defer cancel()
	}
	if len(opts.Fleets) == 1 && !opts.All && !opts.Serve && opts.Since == 0 && !opts.Timestamps && !opts.JSON {
		return c.Logs(ctx, opts.Fleets[0], opts.Herdr, opts.Lines, opts.Follow, ios.Out) // NAME@HOST too
	}
	return c.LogsMany(ctx, serveclient.LogsRequest{Fleets: opts.Fleets, All: opts.All, Herdr: opts.Herdr, Lines: opts.Lines,
		Follow: opts.Follow, Since: opts.Since, Timestamps: opts.Timestamps, JSON: opts.JSON, Colour: ios.ColorEnabled(), Serve: opts.Serve}, ios.Out)
}
