package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/setup"
)

// The verbs that write fleets.toml: init, add, remove. The work is in
// package setup; these only parse flags and print.

// configFile is the fleets.toml the command reads: --config, else the
// first of registry.DefaultPath's places.
func (a *app) configFile() string {
	if a.configPath != "" {
		return a.configPath
	}
	return registry.DefaultPath(os.Getenv)
}

// commandAfterDash returns the arguments after "--" (fleetd's argv) and
// the ones before it.
func commandAfterDash(cmd *cobra.Command, args []string) (before, command []string) {
	if at := cmd.ArgsLenAtDash(); at >= 0 {
		return args[:at], args[at:]
	}
	return args, nil
}

func (a *app) initCmd() *cobra.Command {
	var fo setup.FleetOptions
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "init [--project DIR [--name NAME] [--port N] [--lead] [-- COMMAND...]]",
		Short: "Write a commented fleets.toml (never over an existing one), with a first fleet if asked",
		Long: `Write fleets.toml with every setting commented out at its default, at
$XDG_CONFIG_HOME/fleetmgr/fleets.toml (else ~/.config/fleetmgr/fleets.toml), or at --config.
An existing file is never overwritten. With --project, a first fleet is added: named after the
project directory (lower-cased, other characters turned into '-') unless --name is given,
running COMMAND (default: fleetd --config {{.ConfigPath}}). The file written is validated as
every command loads it.`,
		Example: "  fleetmgr init\n  fleetmgr init --project ~/src/kb\n  fleetmgr init --project . --name kb -- fleetd --config '{{.ConfigPath}}' --verbose",
		RunE: func(cmd *cobra.Command, args []string) error {
			before, command := commandAfterDash(cmd, args)
			if len(before) > 0 {
				return &exitError{code: 2, err: fmt.Errorf("unexpected arguments %q: fleetd's command goes after --", before)}
			}
			opts := setup.InitOptions{Path: a.configPath}
			if fo.Project != "" {
				fo.Command = command
				opts.Fleet = &fo
			} else if fo.Name != "" || fo.Port != 0 || fo.Lead || len(command) > 0 {
				return &exitError{code: 2, err: errors.New("--name, --port, --lead and a command describe the first fleet: pass --project DIR too")}
			}
			res, err := setup.Init(cmd.Context(), opts)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if jsonOut {
				return a.printJSON(map[string]any{"config": res.Config.Path, "fleet": fleetJSON(res.Fleet), "shadowed_by": res.Shadowed})
			}
			fmt.Fprintf(a.stdout, "wrote %s\n", res.Config.Path)
			if res.Fleet != nil {
				fmt.Fprintf(a.stdout, "fleet %s: project %s\n", res.Fleet.Name, res.Fleet.Project)
			}
			if res.Shadowed != "" {
				fmt.Fprintf(a.stdout, "note: %s in this directory is read first by fleetmgr run from here\n", res.Shadowed)
			}
			fmt.Fprintln(a.stdout, "next: fleetmgr add NAME --project DIR; fleetmgr check; fleetmgr service install")
			return nil
		},
	}
	fleetFlags(cmd, &fo, true)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print what was written as JSON")
	return cmd
}

// fleetFlags binds the flags describing a fleet.
func fleetFlags(cmd *cobra.Command, fo *setup.FleetOptions, withName bool) {
	cmd.Flags().StringVar(&fo.Project, "project", "", "the fleet's project directory (must exist)")
	if withName {
		cmd.Flags().StringVar(&fo.Name, "name", "", "the fleet's name (default: from the project directory's name)")
	}
	cmd.Flags().IntVar(&fo.Port, "port", 0, "fleetd's fixed port (default: allocated from [manager] port_range)")
	cmd.Flags().BoolVar(&fo.Lead, "lead", false, "launch the fleet's lead once fleetd is healthy (lead = true)")
}

func fleetJSON(f *registry.Fleet) any {
	if f == nil {
		return nil
	}
	return map[string]any{"name": f.Name, "project": f.Project, "command": f.Command, "port": f.Port, "lead": f.Lead}
}

func (a *app) addCmd() *cobra.Command {
	var fo setup.FleetOptions
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "add NAME --project DIR [--port N] [--lead] [-- COMMAND...]",
		Short: "Add a fleet to fleets.toml (appended; the rest of the file kept byte for byte)",
		Long: `Append a [fleets.NAME] table to fleets.toml. Every other byte of the file is kept, comments
included; values are quoted as TOML requires. The result is validated as every command loads
it (problems are named with file:line) and replaces the file atomically; on any error the file
is left as it was. Without COMMAND the fleet runs: fleetd --config {{.ConfigPath}}.

A running fleetmgr serve is then asked to re-read the file.`,
		Example: "  fleetmgr add docs --project ~/src/docs\n  fleetmgr add kb --project . --port 8770 --lead -- fleetd --name '{{.Name}}' --port '{{.Port}}'",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			before, command := commandAfterDash(cmd, args)
			if len(before) != 1 {
				return &exitError{code: 2, err: fmt.Errorf("add takes one NAME before --, got %q", before)}
			}
			if _, err := os.Stat(a.configFile()); errors.Is(err, fs.ErrNotExist) {
				return &exitError{code: 2, err: fmt.Errorf("%s does not exist: create it with `fleetmgr init` (add --project DIR there to add a first fleet)", a.configFile())}
			}
			cfg, err := a.load()
			if err != nil {
				return err
			}
			if err := a.refuseInPane(cmd.Context(), cfg, "add"); err != nil {
				return err
			}
			fo.Name, fo.Command = before[0], command
			res, err := setup.Add(cmd.Context(), setup.AddOptions{Path: cfg.Path, Fleet: fo, Reload: a.reloadServe})
			if res == nil {
				return &exitError{code: 2, err: err}
			}
			if perr := res.Config.AllocatePorts(); perr == nil {
				res.Fleet = res.Config.Fleets[fo.Name]
			}
			if jsonOut {
				if jerr := a.printJSON(map[string]any{"config": res.Config.Path, "fleet": fleetJSON(res.Fleet), "reload": res.Reload}); jerr != nil {
					return jerr
				}
			} else {
				fmt.Fprintf(a.stdout, "added fleet %s to %s (project %s, port %d)\n", res.Fleet.Name, res.Config.Path, res.Fleet.Project, res.Fleet.Port)
				if res.Reload != "" {
					fmt.Fprintln(a.stdout, res.Reload)
				}
				fmt.Fprintf(a.stdout, "start it: fleetmgr start %s\n", res.Fleet.Name)
			}
			return err
		},
	}
	fleetFlags(cmd, &fo, false)
	_ = cmd.MarkFlagRequired("project")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print what was written as JSON")
	return cmd
}

