package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/fleetsfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// fleetArgVerbs are the commands whose arguments are fleet names.
var fleetArgVerbs = []string{"start", "stop", "restart", "logs", "status", "remove", "vhost delete"}

// remoteArgVerbs are those of fleetArgVerbs that take a NAME@HOST.
var remoteArgVerbs = []string{"start", "stop", "restart", "logs", "status"}

// completeFleets gives every command of fleetArgVerbs under root shell
// completion of fleet names (cobra's ValidArgsFunction; enable it with
// `fleetmgr completion bash|zsh|fish`, see README "Completion"). logs,
// remove and vhost delete take one name; the others any number.
func completeFleets(root *cobra.Command, f *cmdutil.Factory) {
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
			names := fleetNames(f)
			if slices.Contains(remoteArgVerbs, path) {
				names = append(names, remoteFleetNames(f)...)
			}
			for _, n := range names {
				if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
					out = append(out, n)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
}

// remoteFleetNames returns NAME@HOST for the fleets other hosts' managers
// announce (federation), as this host's running serve knows them
// (daemon.Client.ListRemote), waiting at most a second; nil without
// [federation], without a serve, or when the config does not load. It is
// the one place completion asks for them.
func remoteFleetNames(f *cmdutil.Factory) []string {
	cfg, err := registry.Load(f.ConfigFile())
	if err != nil || cfg.Federation == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, _, _ := daemon.NewClient(cfg, nil, version).ListRemote(ctx)
	var out []string
	for _, r := range rows {
		if strings.Contains(r.Name, "@") {
			out = append(out, r.Name)
		}
	}
	return out
}

// fleetNames lists the fleets of the config the command would read
// (--config as typed on the command line being completed, else the
// default places). A file that does not load as a whole still gives the
// names its TOML defines (fleetsfile.NamesIn). The verbs that act on other
// hosts' fleets add remoteFleetNames.
func fleetNames(f *cmdutil.Factory) []string {
	return fleetsfile.NamesIn(f.ConfigFile())
}
