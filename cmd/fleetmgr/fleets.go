package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// actionOutcome is the --json result of start and stop, one per fleet.
type actionOutcome struct {
	Fleet string           `json:"fleet"`
	OK    bool             `json:"ok"`
	State lifecycle.Phase  `json:"state"`
	PID   int              `json:"pid,omitempty"`
	Port  int              `json:"port"`
	Error string           `json:"error,omitempty"`
	Steps []lifecycle.Step `json:"steps"`
}

func (a *app) fleetAction(cmd *cobra.Command, names []string, all bool, verb string,
	do func(*lifecycle.Manager, string, lifecycle.Options) (*lifecycle.State, error)) error {
	cfg, err := a.load()
	if err != nil {
		return err
	}
	if all && len(names) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("give fleet names or --all, not both (got %v and --all)", names)}
	}
	m := a.manager(cfg, a.logger(slog.LevelWarn))
	if all {
		names = cfg.Names()
		if verb == "stop" {
			names = m.Names() // also fleets removed from the file while they ran
		}
		if len(names) == 0 {
			// Nothing to do is not a failure (as `check` finds 0 fleets OK).
			fmt.Fprintf(a.stderr, "fleetmgr: no fleets are configured in %s; nothing to %s\n", cfg.Path, verb)
			if a.jsonOut {
				return a.printJSON([]actionOutcome{})
			}
			return nil
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("name a fleet to %s (or --all); configured: %v", verb, cfg.Names())
	}
	fleets := map[string]*registry.Fleet{}
	for _, n := range names {
		// A fleet the file defines, or one removed from it while it
		// runs (which only stop accepts: the Manager says so).
		f, err := m.Fleet(n)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		fleets[n] = f
	}
	if err := a.refuseInPane(cmd.Context(), cfg, verb); err != nil {
		return err
	}
	var outs []actionOutcome
	var errs []fleetError
	for i, n := range names {
		f := fleets[n]
		o := actionOutcome{Fleet: n, Port: f.Port, Steps: []lifecycle.Step{}}
		opt := lifecycle.Options{Progress: func(s lifecycle.Step) {
			o.Steps = append(o.Steps, s)
			if !a.jsonOut {
				fmt.Fprintf(a.stdout, "%s: %-14s %s (%.1fs)\n", n, s.Name, s.Detail, s.Elapsed.Seconds())
			}
		}}
		st, err := do(m, n, opt)
		if st != nil {
			o.State = st.Phase
			if st.Port != 0 {
				o.Port = st.Port
			}
			if st.Fleetd != nil {
				o.PID = st.Fleetd.PID
			}
		}
		if err != nil {
			if o.State == "" {
				// The daemon's error result carries no state: the fleet's
				// record says what the failure left.
				if ls, serr := m.State(n); serr == nil {
					o.State = ls.Shown.Phase
				}
			}
			o.Error = err.Error()
			errs = append(errs, fleetError{fleet: n, err: err})
			var du *daemonUnusable
			if errors.As(err, &du) {
				// A daemon that refuses this caller (or cannot be
				// reached) would for every fleet: the rest are not
				// tried, and fail with the same, single error.
				outs = append(outs, o)
				for _, rest := range names[i+1:] {
					outs = append(outs, actionOutcome{Fleet: rest, Port: fleets[rest].Port, Error: o.Error, Steps: []lifecycle.Step{}})
					errs = append(errs, fleetError{fleet: rest, err: err})
				}
				break
			}
		} else {
			o.OK = true
			if !a.jsonOut {
				fmt.Fprintf(a.stdout, "%s: %s\n", n, o.State)
			}
		}
		outs = append(outs, o)
	}
	if a.jsonOut {
		if err := a.printJSON(outs); err != nil {
			return err
		}
	}
	return joinFleetErrors(errs)
}

// fleetError is one fleet's failure in a verb run on several fleets.
type fleetError struct {
	fleet string
	err   error
}

// fleetErrors is the error of a verb run on several fleets: one line per
// distinct message, naming the fleets that failed with it ("a, b: …"), so
// a cause they share (a daemon refusing this caller, a state dir that
// cannot be written) is said once, not once per fleet.
type fleetErrors struct {
	lines []string
	errs  []error
}

func (e *fleetErrors) Error() string   { return strings.Join(e.lines, "\n") }
func (e *fleetErrors) Unwrap() []error { return e.errs }

