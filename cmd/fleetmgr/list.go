package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveclient"
)

// ListOptions are `fleetmgr list`'s.
type ListOptions struct {
	f    *cmdutil.Factory
	JSON bool
}

// NewCmdList is `fleetmgr list` (serveclient.Client.List).
func NewCmdList(f *cmdutil.Factory, runF func(*ListOptions) error) *cobra.Command {
	opts := &ListOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list",
		Args:    cobra.NoArgs,
		Short:   "List configured fleets and their states",
		Long:    help("list"),
		Example: "  fleetmgr list\n  fleetmgr list --json",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runList) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runList(ctx context.Context, opts *ListOptions, ios *iostreams.IOStreams) error {
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	remote, fed, note := c.ListRemote(ctx) // none without [federation]
	rows := serveclient.MergeRemote(c.List(), remote)
	if note != "" {
		fmt.Fprintln(ios.ErrOut, "fleetmgr:", note)
	}
	if opts.JSON {
		return cmdutil.PrintJSON(ios.Out, rows)
	}
	_, sup := c.Supervision()
	fmt.Fprintln(ios.Out, sup)
	if err := serveclient.RenderList(ios.Out, ios.ErrOut, rows, cfg.Path); err != nil {
		return err
	}
	serveclient.RenderFederation(ios.Out, fed)
	return nil
}
