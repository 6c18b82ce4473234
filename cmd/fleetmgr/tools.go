package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/toolpolicy"
)

// ToolsOptions are `fleetmgr tools`' and its hide and show's.
type ToolsOptions struct {
	f *cmdutil.Factory
	// Action is "" (list), toolpolicy.ActionHide or toolpolicy.ActionShow.
	Action string
	Fleet  string
	Tools  []string
	JSON   bool
}

// NewCmdTools is `fleetmgr tools [NAME]` and `fleetmgr tools hide|show
// NAME TOOL…` (serveclient.Client.Tools, serveclient.Client.SetTools).
func NewCmdTools(f *cmdutil.Factory, runF func(*ToolsOptions) error) *cobra.Command {
	opts := &ToolsOptions{f: f}
	cmd := &cobra.Command{
		Use:     "tools [NAME]",
		Short:   "Which fleet tools the operator's session sees, and why",
		Long:    help("tools"),
		Example: "  fleetmgr tools\n  fleetmgr tools kb --json\n  fleetmgr tools hide kb fleet_stop 'fleet_debug_*'\n  fleetmgr tools show kb fleet_stop",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Fleet = args[0]
			}
			return cmdutil.Run(cmd, f, opts, runF, runTools)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON (fleets with each tool's state and reason, and the overrides in force)")
	for _, action := range []string{toolpolicy.ActionHide, toolpolicy.ActionShow} {
		o := &ToolsOptions{f: f, Action: action}
		sub := &cobra.Command{
			Use:     action + " NAME TOOL...",
			Short:   map[string]string{toolpolicy.ActionHide: "Hide tools of a fleet from the operator's session (kept across serve restarts)", toolpolicy.ActionShow: "Show tools of a fleet that fleets.toml or a hide hides"}[action],
			Long:    help("tools-" + action),
			Example: fmt.Sprintf("  fleetmgr tools %s kb fleet_stop\n  fleetmgr tools %s kb 'fleet_debug_*'", action, action),
			Args:    cobra.MinimumNArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				o.Fleet, o.Tools = args[0], args[1:]
				return cmdutil.Run(cmd, f, o, runF, runTools)
			},
		}
		sub.Flags().BoolVar(&o.JSON, "json", false, "print the fleet's tools afterwards as JSON")
		cmd.AddCommand(sub)
	}
	return cmd
}

func runTools(ctx context.Context, opts *ToolsOptions, ios *iostreams.IOStreams) error {
	_, c, err := opts.f.Client()
	if err != nil {
		return err
	}
	if opts.Action == "" {
		if opts.Fleet != "" {
			if err := c.Known(opts.Fleet); err != nil {
				return err
			}
		}
		rep, err := c.Tools(ctx, opts.Fleet)
		if err != nil {
			return err
		}
		if opts.JSON {
			return cmdutil.PrintJSON(ios.Out, rep)
		}
		return serveclient.RenderTools(ios.Out, rep)
	}
	if opts.Action == toolpolicy.ActionHide {
		// A fleet that never listed its tools takes the hide as it is:
		// said so, since a typo there is not caught.
		if cur, err := c.Tools(ctx, opts.Fleet); err == nil {
			if _, known := serveclient.FleetToolsOf(cur, opts.Fleet); !known {
				fmt.Fprintf(ios.ErrOut, "fleetmgr: warning: %s has not listed its tools yet (never started), so %s cannot be checked against them; the hide applies once it offers them (`fleetmgr tools %s` lists them then)\n",
					opts.Fleet, strings.Join(opts.Tools, " "), opts.Fleet)
			}
		}
	}
	rep, err := c.SetTools(ctx, opts.Action, opts.Fleet, opts.Tools)
	var nj *serveclient.NotJournalledError
	if errors.As(err, &nj) {
		fmt.Fprintf(ios.ErrOut, "fleetmgr: recorded; no fleetmgr serve runs, the next one applies it (not journalled: %v)\n", nj.Err)
		return nil
	}
	if err != nil {
		return err
	}
	if rep == nil {
		fmt.Fprintf(ios.ErrOut, "fleetmgr: recorded; no fleetmgr serve runs, the next one applies it\n")
		return nil
	}
	if opts.JSON {
		return cmdutil.PrintJSON(ios.Out, rep)
	}
	return serveclient.RenderTools(ios.Out, rep)
}
