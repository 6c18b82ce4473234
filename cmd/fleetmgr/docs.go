package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func (a *app) docsCmd() *cobra.Command {
	docs := &cobra.Command{
		Use:   "docs",
		Short: "Generate documentation from the commands (man pages)",
	}
	docs.AddCommand(&cobra.Command{
		Use:   "man DIR",
		Short: "Write a man page per command (fleetmgr.1, fleetmgr-start.1, …) into DIR",
		Long: `Write one man page (section 1) per command into DIR, created if missing, from the same text
as --help. Read one with man -l DIR/fleetmgr-start.1, or install them into a MANPATH
directory such as ~/.local/share/man/man1.`,
		Example: "  fleetmgr docs man ~/.local/share/man/man1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // pages stay the same from one run to the next
			hdr := &doc.GenManHeader{Title: "FLEETMGR", Section: "1", Source: "fleetmgr " + build().Short(), Manual: "fleetmgr manual"}
			if t, err := time.Parse(time.RFC3339, build().Time); err == nil {
				hdr.Date = &t // the commit's date, so pages of one revision are the same
			}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote man pages to %s\n", dir)
			return nil
		},
	})
	return docs
}
