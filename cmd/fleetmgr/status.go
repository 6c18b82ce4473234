package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/status"
)

// StatusOptions are `fleetmgr status`'.
type StatusOptions struct {
	f        *cmdutil.Factory
	Names    []string
	JSON     bool
	Watch    bool
	Local    bool
	Fresh    bool
	Wide     bool
	Interval time.Duration
}

// NewCmdStatus is `fleetmgr status` (serveclient.Client.Status, printed by
// status.Render).
func NewCmdStatus(f *cmdutil.Factory, runF func(*StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{f: f}
	cmd := &cobra.Command{
		Use:               "status [NAME…]",
		Short:             "Which fleet is working, which member is stalled (verdicts from evidence)",
		Long:              help("status"),
		Example:           "  fleetmgr status\n  fleetmgr status --wide\n  fleetmgr status kb --json --fresh\n  fleetmgr status --watch --interval 2s",
		ValidArgsFunction: f.CompleteFleets(false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names = args
			if cmd.Flags().Changed("interval") && opts.Interval <= 0 { // 0 is the flag's "not given", never a value
				return cmdutil.UsageError(cmd, fmt.Errorf("--interval must be positive, e.g. 2s, not %s (without it: [status] interval)", opts.Interval))
			}
			return cmdutil.Run(cmd, f, opts, runF, runStatus)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as JSON (schema: docs/status-schema.json)")
	cmd.Flags().BoolVar(&opts.Watch, "watch", false, "refresh continuously (in place on a terminal) until interrupted")
	cmd.Flags().DurationVar(&opts.Interval, "interval", 0, "time between a busy member's two samples (default [status] interval, 3s)")
	cmd.Flags().BoolVar(&opts.Local, "local", false, "do not ask a running fleetmgr serve; sample from this process (walking worktrees)")
	cmd.Flags().BoolVar(&opts.Fresh, "fresh", false, "make fleetmgr serve sample anew instead of answering from its last sampling")
	cmd.Flags().BoolVar(&opts.Wide, "wide", false, "the long table: also /healthz latency, herdr, broker and member count (the default fits 120 columns)")
	return cmd
}

func runStatus(ctx context.Context, opts *StatusOptions, ios *iostreams.IOStreams) error {
	// A member must not read the fleets through fleetmgr either: sampled
	// from this process, every other fleet's fleetd would answer it as
	// primary (fleetd knows callers by pid).
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	tty, colour := ios.IsStdoutTTY(), ios.ColorEnabled()
	req := serveclient.StatusRequest{Fleets: opts.Names, Interval: opts.Interval, Local: opts.Local, Fresh: opts.Fresh || opts.Watch,
		Fallback: func(sock string, err error) {
			fmt.Fprintf(ios.ErrOut, "fleetmgr status: the daemon on %s did not answer (%v); sampling from this process\n", sock, err)
		}}
	if in := opts.f.InForce; in != nil {
		req.ConfigError = in.Err
	}
	// Checked only before this process samples: a running serve's guard
	// judges the caller by the same rules (and refuses a member itself).
	req.BeforeLocal = func() error { return opts.f.RefuseInPane(ctx, cfg, "read the status of") }
	return c.Watch(ctx, req, opts.Watch, func(rep *status.Report, first bool) error {
		if first && cfg.Federation != nil && rep.Federation == nil {
			fmt.Fprintln(ios.ErrOut, "fleetmgr status: other hosts' fleets are shown through this host's fleetmgr serve, which did not answer (fleetmgr serve --detach)")
		}
		if opts.JSON {
			return cmdutil.PrintJSON(ios.Out, rep)
		}
		return status.RenderFrame(ios.Out, rep, first, opts.Watch && tty, colour, opts.Wide)
	})
}
