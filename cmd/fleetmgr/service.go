package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/service"
)

// serviceOpts are the flags every `fleetmgr service` verb shares.
type serviceOpts struct {
	kind    string
	envFile string
	jsonOut bool
}

// options resolves the flags into what package service acts on. The
// config must load: a service that cannot start would only crash-loop.
func (a *app) serviceOptions(o *serviceOpts, needSpec bool) (service.Options, error) {
	kind := service.DefaultKind()
	if o.kind != "" {
		k, err := service.ParseKind(o.kind)
		if err != nil {
			return service.Options{}, &exitError{code: 2, err: err}
		}
		kind = k
	}
	path, err := service.DefinitionPath(kind, os.Getenv)
	if err != nil {
		return service.Options{}, err
	}
	opts := service.Options{Kind: kind, Path: path, UID: os.Getuid()}
	envFile := o.envFile
	if envFile == "" {
		if envFile, err = service.EnvFilePath(os.Getenv); err != nil {
			return service.Options{}, err
		}
	}
	if envFile, err = filepath.Abs(envFile); err != nil {
		return service.Options{}, err
	}
	if !needSpec {
		opts.Spec.EnvFile = envFile
		return opts, nil
	}
	cfg, err := a.load()
	if err != nil {
		return service.Options{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return service.Options{}, err
	}
	if opts.Spec, err = service.NewSpec(exe, cfg.Path, envFile, os.Getenv); err != nil {
		return service.Options{}, &exitError{code: 2, err: err}
	}
	return opts, nil
}

func (a *app) serviceCmd() *cobra.Command {
	var o serviceOpts
	cmd := &cobra.Command{
		Use:   "service install|uninstall|status",
		Short: "Have systemd (Linux) or launchd (macOS) run fleetmgr serve: at login, restarted on failure",
		Long: `Install fleetmgr serve as a service of your user's service manager: a systemd user unit
(~/.config/systemd/user/fleetmgr.service) on Linux, a launchd agent
(~/Library/LaunchAgents/` + service.Label + `.plist) on macOS. It runs this fleetmgr executable,
serve --config <this config's absolute path>, with PATH and XDG_* as they are now; it starts at
login and is restarted when it fails.

Stopping or restarting the service leaves the fleets running (systemd: KillMode=process, only
serve is signalled); the next serve adopts them.

The broker administrator's credentials (the variables [broker] admin_user_env and
admin_password_env name) go in a private environment file, never in the unit: by default
~/.config/fleetmgr/broker.env, created empty with mode 0600 by install, refused when group or
others can read it. One NAME=value per line.`,
	}
	cmd.PersistentFlags().StringVar(&o.kind, "manager", "", "service manager: systemd or launchd (default: launchd on macOS, else systemd)")
	cmd.PersistentFlags().StringVar(&o.envFile, "env-file", "", "the private file with serve's secrets (default ~/.config/fleetmgr/broker.env)")
	cmd.PersistentFlags().BoolVar(&o.jsonOut, "json", false, "print the result as JSON")

	var print bool
	install := &cobra.Command{
		Use:   "install [--print]",
		Short: "Write the service definition and start it (now and at every login)",
		Long: `Write the unit (or agent), create the environment file if missing, and start the service:
systemctl --user daemon-reload && systemctl --user enable --now fleetmgr.service (a changed unit
is restarted: fleets stay). Where systemctl --user does not answer (no user service manager),
the commands to run are printed instead. --print writes the definition to stdout and changes
nothing.`,
		Example: "  fleetmgr service install\n  fleetmgr service install --print\n  fleetmgr service install --print --manager launchd",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.serviceOptions(&o, true)
			if err != nil {
				return err
			}
			if print {
				def, err := service.Render(opts.Kind, opts.Spec)
				if err != nil {
					return err
				}
				_, err = a.stdout.Write(def)
				return err
			}
			res, err := service.Install(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return a.printServiceResult(&o, res, "installed")
		},
	}
	install.Flags().BoolVar(&print, "print", false, "write the definition to stdout; install nothing")

	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Stop and disable the service and remove its definition (fleets keep running; the environment file is kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.serviceOptions(&o, false)
			if err != nil {
				return err
			}
			res, err := service.Uninstall(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return a.printServiceResult(&o, res, "removed")
		},
	}

	status := &cobra.Command{
		Use:   "status",
		Short: "Say whether the service is installed, current, enabled and running, and whether its environment file is private",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.serviceOptions(&o, true)
			if err != nil {
				return err
			}
			st, err := service.Status(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if o.jsonOut {
				return a.printJSON(st)
			}
			if !st.Installed {
				fmt.Fprintf(a.stdout, "%s: not installed (fleetmgr service install)\n", st.Path)
			} else if st.Current {
				fmt.Fprintf(a.stdout, "%s: installed, current\n", st.Path)
			} else {
				fmt.Fprintf(a.stdout, "%s: installed, but not what install would write now (another executable, config or environment): run fleetmgr service install\n", st.Path)
			}
			if st.Enabled != "" || st.Active != "" {
				fmt.Fprintf(a.stdout, "enabled: %s, active: %s\n", orDash(st.Enabled), orDash(st.Active))
			}
			if st.Note != "" {
				fmt.Fprintln(a.stdout, st.Note)
			}
			if st.EnvFileProblem != "" {
				fmt.Fprintf(a.stdout, "environment file: %s\n", st.EnvFileProblem)
			} else {
				fmt.Fprintf(a.stdout, "environment file: %s (private)\n", st.EnvFile)
			}
			return nil
		},
	}
	cmd.AddCommand(install, uninstall, status)
	return cmd
}

func (a *app) printServiceResult(o *serviceOpts, res *service.Result, verb string) error {
	if o.jsonOut {
		return a.printJSON(res)
	}
	if res.Changed {
		fmt.Fprintf(a.stdout, "%s %s\n", verb, res.Path)
	} else if res.Note == "" {
		fmt.Fprintf(a.stdout, "%s is up to date\n", res.Path)
	}
	if res.EnvFileCreated {
		fmt.Fprintf(a.stdout, "created %s (mode 0600): put the broker administrator's variables there, one NAME=value per line\n", res.EnvFile)
	}
	for _, r := range res.Ran {
		fmt.Fprintf(a.stdout, "ran: %s\n", r)
	}
	if res.Note != "" {
		fmt.Fprintln(a.stdout, res.Note)
	}
	for _, t := range res.Todo {
		fmt.Fprintf(a.stdout, "  %s\n", t)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
