package main

import (
	"context"
	"fmt"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/spf13/cobra"
)

// versionTemplate is what `fleetmgr --version` prints.
func versionTemplate(f *cmdutil.Factory) string { return "fleetmgr " + f.Build().String() + "\n" }

// VersionOptions are `fleetmgr version`'s.
type VersionOptions struct {
	f    *cmdutil.Factory
	JSON bool
}

// NewCmdVersion is `fleetmgr version`.
func NewCmdVersion(f *cmdutil.Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{f: f}
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print fleetmgr's version, VCS revision and time, and Go version",
		Long:  help("version"),
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmdutil.Run(cmd, f, opts, runF, runVersion) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON: module, version, revision, time, modified, go_version")
	return cmd
}

func runVersion(_ context.Context, opts *VersionOptions, ios *iostreams.IOStreams) error {
	if opts.JSON {
		return cmdutil.PrintJSON(ios.Out, opts.f.Build())
	}
	_, err := fmt.Fprint(ios.Out, versionTemplate(opts.f))
	return err
}

// DocsManOptions are `fleetmgr docs man`'s.
type DocsManOptions struct {
	f    *cmdutil.Factory
	Dir  string
	root *cobra.Command
}

// NewCmdDocs is `fleetmgr docs` (man pages from the commands, cobra/doc).
func NewCmdDocs(f *cmdutil.Factory, runF func(*DocsManOptions) error) *cobra.Command {
	opts := &DocsManOptions{f: f}
	docs := &cobra.Command{Use: "docs", Short: "Generate documentation from the commands (man pages)"}
	docs.AddCommand(&cobra.Command{
		Use:     "man DIR",
		Short:   "Write a man page per command (fleetmgr.1, fleetmgr-start.1, …) into DIR",
		Long:    help("docs-man"),
		Example: "  fleetmgr docs man ~/.local/share/man/man1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir, opts.root = args[0], cmd.Root()
			return cmdutil.Run(cmd, f, opts, runF, runDocsMan)
		},
	})
	return docs
}

func runDocsMan(_ context.Context, opts *DocsManOptions, ios *iostreams.IOStreams) error {
	if err := cmdutil.WriteManPages(opts.root, opts.Dir, opts.f.Build()); err != nil {
		return fmt.Errorf("man pages not written to %s: %w; name a directory you can write, e.g. fleetmgr docs man ~/.local/share/man/man1", opts.Dir, err)
	}
	fmt.Fprintf(ios.Out, "wrote man pages to %s\n", opts.Dir)
	return nil
}
