package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/fleetsfile"
)

// fleetArgVerbs are the commands whose arguments are fleet names.
var fleetArgVerbs = []string{"start", "stop", "restart", "logs", "status", "remove", "vhost delete"}

// completeFleets gives every command of fleetArgVerbs under root shell
// completion of fleet names (cobra's ValidArgsFunction; enable it with
// `fleetmgr completion bash|zsh|fish`, see README "Completion"). logs,
// remove and vhost delete take one name; the others any number.
func completeFleets(root *cobra.Command, f *Factory) {
	for _, path := range fleetArgVerbs {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd == root {
			continue
		}
		one := path == "logs" || path == "remove" || path == "vhost delete"
		cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if one && len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, n := range fleetNames(f) {
				if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
					out = append(out, n)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
}

// remoteFleetNames returns NAME@HOST for fleets other hosts' managers show
// (federation); this manager knows none yet, so it returns nil. It is the
// one place completion asks for them.
func remoteFleetNames(*Factory) []string { return nil }

// fleetNames lists the fleets of the config the command would read
// (--config as typed on the command line being completed, else the
// default places), then remoteFleetNames. A file that does not load as a
// whole still gives the names its TOML defines (fleetsfile.NamesIn).
func fleetNames(f *Factory) []string {
	return append(fleetsfile.NamesIn(f.configFile()), remoteFleetNames(f)...)
}
