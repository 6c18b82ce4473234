package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/doctor"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

// CheckOptions are `fleetmgr check`'s.
type CheckOptions struct {
	f    *cmdutil.Factory
	JSON bool
}

// NewCmdCheck is `fleetmgr check` (doctor.Run).
func NewCmdCheck(f *cmdutil.Factory, runF func(*CheckOptions) error) *cobra.Command {
	opts := &CheckOptions{f: f}
	cmd := &cobra.Command{
		Use:     "check",
		Args:    cobra.NoArgs,
		Short:   "Validate fleets.toml and reach the broker and the herdr binary",
		Long:    help("check"),
		Example: "  fleetmgr check\n  fleetmgr check --json",
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runCheck) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the findings as JSON")
	return cmd
}

func runCheck(ctx context.Context, opts *CheckOptions, ios *iostreams.IOStreams) error {
	rep := doctor.Run(ctx, doctor.Options{Path: opts.f.ConfigPath, Manager: opts.f.QuietManager, Peers: func(ctx context.Context, cfg *registry.Config) *peerview.Federation {
		_, fed, _ := opts.f.QuietClient(cfg).ListRemote(ctx)
		return fed
	}, Sinks: func(ctx context.Context, cfg *registry.Config) ([]status.FailingSink, bool) {
		return opts.f.QuietClient(cfg).FailingSinks(ctx)
	}})
	if !opts.JSON {
		doctor.Render(ios.Out, rep)
	}
	return cmdutil.PrintResult(ios, opts.JSON, rep, nil, rep.Err())
}

// VhostDeleteOptions are `fleetmgr vhost delete`'s.
type VhostDeleteOptions struct {
	f     *cmdutil.Factory
	Fleet string
	Yes   bool
}

// NewCmdVhost is `fleetmgr vhost`, the explicit, separate way to delete a
// fleet's vhost (stop never does): `vhost delete` (serveclient.Client.DeleteVhost).
func NewCmdVhost(f *cmdutil.Factory, runF func(*VhostDeleteOptions) error) *cobra.Command {
	opts := &VhostDeleteOptions{f: f}
	del := &cobra.Command{
		Use:               "delete NAME --yes-delete-messages",
		Short:             "Delete a stopped fleet's vhost and every message queued in it",
		Long:              help("vhost-delete"),
		Example:           "  fleetmgr vhost delete kb --yes-delete-messages",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.CompleteFleets(true, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fleet = args[0]
			return cmdutil.Run(cmd, f, opts, runF, runVhostDelete)
		},
	}
	del.Flags().BoolVar(&opts.Yes, "yes-delete-messages", false, "confirm that every message in the vhost is deleted")
	cmd := &cobra.Command{Use: "vhost", Short: "Manage fleets' broker vhosts (delete only; start creates them)"}
	cmd.AddCommand(del)
	return cmd
}

func runVhostDelete(ctx context.Context, opts *VhostDeleteOptions, ios *iostreams.IOStreams) error {
	_, c, err := opts.f.ClientOutsidePane(ctx, "delete the vhost of")
	if err != nil {
		return err
	}
	vhost, existed, err := c.DeleteVhost(ctx, opts.Fleet, opts.Yes)
	if err != nil {
		return err
	}
	what := "did not exist"
	if existed {
		what = "deleted"
	}
	_, err = fmt.Fprintf(ios.Out, "%s: vhost %s %s\n", opts.Fleet, vhost, what)
	return err
}
