package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/daemon"
)

// ListOptions are `fleetmgr list`'s.
type ListOptions struct {
	f    *Factory
	JSON bool
}

// NewCmdList is `fleetmgr list` (daemon.Client.List).
func NewCmdList(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	opts := &ListOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list",
		Args:    cobra.NoArgs,
		Short:   "List configured fleets and their states",
		Long:    help("list"),
		Example: "  fleetmgr list\n  fleetmgr list --json",
		RunE:    func(cmd *cobra.Command, _ []string) error { return do(cmd, f, opts, runF, runList) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	return cmd
}

func runList(ctx context.Context, opts *ListOptions, ios *IOStreams) error {
	cfg, err := opts.f.Config()
	if err != nil {
		return err
	}
	c, _ := opts.f.Client(cfg)
	remote, fed, note := c.ListRemote(ctx) // none without [federation]
	rows := daemon.MergeRemote(c.List(), remote)
	if note != "" {
		fmt.Fprintln(ios.ErrOut, "fleetmgr:", note)
	}
	if opts.JSON {
		return printJSON(ios.Out, rows)
	}
	if err := daemon.RenderList(ios.Out, ios.ErrOut, rows, cfg.Path); err != nil {
		return err
	}
	daemon.RenderFederation(ios.Out, fed)
	return nil
}
