package cmdutil

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/fleetsfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// CompleteFleets is the shell completion (cobra's ValidArgsFunction;
// enabled with `fleetmgr completion bash|zsh|fish`, README "Completion")
// of a verb whose arguments are fleet names: the names starting with
// what is typed and not given yet, never files. one: the verb takes one
// name, so nothing is offered after it. remote: the verb also takes
// NAME@HOST, and other hosts' fleets are offered (RemoteFleetNames).
func (f *Factory) CompleteFleets(one, remote bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if one && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		names := f.FleetNames()
		if remote {
			names = append(names, f.RemoteFleetNames()...)
		}
		for _, n := range names {
			if completable(n) && strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completable reports whether n may be offered: a fleet name registry
// accepts, or NAME@HOST with such a NAME and a HOST of printable,
// non-space characters. A name the config would refuse is not offered
// (the verb would refuse it too), and neither is one that would break the
// completion protocol: cobra separates a candidate from its description
// by a tab and candidates by newlines, so a name from a fleets.toml key
// or a peer's announcement holding one would offer something else.
func completable(n string) bool {
	name, host, remote := strings.Cut(n, "@")
	if !registry.ValidFleetName(name) {
		return false
	}
	if !remote {
		return true
	}
	if host == "" {
		return false
	}
	for _, r := range host {
		if r <= ' ' || r == 0x7f || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// FleetNames lists the fleets of the config the command would read
// (--config as typed on the command line being completed, else the
// default places). A file that does not load as a whole still gives the
// names its TOML defines (fleetsfile.NamesIn).
func (f *Factory) FleetNames() []string {
	return fleetsfile.NamesIn(f.ConfigFile())
}

// RemoteFleetNames returns NAME@HOST for the fleets other hosts' managers
// announce (federation), as this host's running serve knows them
// (serveclient.Client.ListRemote), waiting at most a second; nil without
// [federation], without a serve, or when the config does not load. It is
// the one place completion asks for them.
func (f *Factory) RemoteFleetNames() []string {
	cfg, err := registry.Load(f.ConfigFile())
	if err != nil || cfg.Federation == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, _, _ := f.client(cfg, nil).ListRemote(ctx)
	var out []string
	for _, r := range rows {
		if strings.Contains(r.Name, "@") {
			out = append(out, r.Name)
		}
	}
	return out
}
