package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/setup"
)

// The verbs that write fleets.toml: init, add, remove. The work is in
// package setup; add and remove then make a running serve re-read the file
// (serveclient.Client.ReloadEdited).

// InitOptions are `fleetmgr init`'s.
type InitOptions struct {
	f     *cmdutil.Factory
	Fleet setup.FleetOptions // Command: the arguments after --
	Stray []string           // arguments before --: an error
	JSON  bool
}

// NewCmdInit is `fleetmgr init` (setup.Init).
func NewCmdInit(f *cmdutil.Factory, runF func(*InitOptions) error) *cobra.Command {
	opts := &InitOptions{f: f}
	cmd := &cobra.Command{
		Use:     "init [--project DIR [--name NAME] [--port N] [--lead] [-- COMMAND...]]",
		Short:   "Write a commented fleets.toml (never over an existing one), with a first fleet if asked",
		Long:    help("init"),
		Example: "  fleetmgr init\n  fleetmgr init --project ~/src/kb\n  fleetmgr init --project . --name kb -- fleetd --config '{{.ConfigPath}}' --verbose",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stray, opts.Fleet.Command = cmdutil.SplitAtDash(cmd, args)
			return cmdutil.Run(cmd, f, opts, runF, runInit)
		},
	}
	fleetFlags(cmd, &opts.Fleet, true)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was written as JSON")
	return cmd
}

func runInit(ctx context.Context, opts *InitOptions, ios *iostreams.IOStreams) error {
	if len(opts.Stray) > 0 {
		return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("unexpected arguments %q: fleetd's command goes after --", opts.Stray)}
	}
	res, err := setup.Init(ctx, setup.InitOptions{Path: opts.f.ConfigPath, Fleet: &opts.Fleet})
	if err != nil {
		return &cmdutil.ExitError{Code: 2, Err: err}
	}
	return cmdutil.PrintResult(ios, opts.JSON, res, res.Lines(), nil)
}

// fleetFlags binds the flags describing a fleet.
func fleetFlags(cmd *cobra.Command, fo *setup.FleetOptions, withName bool) {
	cmd.Flags().StringVar(&fo.Project, "project", "", "the fleet's project directory (must exist)")
	if withName {
		cmd.Flags().StringVar(&fo.Name, "name", "", "the fleet's name (default: from the project directory's name)")
	}
	cmd.Flags().IntVar(&fo.Port, "port", 0, "fleetd's fixed port (default: allocated from [manager] port_range)")
	cmd.Flags().BoolVar(&fo.Lead, "lead", false, "launch the fleet's lead once fleetd is healthy (lead = true)")
}

// AddOptions are `fleetmgr add`'s.
type AddOptions struct {
	f     *cmdutil.Factory
	Names []string           // before --: exactly one
	Fleet setup.FleetOptions // Command: the arguments after --
	JSON  bool
}

// NewCmdAdd is `fleetmgr add` (setup.Add).
func NewCmdAdd(f *cmdutil.Factory, runF func(*AddOptions) error) *cobra.Command {
	opts := &AddOptions{f: f}
	cmd := &cobra.Command{
		Use:     "add NAME --project DIR [--port N] [--lead] [-- COMMAND...]",
		Short:   "Add a fleet to fleets.toml (appended; the rest of the file kept byte for byte)",
		Long:    help("add"),
		Example: "  fleetmgr add docs --project ~/src/docs\n  fleetmgr add kb --project . --port 8770 --lead -- fleetd --name '{{.Name}}' --port '{{.Port}}'",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names, opts.Fleet.Command = cmdutil.SplitAtDash(cmd, args)
			return cmdutil.Run(cmd, f, opts, runF, runAdd)
		},
	}
	fleetFlags(cmd, &opts.Fleet, false)
	_ = cmd.MarkFlagRequired("project")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was written as JSON")
	return cmd
}

func runAdd(ctx context.Context, opts *AddOptions, ios *iostreams.IOStreams) error {
	if len(opts.Names) != 1 {
		return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("add takes one NAME before --, got %q", opts.Names)}
	}
	cfg, err := opts.f.ConfigOutsidePane(ctx, "add")
	if err != nil {
		return err
	}
	fo := opts.Fleet
	fo.Name = opts.Names[0]
	res, err := setup.Add(ctx, setup.AddOptions{Path: cfg.Path, Fleet: fo, Reload: opts.f.Reloader})
	if res == nil {
		return &cmdutil.ExitError{Code: 2, Err: err}
	}
	return cmdutil.PrintResult(ios, opts.JSON, res, res.Lines(), err)
}

// RemoveOptions are `fleetmgr remove`'s.
type RemoveOptions struct {
	f      *cmdutil.Factory
	Remove setup.RemoveOptions // Name, Purge, DeleteMessages, DeleteWorktrees
	JSON   bool
}

// NewCmdRemove is `fleetmgr remove` (setup.Remove).
func NewCmdRemove(f *cmdutil.Factory, runF func(*RemoveOptions) error) *cobra.Command {
	opts := &RemoveOptions{f: f}
	cmd := &cobra.Command{
		Use:               "remove NAME [--purge [--yes-delete-messages] [--yes-delete-worktrees]]",
		Short:             "Remove a stopped fleet from fleets.toml (and with --purge its state)",
		Long:              help("remove"),
		Example:           "  fleetmgr remove docs\n  fleetmgr remove docs --purge\n  fleetmgr remove docs --purge --yes-delete-messages --yes-delete-worktrees",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.CompleteFleets(true, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Remove.Name = args[0]
			return cmdutil.Run(cmd, f, opts, runF, runRemove)
		},
	}
	cmd.Flags().BoolVar(&opts.Remove.Purge, "purge", false, "also delete the fleet's state directory")
	cmd.Flags().BoolVar(&opts.Remove.DeleteMessages, "yes-delete-messages", false, "with --purge: also delete the fleet's vhost (every message in it) and broker user")
	cmd.Flags().BoolVar(&opts.Remove.DeleteWorktrees, "yes-delete-worktrees", false, "with --purge: also delete worktrees under the state directory")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was done as JSON")
	return cmd
}

func runRemove(ctx context.Context, opts *RemoveOptions, ios *iostreams.IOStreams) error {
	cfg, err := opts.f.ConfigOutsidePane(ctx, "remove")
	if err != nil {
		return err
	}
	ro := opts.Remove
	ro.Path, ro.Reload, ro.Manager = cfg.Path, opts.f.Reloader, opts.f.Manager
	// Each step says what it waits for (issue 24 item 6): the broker,
	// the fleet's lock, serve's reload; the clock starts again at each.
	w := cmdutil.Wait(ios, "fleet "+ro.Name+"'s state check and the file's rewrite", 0)
	ro.Awaiting = func(what string, timeout time.Duration) { w.Set(what, timeout, true) }
	ro.Reload = func(ctx context.Context, cfg *registry.Config) (string, error) {
		w.Set(serveclient.ReloadAwaited, serveclient.ReloadTimeout, true)
		return opts.f.Reloader(ctx, cfg)
	}
	res, err := setup.Remove(ctx, ro)
	w.Done()
	if res == nil {
		return &cmdutil.ExitError{Code: 2, Err: err}
	}
	return cmdutil.PrintResult(ios, opts.JSON, res, res.Lines(), err)
}
