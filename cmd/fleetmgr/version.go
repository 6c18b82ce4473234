package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/buildinfo"
)

// build is this binary's build information (package buildinfo); version,
// when set at link time, names the release.
func build() buildinfo.Info { return buildinfo.Read(version) }

// versionTemplate is what `fleetmgr --version` prints.
func versionTemplate() string { return "fleetmgr " + build().String() + "\n" }

func (a *app) versionCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print fleetmgr's version, VCS revision and time, and Go version",
		Long: `Print which fleetmgr this is, from the build information Go embeds: the module version,
the VCS revision and commit time (a binary built by go build in a git checkout carries them),
whether the tree had uncommitted changes, and the Go version. Facts a binary does not carry
(go run, go test) read "unknown". --json prints the same as an object for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if jsonOut {
				return a.printJSON(build())
			}
			_, err := fmt.Fprint(a.stdout, versionTemplate())
			return err
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON: module, version, revision, time, modified, go_version")
	return cmd
}