// joinFleetErrors joins the failures of a verb run on fleets: nil for
// none, else a *fleetErrors whose lines name the fleets (so the one
// failure of a `stop --all` says whose it is). A message that already
// starts with "fleet NAME" is not prefixed again.
func joinFleetErrors(errs []fleetError) error {
	if len(errs) == 0 {
		return nil
	}
	out := &fleetErrors{}
	var order []string
	fleets := map[string][]string{} // message → fleets
	for _, e := range errs {
		msg := e.err.Error()
		if _, seen := fleets[msg]; !seen {
			order = append(order, msg)
		}
		fleets[msg] = append(fleets[msg], e.fleet)
		out.errs = append(out.errs, e.err)
	}
	for _, msg := range order {
		names := fleets[msg]
		if len(names) == 1 && (strings.HasPrefix(msg, "fleet "+names[0]+" ") || strings.HasPrefix(msg, "fleet "+names[0]+":")) {
			out.lines = append(out.lines, msg)
			continue
		}
		out.lines = append(out.lines, strings.Join(names, ", ")+": "+msg)
	}
	return out
}

func (a *app) startCmd() *cobra.Command {
	var all, lead bool
	cmd := &cobra.Command{
		Use:   "start [NAME…]",
		Short: "Start fleets: herdr session, then fleetd, waiting until /healthz names the fleet",
		Long: `Start each named fleet (or --all) in order: its herdr session (herdr --session S server,
detached), its rendered fleetd config, then fleetd in its own session with the contract
variables (FLEET_NAME, FLEET_PORT, …). Children get only the login basics of fleetmgr's
environment, pass_env and the fleet's env (never the broker administrator's variables;
'fleetmgr check' lists the names). Exits 0 once every fleet
answers GET /healthz with its own name; on failure nothing half-started is left running.
A fleet's lead (a paid agent session) is launched only with --lead or lead = true.`,
		Example: "  fleetmgr start kb\n  fleetmgr start --all --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.fleetAction(cmd, args, all, "start", a.verbVia(cmd.Context(), "start", lead, func(m *lifecycle.Manager, n string, o lifecycle.Options) (*lifecycle.State, error) {
				return m.Start(cmd.Context(), n, o)
			}))
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "start every configured fleet")
	cmd.Flags().BoolVar(&lead, "lead", false, "also launch the fleet's lead (lead_command in a tab labelled lead_tab)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print a machine-readable outcome")
	return cmd
}

func (a *app) stopCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "stop [NAME…]",
		Short: "Stop fleets: fleetd, then the herdr session and every pane process",
		Long: `Stop each named fleet (or --all): SIGTERM to fleetd's session, stop_grace, then SIGKILL;
then its herdr session (server.stop, then signals) and every process left in its panes.
The fleet's desired state becomes "stopped", so a running fleetmgr serve will not restart
it. Its broker vhost and queued messages are never deleted. A fleet removed from fleets.toml
while it ran (listed as "not in config") is stopped the same way, from what its last start
recorded.`,
		Example: "  fleetmgr stop kb\n  fleetmgr stop --all",
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.fleetAction(cmd, args, all, "stop", a.verbVia(cmd.Context(), "stop", false, func(m *lifecycle.Manager, n string, o lifecycle.Options) (*lifecycle.State, error) {
				return m.Stop(cmd.Context(), n, o)
			}))
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "stop every configured fleet, and every fleet removed from fleets.toml while it ran")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print a machine-readable outcome")
	return cmd
}

