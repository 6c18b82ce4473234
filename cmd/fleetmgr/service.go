package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/service"
)

// ServiceOptions are `fleetmgr service install|uninstall|status`'s.
type ServiceOptions struct {
	f       *cmdutil.Factory
	Action  string // install, uninstall or status
	Kind    string // --manager: systemd or launchd ("": this system's)
	EnvFile string
	Print   bool // install only
	JSON    bool
}

// servicePrint is `service install --print --json`'s output: the
// definition that would be written, and where.
type servicePrint struct {
	Kind    service.Kind `json:"kind"`
	Path    string       `json:"path"`
	Printed string       `json:"printed"`
}

// NewCmdService is `fleetmgr service` (package service).
func NewCmdService(f *cmdutil.Factory, runF func(*ServiceOptions) error) *cobra.Command {
	opts := &ServiceOptions{f: f}
	cmd := &cobra.Command{
		Use:   "service install|uninstall|status",
		Short: "Have systemd (Linux) or launchd (macOS) run fleetmgr serve: at login, restarted on failure",
		Long:  help("service"),
	}
	cmd.PersistentFlags().StringVar(&opts.Kind, "manager", "", "service manager: systemd or launchd (default: launchd on macOS, else systemd)")
	cmd.PersistentFlags().StringVar(&opts.EnvFile, "env-file", "", "the private file with serve's secrets (default ~/.config/fleetmgr/broker.env)")
	cmd.PersistentFlags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	sub := func(c *cobra.Command) *cobra.Command {
		c.Args = cobra.NoArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error {
			opts.Action = c.Name()
			return cmdutil.Run(cmd, f, opts, runF, runService)
		}
		cmd.AddCommand(c)
		return c
	}
	install := sub(&cobra.Command{
		Use:     "install [--print]",
		Short:   "Write the service definition and start it (now and at every login)",
		Long:    help("service-install"),
		Example: "  fleetmgr service install\n  fleetmgr service install --print\n  fleetmgr service install --print --manager launchd",
	})
	install.Flags().BoolVar(&opts.Print, "print", false, "write the definition to stdout; install nothing")
	sub(&cobra.Command{Use: "uninstall", Short: "Stop and disable the service and remove its definition (fleets keep running; the environment file is kept)"})
	sub(&cobra.Command{Use: "status", Short: "Say whether the service is installed, current, enabled and running, and whether its environment file is private"})
	return cmd
}

// resolve turns the flags into what package service acts on
// (service.Resolve). Install and status need the config to load: a
// service that cannot start would only crash-loop.
func (o *ServiceOptions) resolve() (service.Options, error) {
	fl := service.Flags{Kind: o.Kind, EnvFile: o.EnvFile}
	if o.Action != "uninstall" {
		cfg, err := o.f.Config()
		if err != nil {
			return service.Options{}, err
		}
		fl.Config = cfg.Path
	}
	return service.Resolve(fl)
}

func runService(ctx context.Context, o *ServiceOptions, ios *iostreams.IOStreams) error {
	opts, err := o.resolve()
	if err != nil {
		return err
	}
	switch {
	case o.Action == "status":
		st, err := service.Status(ctx, opts)
		if err != nil {
			return err
		}
		serveRuns := false
		if cfg, cerr := o.f.ConfigInForce(); cerr == nil {
			serveRuns = serveapi.ServePID(cfg.Manager.StateDir) > 0
		}
		if err := cmdutil.PrintResult(ios, o.JSON, st, st.Lines(), nil); err != nil {
			return err
		}
		switch code := st.ExitStatus(serveRuns); code {
		case service.StatusNotInstalled:
			return &cmdutil.ExitError{Code: code, Err: errors.New("the service is not installed")}
		case service.StatusNotRunning:
			return &cmdutil.ExitError{Code: code, Err: errors.New("the service is not running")}
		}
		return nil
	case o.Print:
		def, err := service.Render(opts.Kind, opts.Spec)
		if err != nil {
			return err
		}
		if o.JSON { // stdout holds JSON only, as with every --json
			return cmdutil.PrintJSON(ios.Out, servicePrint{Kind: opts.Kind, Path: opts.Path, Printed: string(def)})
		}
		_, err = ios.Out.Write(def)
		return err
	}
	do, done := service.Install, "installed"
	if o.Action == "uninstall" {
		do, done = service.Uninstall, "removed"
	}
	// Each systemctl/launchctl command is a wait of its own, named with
	// its bound (issue 24 item 6): a user manager that does not answer
	// keeps one waiting up to service.ExecTimeout.
	w := cmdutil.Wait(ios, "the service definition to be written", 0)
	run := opts.Run
	if run == nil {
		run = service.ExecRunner
	}
	opts.Run = func(ctx context.Context, name string, args ...string) (string, error) {
		w.Set(fmt.Sprintf("%s to answer", strings.Join(append([]string{name}, args...), " ")), service.ExecTimeout, true)
		return run(ctx, name, args...)
	}
	res, err := do(ctx, opts)
	w.Done()
	if err != nil {
		return err
	}
	if err := cmdutil.PrintResult(ios, o.JSON, res, res.Lines(done), nil); err != nil {
		return err
	}
	if len(res.Todo) > 0 { // the service manager did not answer: written, not enabled
		return &cmdutil.ExitError{Code: 1, Err: fmt.Errorf("the unit is %s, but the service manager could not be told: run the commands above", done)}
	}
	return nil
}
