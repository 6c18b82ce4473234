package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/status"
)

// TopOptions are `fleetmgr top`'s.
type TopOptions struct {
	f        *cmdutil.Factory
	Names    []string
	Interval time.Duration
}

// NewCmdTop is `fleetmgr top`: fleets and members sorted by CPU, refreshed
// in place (serveclient.Client.Watch, printed by status.RenderTop) until q.
func NewCmdTop(f *cmdutil.Factory, runF func(*TopOptions) error) *cobra.Command {
	opts := &TopOptions{f: f}
	cmd := &cobra.Command{
		Use:               "top [NAME…]",
		Short:             "Live view of fleets and members by CPU and memory, with verdicts (q quits)",
		Long:              help("top"),
		Example:           "  fleetmgr top\n  fleetmgr top kb --interval 2s",
		ValidArgsFunction: f.CompleteFleets(false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names = args
			if cmd.Flags().Changed("interval") && opts.Interval <= 0 {
				return cmdutil.UsageError(cmd, fmt.Errorf("--interval must be positive, e.g. 2s, not %s", opts.Interval))
			}
			return cmdutil.Run(cmd, f, opts, runF, runTop)
		},
	}
	cmd.Flags().DurationVar(&opts.Interval, "interval", 0, "time between refreshes, and between a busy member's two samples (default [status] interval, 3s)")
	return cmd
}

func runTop(ctx context.Context, opts *TopOptions, ios *iostreams.IOStreams) error {
	in, ok := ios.In.(*os.File)
	out, ok2 := ios.Out.(*os.File)
	if !ok || !ok2 || !term.IsTerminal(int(in.Fd())) || !term.IsTerminal(int(out.Fd())) {
		return errors.New("fleetmgr top needs a terminal on stdin and stdout (fleetmgr status --watch or --json otherwise)")
	}
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return fmt.Errorf("fleetmgr top: raw mode: %w", err)
	}
	defer term.Restore(int(in.Fd()), old)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The key reader: q (or Ctrl-C, which raw mode delivers as a byte)
	// ends the view. It blocks in Read; the process exits right after.
	go func() {
		b := make([]byte, 16)
		for {
			n, err := in.Read(b)
			if err != nil {
				cancel()
				return
			}
			for _, k := range b[:n] {
				if k == 'q' || k == 'Q' || k == 3 {
					cancel()
					return
				}
			}
		}
	}()
	fmt.Fprint(out, "\x1b[?25l") // hide the cursor while the view runs
	defer fmt.Fprint(out, "\x1b[?25h\r\n")
	req := serveclient.StatusRequest{Fleets: opts.Names, Interval: opts.Interval, Fresh: true}
	if in := opts.f.InForce; in != nil {
		req.ConfigError = in.Err
	}
	req.BeforeLocal = func() error { return opts.f.RefuseInPane(ctx, cfg, "read the status of") }
	err = c.Watch(ctx, req, true, func(rep *status.Report, first bool) error {
		width, _, err := term.GetSize(int(out.Fd()))
		if err != nil {
			width = status.TableWidth
		}
		return status.RenderTop(out, rep, width)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
