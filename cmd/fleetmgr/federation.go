package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/iostreams"
)

// FederationKeyOptions are `fleetmgr federation key`'s.
type FederationKeyOptions struct {
	f    *cmdutil.Factory
	JSON bool
}

// NewCmdFederation is `fleetmgr federation` and its `key` (daemon.FederationKey).
func NewCmdFederation(f *cmdutil.Factory, runF func(*FederationKeyOptions) error) *cobra.Command {
	opts := &FederationKeyOptions{f: f}
	key := &cobra.Command{
		Use:     "key",
		Short:   "Print this host's trust line for other hosts' [federation] trust (creates the key if needed)",
		Long:    help("federation-key"),
		Example: "  fleetmgr federation key\n  fleetmgr federation key --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runFederationKey) },
	}
	key.Flags().BoolVar(&opts.JSON, "json", false, "print host, key, trust_line, key_file and created as JSON")
	cmd := &cobra.Command{Use: "federation", Short: "This host's identity among the managers sharing a broker (docs/FEDERATION.md)", Long: help("federation")}
	cmd.AddCommand(key)
	return cmd
}

func runFederationKey(_ context.Context, opts *FederationKeyOptions, ios *iostreams.IOStreams) error {
	cfg, err := opts.f.Config()
	if err != nil {
		return err
	}
	k, err := daemon.FederationKey(cfg)
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.PrintJSON(ios.Out, k)
	}
	if k.Created {
		fmt.Fprintf(ios.ErrOut, "fleetmgr: created %s (keep it private; it signs everything this host says)\n", k.KeyFile)
	}
	fmt.Fprintln(ios.Out, k.TrustLine)
	return nil
}
