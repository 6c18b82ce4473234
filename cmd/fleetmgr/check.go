package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Severities of a check finding.
const (
	sevOK    = "ok"
	sevInfo  = "info"
	sevWarn  = "warning"
	sevError = "error"
)

// finding is one result of `fleetmgr check`: what was checked, how it
// went, and what to do about it.
type finding struct {
	// Check is the group: "config", "broker", "herdr", "vhost", …
	Check string `json:"check"`
	// Severity is ok, info, warning or error; any error makes the exit
	// status non-zero.
	Severity string `json:"severity"`
	// Subject is what the finding is about: "file:line", a URL, a fleet.
	Subject string `json:"subject,omitempty"`
	// Message says what was found.
	Message string `json:"message"`
	// Fix says what to do; empty when nothing needs doing.
	Fix string `json:"fix,omitempty"`
	// Env is, for check "env", what the fleet's processes get: names and
	// sources, never values.
	Env *lifecycle.EnvPlan `json:"env,omitempty"`
	// Herdr is, for the herdr version findings, the version and protocol
	// read and fleetmgr's verdict on them.
	Herdr *herdr.Compat `json:"herdr,omitempty"`
}

// checkReport is `fleetmgr check --json`'s output.
type checkReport struct {
	// OK is false when any finding is an error.
	OK bool `json:"ok"`
	// Config is the file checked.
	Config string `json:"config"`
	// Findings in the order the checks ran.
	Findings []finding `json:"findings"`
	// Broker is which broker answers and what it supports; absent without
	// [broker] or when its management API did not answer.
	Broker *brokerReport `json:"broker,omitempty"`
}

// checkEnv is what every check of a loaded configuration gets.
type checkEnv struct {
	cfg *registry.Config
	m   *lifecycle.Manager
	// broker is set by checkBroker when the management API answered.
	broker *brokerReport
}

// checker is one group of checks run on a configuration that loaded.
// New checks (e.g. schema drift between fleets' catalogues) go in
// checkers below; each returns its findings and never exits.
type checker struct {
	name string
	run  func(ctx context.Context, e *checkEnv) []finding
}

// checkers are the checks `fleetmgr check` runs after the config loaded,
// in order.
func checkers() []checker {
	return []checker{
		{"broker", checkBroker},
		{"herdr", checkHerdr},
		{"herdr version", checkHerdrVersions},
		{"fleet", checkFleets},
		{"env", checkEnvNames},
		{"catalogue", checkDrift},
	}
}