// listRow is one row of `fleetmgr list --json`.
type listRow struct {
	Name         string          `json:"name"`
	State        lifecycle.Phase `json:"state"`
	Desired      string          `json:"desired"`
	Port         int             `json:"port"`
	PID          int             `json:"pid,omitempty"`
	HerdrSession string          `json:"herdr_session"`
	// Vhost is the fleet's broker vhost; "" with no [broker] table.
	Vhost string `json:"vhost,omitempty"`
	// Broker is the management URL, or "no broker configured".
	Broker    string `json:"broker"`
	Project   string `json:"project"`
	Uptime    string `json:"uptime,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Supervision (issue #4): restarts by the supervisor, why the last one
	// happened, how fleetd last ended, and whether a crash loop stopped it.
	Restarts          int    `json:"restarts"`
	LastRestartReason string `json:"last_restart_reason,omitempty"`
	LastExit          string `json:"last_exit,omitempty"`
	CrashLoop         bool   `json:"crash_loop,omitempty"`
	// NotInConfig: the file no longer defines the fleet, removed while it
	// ran; `fleetmgr stop NAME` stops it, nothing restarts it.
	NotInConfig bool `json:"not_in_config,omitempty"`
	// RestartPending lists the fleets.toml keys whose values differ from
	// those the running fleet was started with; its next start applies
	// them.
	RestartPending []string `json:"restart_pending,omitempty"`
}

func (a *app) listCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Args:  cobra.NoArgs,
		Short: "List configured fleets and their states",
		Long: `List every fleet in fleets.toml with its state (running, stopped, failed, restarting, …),
port, fleetd pid and uptime, herdr session, broker vhost and project, from the state
fleetmgr records (no fleetd is called; 'fleetmgr status' asks the fleets what they are doing).
--json adds the supervisor's restart count, last restart reason, last exit and crash loop.

A fleet removed from fleets.toml while it runs stays listed, as "not in config" (not_in_config
in --json), until 'fleetmgr stop NAME' stops it. A running fleet whose settings in the file
changed since it started reads "restart pending" (restart_pending: the changed keys) until
its next start applies them ('fleetmgr restart NAME').`,
		Example: "  fleetmgr list\n  fleetmgr list --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				return err
			}
			m := a.manager(cfg, a.logger(slog.LevelWarn))
			rows := []listRow{}
			for _, n := range m.Names() { // the file's fleets, and those removed from it while they run
				f, err := m.Fleet(n)
				if err != nil {
					continue // stopped meanwhile
				}
				st, err := m.State(n)
				if err != nil {
					// One unreadable record must not hide every other
					// fleet: its row says why (red-team C4).
					st = &lifecycle.State{Shown: lifecycle.Shown{Phase: lifecycle.PhaseUnknown, LastError: err.Error()}}
				}
				r := listRow{Name: n, State: st.Shown.Phase, Desired: string(st.Desired), Port: f.Port, HerdrSession: f.HerdrSession, Project: f.Project, LastError: st.Shown.LastError}
				r.Vhost, r.Broker = brokerColumns(cfg, f)
				r.Restarts, r.LastRestartReason, r.LastExit, r.CrashLoop = st.Restarts, st.LastRestartReason, st.LastExit, st.CrashLoop
				r.NotInConfig, r.RestartPending = st.Shown.NotInConfig, st.Shown.RestartPending
				if st.Shown.Phase == lifecycle.PhaseRunning && st.Fleetd != nil {
					r.PID = st.Fleetd.PID
					if st.Port != 0 {
						r.Port = st.Port // where it runs, until a restart applies a changed port
					}
					if !st.StartedAt.IsZero() {
						// A clock set back would make it negative: never below 0.
						r.Uptime = max(0, time.Since(st.StartedAt).Truncate(time.Second)).String()
					}
				}
				rows = append(rows, r)
			}
			if a.jsonOut {
				return a.printJSON(rows)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tPORT\tPID\tUPTIME\tHERDR SESSION\tVHOST\tPROJECT")
			for _, r := range rows {
				pid := "-"
				if r.PID != 0 {
					pid = fmt.Sprint(r.PID)
				}
				up := r.Uptime
				if up == "" {
					up = "-"
				}
				vhost := r.Vhost
				if vhost == "" {
					vhost = "(" + r.Broker + ")"
				}
				state := string(r.State)
				switch {
				case r.NotInConfig:
					state += " (not in config)"
				case len(r.RestartPending) > 0:
					state += " (restart pending)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Name, state, r.Port, pid, up, r.HerdrSession, vhost, r.Project)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, r := range rows {
				switch {
				case r.NotInConfig:
					fmt.Fprintf(a.stdout, "%s: no longer in %s; `fleetmgr stop %s` stops it (nothing restarts it)\n", r.Name, cfg.Path, r.Name)
				case len(r.RestartPending) > 0:
					fmt.Fprintf(a.stdout, "%s: restart pending (%s changed in %s); `fleetmgr restart %s` applies it\n", r.Name, strings.Join(r.RestartPending, ", "), cfg.Path, r.Name)
				}
			}
			for _, r := range rows {
				if r.State == lifecycle.PhaseUnknown {
					fmt.Fprintf(a.stderr, "fleetmgr: fleet %s: %s\n", r.Name, r.LastError)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}