func (a *app) removeCmd() *cobra.Command {
	var opts setup.RemoveOptions
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "remove NAME [--purge [--yes-delete-messages] [--yes-delete-worktrees]]",
		Short: "Remove a stopped fleet from fleets.toml (and with --purge its state)",
		Long: `Remove fleet NAME's tables ([fleets.NAME] and any [fleets.NAME.*] sub-table) from fleets.toml,
each with the comment lines directly above its header; every other byte is kept. Refused while
the fleet is not stopped or is wanted running (fleetmgr stop NAME first), and for a fleet
written in a form that cannot be cut out line by line (an inline table, dotted keys outside
its own tables): the error names the line to edit by hand. The result is validated and
replaces the file atomically; on any error the file is left as it was.

--purge also deletes <state_dir>/fleets/NAME (state, logs, rendered config, broker password),
refusing when the default worktree root inside it holds worktrees unless --yes-delete-worktrees;
with --yes-delete-messages it deletes the fleet's broker vhost, every message queued in it, and
the fleet's broker user. A running fleetmgr serve is then asked to re-read the file.`,
		Example: "  fleetmgr remove docs\n  fleetmgr remove docs --purge\n  fleetmgr remove docs --purge --yes-delete-messages --yes-delete-worktrees",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				return err
			}
			if err := a.refuseInPane(cmd.Context(), cfg, "remove"); err != nil {
				return err
			}
			opts.Path, opts.Name, opts.Reload = cfg.Path, args[0], a.reloadServe
			opts.Manager = func(c *registry.Config) *lifecycle.Manager { return a.manager(c, a.logger(slog.LevelWarn)) }
			res, err := setup.Remove(cmd.Context(), opts)
			if res == nil {
				return &exitError{code: 2, err: err}
			}
			if jsonOut {
				if jerr := a.printJSON(map[string]any{"config": res.Config.Path, "removed": opts.Name, "purged": res.Purged,
					"vhost_deleted": res.Vhost, "broker_user_deleted": res.BrokerUser, "kept": res.Kept, "reload": res.Reload}); jerr != nil {
					return jerr
				}
				return err
			}
			fmt.Fprintf(a.stdout, "removed fleet %s from %s\n", opts.Name, res.Config.Path)
			if res.Purged != "" {
				fmt.Fprintf(a.stdout, "deleted %s\n", res.Purged)
			}
			if res.Vhost != "" {
				fmt.Fprintf(a.stdout, "deleted vhost %s (existed: %v) and broker user %s\n", res.Vhost, res.VhostExisted, res.BrokerUser)
			}
			for _, k := range res.Kept {
				fmt.Fprintf(a.stdout, "kept: %s\n", k)
			}
			if res.Reload != "" {
				fmt.Fprintln(a.stdout, res.Reload)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.Purge, "purge", false, "also delete the fleet's state directory")
	cmd.Flags().BoolVar(&opts.DeleteMessages, "yes-delete-messages", false, "with --purge: also delete the fleet's vhost (every message in it) and broker user")
	cmd.Flags().BoolVar(&opts.DeleteWorktrees, "yes-delete-worktrees", false, "with --purge: also delete worktrees under the state directory")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print what was done as JSON")
	return cmd
}

// reloadServe is add's and remove's setup.Reloader: it names the running
// daemon of cfg's state dir and the command that makes it re-read the
// file (`fleetmgr reload`, or SIGHUP to its pid, which serve takes as a
// reload). A daemon that reloads by itself on this call replaces it here.
func (a *app) reloadServe(_ context.Context, cfg *registry.Config) (string, error) {
	if daemonSocket(cfg) == "" {
		return "no fleetmgr serve runs for this state dir; the next one reads the file as it is now", nil
	}
	var info daemonInfo
	if b, err := os.ReadFile(daemonInfoPath(cfg)); err == nil {
		_ = json.Unmarshal(b, &info)
	}
	if _, err := procfs.ReadStat(info.PID); info.PID <= 0 || err != nil {
		return "no fleetmgr serve runs for this state dir; the next one reads the file as it is now", nil
	}
	return fmt.Sprintf("fleetmgr serve (pid %d) still has the file as it was: run `fleetmgr reload` to make it re-read it", info.PID), nil
}
