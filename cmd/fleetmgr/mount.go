package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/mount"
)

// MountOptions are `fleetmgr mount`'s.
type MountOptions struct {
	f      *cmdutil.Factory
	Client string // claude or opencode
	Stdio  bool
	Scope  string
	Name   string
	Print  bool
	JSON   bool
}

// NewCmdMount is `fleetmgr mount` (package mount).
func NewCmdMount(f *cmdutil.Factory, runF func(*MountOptions) error) *cobra.Command {
	opts := &MountOptions{f: f}
	cmd := &cobra.Command{
		Use:       "mount claude|opencode [--stdio] [--scope user|project] [--print]",
		Short:     "Add this fleetmgr to Claude Code's or OpenCode's MCP servers",
		Long:      help("mount"),
		Example:   "  fleetmgr mount claude\n  fleetmgr mount claude --stdio --scope project\n  fleetmgr mount opencode --print",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"claude", "opencode"},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Client = args[0]
			if s := mount.Scope(opts.Scope); s != mount.User && s != mount.Project {
				return cmdutil.UsageError(cmd, fmt.Errorf("unknown --scope %q: user or project", opts.Scope))
			}
			return cmdutil.Run(cmd, f, opts, runF, runMount)
		},
	}
	cmd.Flags().BoolVar(&opts.Stdio, "stdio", false, "mount the command 'fleetmgr mcp' (stdio) instead of the HTTP endpoint")
	cmd.Flags().StringVar(&opts.Scope, "scope", "user", "user (every project) or project (the current directory)")
	cmd.Flags().BoolVar(&opts.Print, "print", false, "print the command (claude) or the resulting file (opencode); change nothing")
	cmd.Flags().StringVar(&opts.Name, "name", mount.DefaultName, "the server's name in the client")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

func runMount(ctx context.Context, opts *MountOptions, ios *iostreams.IOStreams) error {
	cfg, err := opts.f.Config()
	if err != nil {
		return err
	}
	o := mount.Options{Client: mount.Client(opts.Client), Scope: mount.Scope(opts.Scope), Name: opts.Name, Print: opts.Print}
	if o.URL, o.Command, err = daemon.MountTarget(ctx, cfg, opts.f.QuietManager(cfg), opts.Stdio); err != nil {
		return err
	}
	res, err := mount.Mount(ctx, o)
	if err != nil {
		return err
	}
	return cmdutil.PrintResult(ios, opts.JSON, res, res.Lines(o), nil)
}
