package cmdutil

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/fleetmgr/fleetmgr/buildinfo"
)

// WriteManPages writes a man page per command under root (fleetmgr.1,
// fleetmgr-start.1, …) into dir, creating it (0755). The pages of one
// build are the same from run to run: no generation tag, and the date is
// the commit's (build.Time) when known.
func WriteManPages(root *cobra.Command, dir string, build buildinfo.Info) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root.DisableAutoGenTag = true
	hdr := &doc.GenManHeader{Title: "FLEETMGR", Section: "1", Source: "fleetmgr " + build.Short(), Manual: "fleetmgr manual"}
	if t, err := time.Parse(time.RFC3339, build.Time); err == nil {
		hdr.Date = &t
	}
	return doc.GenManTree(root, hdr, dir)
}