func (a *app) checkCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Args:  cobra.NoArgs,
		Short: "Validate fleets.toml and reach the broker and the herdr binary",
		Long: `Check the installation without starting anything: fleets.toml loads (every problem with
its file:line, including fleets sharing a port, herdr session, vhost, broker user or worktree
root); the broker's management API and AMQP port answer with the admin credentials (from the
environment variables [broker] admin_user_env / admin_password_env name), naming the broker
(RabbitMQ or LavinMQ) and its version and any capability fleetmgr uses that it lacks, with what
fleetmgr does instead; each fleet's vhost exists or will be created; herdr_bin runs, and which
herdr version and protocol it and each running fleet session are (a protocol fleetmgr is not
tested with is a warning); per fleet, the NAMES (never values) of the environment variables its
processes will get and from where (allowlist, pass_env, env, contract). Each finding says what
to do. Exit status 1 when any finding is an error.`,
		Example: "  fleetmgr check\n  fleetmgr check --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := a.runChecks(cmd.Context())
			if a.jsonOut {
				if err := a.printJSON(rep); err != nil {
					return err
				}
			} else {
				a.printFindings(rep)
			}
			if !rep.OK {
				n := 0
				for _, f := range rep.Findings {
					if f.Severity == sevError {
						n++
					}
				}
				return &exitError{code: 1, err: fmt.Errorf("check: %d error(s) in %s", n, rep.Config)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the findings as JSON")
	return cmd
}

// runChecks loads the config (reporting each load problem), then runs
// every checker.
func (a *app) runChecks(ctx context.Context) checkReport {
	path := a.configPath
	if path == "" {
		path = registry.DefaultPath(os.Getenv)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the same path in the text and in --json
	}
	rep := checkReport{Config: path, Findings: []finding{}}
	cfg, err := registry.Load(path)
	if err != nil {
		rep.Findings = append(rep.Findings, configFindings(path, err)...)
		rep.Findings = append(rep.Findings, finding{Check: "config", Severity: sevInfo, Subject: path,
			Message: "the other checks need a configuration that loads; they were skipped"})
	} else {
		rep.Findings = append(rep.Findings, finding{Check: "config", Severity: sevOK, Subject: cfg.Path,
			Message: fmt.Sprintf("loads: %d fleet(s) %s", len(cfg.Fleets), strings.Join(cfg.Names(), ", "))})
		e := &checkEnv{cfg: cfg, m: a.manager(cfg, a.logger(slog.LevelError))}
		for _, c := range checkers() {
			rep.Findings = append(rep.Findings, c.run(ctx, e)...)
		}
		rep.Broker = e.broker
	}
	rep.OK = true
	for _, f := range rep.Findings {
		if f.Severity == sevError {
			rep.OK = false
		}
	}
	return rep
}

// configFindings turns a Load error into one finding per problem.
func configFindings(path string, err error) []finding {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []finding
	for _, e := range errs {
		var re *registry.Error
		if errors.As(e, &re) {
			subj := re.File
			if re.Line > 0 {
				subj = fmt.Sprintf("%s:%d", re.File, re.Line)
			}
			msg := re.Msg
			if re.Field != "" {
				msg = re.Field + ": " + re.Msg
			}
			out = append(out, finding{Check: "config", Severity: sevError, Subject: subj, Message: msg,
				Fix: "edit " + subj + " (fleets.example.toml documents every key)"})
			continue
		}
		out = append(out, finding{Check: "config", Severity: sevError, Subject: path, Message: e.Error(),
			Fix: "create it from fleets.example.toml, or name another file with --config"})
	}
	return out
}

// checkBroker reaches the management API and the AMQP port with the admin
// credentials, and looks up each fleet's vhost.
func checkBroker(ctx context.Context, e *checkEnv) []finding {
	b := e.cfg.Broker
	if b == nil {
		return []finding{{Check: "broker", Severity: sevInfo, Subject: e.cfg.Path,
			Message: "no broker configured: fleets start without a vhost and fleetd gets an empty broker URI",
			Fix:     "add a [broker] table (see fleets.example.toml) to give each fleet its own vhost"}}
	}
	var out []finding
	admin, err := e.m.BrokerAdmin()
	if err != nil {
		return append(out, finding{Check: "broker", Severity: sevError, Subject: e.cfg.Path, Message: err.Error(),
			Fix: fmt.Sprintf("export %s and %s with the broker administrator's user and password", b.AdminUserEnv, b.AdminPasswordEnv)})
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	mgmtOK := false
	if caps, err := admin.Capabilities(cctx); err != nil {
		fix := "start the broker, or correct [broker] management_url; RabbitMQ needs its management plugin enabled (rabbitmq-plugins enable rabbitmq_management), LavinMQ has it built in"
		if broker.IsAuth(err) {
			fix = fmt.Sprintf("set %s / %s to an administrator of this broker", b.AdminUserEnv, b.AdminPasswordEnv)
		}
		out = append(out, finding{Check: "broker", Severity: sevError, Subject: b.ManagementURL, Message: err.Error(), Fix: fix})
	} else {
		mgmtOK = true
		e.broker = newBrokerReport(b.ManagementURL, caps)
		out = append(out, brokerFindings(b.ManagementURL, e.broker)...)
	}
	out = append(out, checkAMQP(cctx, b))
	if !mgmtOK {
		return out
	}
	for _, n := range e.cfg.Names() {
		f := e.cfg.Fleets[n]
		ok, err := admin.VhostExists(cctx, f.Vhost)
		switch {
		case err != nil:
			out = append(out, finding{Check: "vhost", Severity: sevError, Subject: n, Message: err.Error()})
		case ok:
			out = append(out, finding{Check: "vhost", Severity: sevOK, Subject: n,
				Message: fmt.Sprintf("vhost %q exists", f.Vhost)})
		default:
			out = append(out, finding{Check: "vhost", Severity: sevInfo, Subject: n,
				Message: fmt.Sprintf("vhost %q does not exist yet", f.Vhost),
				Fix:     fmt.Sprintf("`fleetmgr start %s` creates it with user %q", n, f.BrokerUser)})
		}
	}
	return out
}

// checkAMQP opens an AMQP connection to the default vhost with the admin
// credentials. A refusal of that vhost alone (530 NOT_ALLOWED) still
// proves the port answers and the login works.
func checkAMQP(ctx context.Context, b *registry.Broker) finding {
	f := finding{Check: "broker", Subject: b.AMQPURL}
	uri, err := broker.VhostURI(b.AMQPURL, os.Getenv(b.AdminUserEnv), os.Getenv(b.AdminPasswordEnv), "/")
	if err != nil {
		f.Severity, f.Message = sevError, err.Error()
		return f
	}
	conn, err := broker.Dial(ctx, uri)
	switch {
	case err == nil:
		conn.Close()
		f.Severity, f.Message = sevOK, "AMQP answers and accepts the admin credentials"
	case broker.IsAccessRefused(err) && strings.Contains(err.Error(), "NOT_ALLOWED"):
		f.Severity, f.Message = sevOK, "AMQP answers and accepts the admin credentials (the admin has no access to vhost \"/\", which fleetmgr does not need)"
	case broker.IsAccessRefused(err):
		f.Severity, f.Message = sevError, err.Error()
		f.Fix = fmt.Sprintf("set %s / %s to a user the broker accepts over AMQP", b.AdminUserEnv, b.AdminPasswordEnv)
	default:
		f.Severity, f.Message = sevError, err.Error()
		f.Fix = "start the broker, or correct [broker] amqp_url (amqp://host:port)"
	}
	return f
}

// checkHerdr checks that herdr_bin resolves and runs `--help`.
func checkHerdr(ctx context.Context, e *checkEnv) []finding {
	bin := e.cfg.Manager.HerdrBin
	path, err := exec.LookPath(bin)
	if err != nil {
		return []finding{{Check: "herdr", Severity: sevError, Subject: bin, Message: err.Error(),
			Fix: "install herdr, or set [manager] herdr_bin to its path"}}
	}
	// `session list --json` only reads: real herdr and the stand-in both
	// answer it with {"sessions":[…]}; anything else is not herdr.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, path, "session", "list", "--json")
	cmd.Env = herdr.ScrubEnv(os.Environ())
	out, err := cmd.Output()
	var list struct {
		Sessions []herdr.SessionInfo `json:"sessions"`
	}
	if err != nil || json.Unmarshal(out, &list) != nil || list.Sessions == nil {
		why := "its output is not herdr's session list"
		if cctx.Err() != nil {
			why = "it did not answer within 5 s"
		} else if err != nil {
			why = err.Error()
		}
		return []finding{{Check: "herdr", Severity: sevError, Subject: path,
			Message: fmt.Sprintf("`%s session list --json` failed: %s: %s", path, why, firstLine(out)),
			Fix:     "set [manager] herdr_bin to the herdr executable"}}
	}
	running := 0
	for _, s := range list.Sessions {
		if s.Running {
			running++
		}
	}
	return []finding{{Check: "herdr", Severity: sevOK, Subject: path,
		Message: fmt.Sprintf("answers like herdr (%d session(s), %d running)", len(list.Sessions), running)}}
}

// checkFleets looks at what each fleet's start needs on disk: the project
// directory and the command's executable.
func checkFleets(_ context.Context, e *checkEnv) []finding {
	var out []finding
	for _, n := range e.cfg.Names() {
		f, _ := e.cfg.Fleet(n)
		where := fmt.Sprintf("%s:%d", e.cfg.Path, f.Line)
		before := len(out)
		if fi, err := os.Stat(f.Project); err != nil || !fi.IsDir() {
			msg := "project " + f.Project + " is not a directory"
			if err != nil {
				msg = "project: " + err.Error()
			}
			out = append(out, finding{Check: "fleet", Severity: sevError, Subject: where, Message: fmt.Sprintf("fleet %s: %s", n, msg),
				Fix: "create the directory, or correct project in [fleets." + n + "]"})
		}
		if len(f.Command) > 0 && !strings.Contains(f.Command[0], "{{") {
			if _, err := exec.LookPath(f.Command[0]); err != nil {
				out = append(out, finding{Check: "fleet", Severity: sevError, Subject: where, Message: fmt.Sprintf("fleet %s: command %s: %v", n, f.Command[0], err),
					Fix: "install fleetd, or correct command in [fleets." + n + "]"})
			}
		}
		if len(out) == before {
			out = append(out, finding{Check: "fleet", Severity: sevOK, Subject: where, Message: fmt.Sprintf("fleet %s: project and command found", n)})
		}
	}
	return out
}

// firstLine returns the first line of b, at most 200 bytes.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// printFindings writes the report for a person: one block per finding.
func (a *app) printFindings(rep checkReport) {
	for _, f := range rep.Findings {
		subj := ""
		if f.Subject != "" {
			subj = f.Subject + ": "
		}
		fmt.Fprintf(a.stdout, "%-7s %-6s %s%s\n", strings.ToUpper(f.Severity), f.Check, subj, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(a.stdout, "%-7s %-6s → %s\n", "", "", f.Fix)
		}
	}
	if rep.OK {
		fmt.Fprintln(a.stdout, "check: no errors")
	}
}
