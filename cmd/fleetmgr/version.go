package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/fleetmgr/fleetmgr/buildinfo"
)

// build is this binary's build information (package buildinfo); version,
// when set at link time, names the release.
func build() buildinfo.Info { return buildinfo.Read(version) }

// versionTemplate is what `fleetmgr --version` prints.
func versionTemplate() string { return "fleetmgr " + build().String() + "\n" }

// VersionOptions are `fleetmgr version`'s.
type VersionOptions struct{ JSON bool }

// NewCmdVersion is `fleetmgr version`.
func NewCmdVersion(f *Factory, runF func(*VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{}
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print fleetmgr's version, VCS revision and time, and Go version",
		Long:  help("version"),
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return do(cmd, f, opts, runF, runVersion) },
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON: module, version, revision, time, modified, go_version")
	return cmd
}

func runVersion(_ context.Context, opts *VersionOptions, ios *IOStreams) error {
	if opts.JSON {
		return printJSON(ios.Out, build())
	}
	_, err := fmt.Fprint(ios.Out, versionTemplate())
	return err
}

// DocsManOptions are `fleetmgr docs man`'s.
type DocsManOptions struct {
	Dir  string
	root *cobra.Command
}

// NewCmdDocs is `fleetmgr docs` (man pages from the commands, cobra/doc).
func NewCmdDocs(f *Factory, runF func(*DocsManOptions) error) *cobra.Command {
	opts := &DocsManOptions{}
	docs := &cobra.Command{Use: "docs", Short: "Generate documentation from the commands (man pages)"}
	docs.AddCommand(&cobra.Command{
		Use:     "man DIR",
		Short:   "Write a man page per command (fleetmgr.1, fleetmgr-start.1, …) into DIR",
		Long:    help("docs-man"),
		Example: "  fleetmgr docs man ~/.local/share/man/man1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir, opts.root = args[0], cmd.Root()
			return do(cmd, f, opts, runF, runDocsMan)
		},
	})
	return docs
}

func runDocsMan(_ context.Context, opts *DocsManOptions, ios *IOStreams) error {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return err
	}
	opts.root.DisableAutoGenTag = true // pages stay the same from one run to the next
	hdr := &doc.GenManHeader{Title: "FLEETMGR", Section: "1", Source: "fleetmgr " + build().Short(), Manual: "fleetmgr manual"}
	if t, err := time.Parse(time.RFC3339, build().Time); err == nil {
		hdr.Date = &t // the commit's date, so pages of one revision are the same
	}
	if err := doc.GenManTree(opts.root, hdr, opts.Dir); err != nil {
		return err
	}
	fmt.Fprintf(ios.Out, "wrote man pages to %s\n", opts.Dir)
	return nil
}
