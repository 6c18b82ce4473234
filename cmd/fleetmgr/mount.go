package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/mount"
)

func (a *app) mountCmd() *cobra.Command {
	var stdio, print, jsonOut bool
	var scope, name string
	cmd := &cobra.Command{
		Use:   "mount claude|opencode [--stdio] [--scope user|project] [--print]",
		Short: "Add this fleetmgr to Claude Code's or OpenCode's MCP servers",
		Long: `Configure an MCP client to use this fleetmgr, under the name fleets:

  claude    runs Claude Code's own 'claude mcp add' (an existing entry of that name in that
            scope is replaced); --scope user (default) is every project, project is ./.mcp.json
  opencode  merges an "mcp" entry into opencode.json (user: ~/.config/opencode/, project: the
            current directory; opencode.jsonc when only that exists), keeping every other key
            and comment

By default the mount is streamable HTTP to [manager] listen (start fleetmgr serve, or fleetmgr
service install, first); --stdio mounts the command 'fleetmgr --config CONFIG mcp' instead,
which bridges to the daemon's unix socket and starts one if none runs. --print shows the command
or the file and changes nothing.

Refused inside a herdr pane: a fleet member must never mount the manager (fleetd issue #160).`,
		Example:   "  fleetmgr mount claude\n  fleetmgr mount claude --stdio --scope project\n  fleetmgr mount opencode --print",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"claude", "opencode"},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				return err
			}
			if d := a.selfInPane(cmd.Context(), cfg, a.manager(cfg, a.logger(slog.LevelError))); !d.Allowed {
				return &exitError{code: 3, err: fmt.Errorf("refusing to mount fleetmgr from inside a herdr pane (rule %s: %s).\n"+
					"A fleet member must never mount the manager (fleetd issue #160): fleetd trusts fleetmgr as primary on every fleet. Run this from the operator's own terminal", d.Rule, d.Reason)}
			}
			o := mount.Options{Client: mount.Client(args[0]), Scope: mount.Scope(scope), Name: name, Print: print}
			if stdio {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.Command = []string{exe, "--config", cfg.Path, "mcp"}
			} else {
				host, port, err := net.SplitHostPort(cfg.Manager.Listen)
				if err != nil {
					return err
				}
				if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
					host = "127.0.0.1"
				}
				o.URL = "http://" + net.JoinHostPort(host, port) + "/mcp"
			}
			res, err := mount.Mount(cmd.Context(), o)
			if err != nil {
				return err
			}
			switch {
			case jsonOut:
				return a.printJSON(res)
			case print:
				fmt.Fprintln(a.stdout, res.Printed)
			default:
				for _, r := range res.Ran {
					fmt.Fprintf(a.stdout, "ran: %s\n", r)
				}
				if res.Path != "" {
					fmt.Fprintf(a.stdout, "wrote %s\n", res.Path)
				}
				what := "mounted"
				if res.Replaced {
					what = "mounted (replacing the entry of that name)"
				}
				target := o.URL
				if stdio {
					target = mount.ShellJoin(o.Command)
				}
				fmt.Fprintf(a.stdout, "%s %s in %s (%s scope): %s\n", what, orDefault(name, mount.DefaultName), args[0], scope, target)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&stdio, "stdio", false, "mount the command 'fleetmgr mcp' (stdio) instead of the HTTP endpoint")
	cmd.Flags().StringVar(&scope, "scope", "user", "user (every project) or project (the current directory)")
	cmd.Flags().BoolVar(&print, "print", false, "print the command (claude) or the resulting file (opencode); change nothing")
	cmd.Flags().StringVar(&name, "name", mount.DefaultName, "the server's name in the client")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
