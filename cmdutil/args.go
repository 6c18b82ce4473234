package cmdutil

import "github.com/spf13/cobra"

// SplitAtDash returns cmd's arguments before "--" and those after it (a
// command to run, as `fleetmgr add NAME -- fleetd …` takes fleetd's
// argv); without "--", all of args and nil.
func SplitAtDash(cmd *cobra.Command, args []string) (before, command []string) {
	if at := cmd.ArgsLenAtDash(); at >= 0 {
		return args[:at], args[at:]
	}
	return args, nil
}
