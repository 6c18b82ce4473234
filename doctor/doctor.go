// Package doctor is `fleetmgr check`: it checks an installation without
// starting anything and says, per finding, what to do. Run loads
// fleets.toml (each problem with its file:line), then runs the checkers in
// order (checkers): the broker's management API and AMQP port with the
// administrator's credentials, which broker it is and what it lacks, each
// fleet's vhost (broker.go); herdr_bin and the herdr version and protocol
// of it and of every running fleet session (herdr.go); each fleet's
// project directory and command; per fleet the names of the environment
// variables its processes get (env.go); schema drift and excluded or
// relaxed tools in the fleets' cached catalogues (drift.go); with
// [federation], the host id, key file, trust list and the broker's
// protections (federation.go). A new check
// is a function added to checkers. Render prints a Report for people;
// `fleetmgr check --json` prints it as JSON.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// Severities of a finding.
const (
	SevOK    = "ok"
	SevInfo  = "info"
	SevWarn  = "warning"
	SevError = "error"
)

// Finding is one result of `fleetmgr check`: what was checked, how it
// went, and what to do about it.
type Finding struct {
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

// Report is `fleetmgr check --json`'s output.
type Report struct {
	// OK is false when any finding is an error.
	OK bool `json:"ok"`
	// Config is the file checked.
	Config string `json:"config"`
	// Findings in the order the checks ran.
	Findings []Finding `json:"findings"`
	// Broker is which broker answers and what it supports; absent without
	// [broker] or when its management API did not answer.
	Broker *BrokerReport `json:"broker,omitempty"`
	// Federation is this host's identity, trust and broker protections;
	// absent without [federation].
	Federation *FederationReport `json:"federation,omitempty"`
}

// Errors counts the findings of severity error.
func (r *Report) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == SevError {
			n++
		}
	}
	return n
}

// Err is nil when r is OK, else an error counting its errors and naming
// the file checked ("check: 2 error(s) in /path/fleets.toml").
func (r *Report) Err() error {
	if r.OK {
		return nil
	}
	if r.Config == "" {
		return fmt.Errorf("check: %d error(s): no fleets.toml to check", r.Errors())
	}
	return fmt.Errorf("check: %d error(s) in %s", r.Errors(), r.Config)
}

// Options configure Run.
type Options struct {
	// Path is the fleets.toml to check ("" : registry.DefaultPath).
	Path string
	// Manager builds the lifecycle.Manager the checks read fleets'
	// state, environment plan and cached catalogues through.
	Manager func(*registry.Config) *lifecycle.Manager
	// Peers, when set, returns the running serve's federation view (nil:
	// none answers); check then says each peer's clock skew
	// (docs/FEDERATION.md "Clock skew").
	Peers func(ctx context.Context, cfg *registry.Config) *peerview.Federation
	// Sinks, when set, returns the running serve's failing notification
	// sinks (ok false: no serve answers); check names each with its last
	// error.
	Sinks func(ctx context.Context, cfg *registry.Config) (sinks []status.FailingSink, ok bool)
}

// checkEnv is what every check of a loaded configuration gets.
type checkEnv struct {
	cfg *registry.Config
	m   *lifecycle.Manager
	// broker is set by checkBroker when the management API answered.
	broker *BrokerReport
	// federation is set by checkFederation with [federation].
	federation *FederationReport
	// peers is Options.Peers.
	peers func(ctx context.Context, cfg *registry.Config) *peerview.Federation
	// sinks is Options.Sinks.
	sinks func(ctx context.Context, cfg *registry.Config) ([]status.FailingSink, bool)
}

// checker is one group of checks run on a configuration that loaded.
// New checks go in checkers below; each returns its findings and never
// exits.
type checker struct {
	name string
	run  func(ctx context.Context, e *checkEnv) []Finding
}

// checkers are the checks `fleetmgr check` runs after the config loaded,
// in order.
func checkers() []checker {
	return []checker{
		{"listen", checkListen},
		{"broker", checkBroker},
		{"federation", checkFederation},
		{"herdr", checkHerdr},
		{"herdr version", checkHerdrVersions},
		{"fleet", checkFleets},
		{"state", checkState},
		{"env", checkEnvNames},
		{"catalogue", checkDrift},
		{"notify", checkNotifySinks},
	}
}

// Run is `fleetmgr check`: it loads the config (each load problem a
// finding with its file:line), then runs every checker, in order, without
// starting anything. Report.OK is false when any finding is an error.
func Run(ctx context.Context, o Options) Report {
	path := o.Path
	if path == "" {
		path = registry.DefaultPath(os.Getenv)
	}
	if path == "" {
		return Report{Findings: []Finding{{Check: "config", Severity: SevError, Subject: "fleets.toml",
			Message: "no ./fleets.toml here, and neither $XDG_CONFIG_HOME nor $HOME is an absolute path",
			Fix:     "name the file with --config"}}}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the same path in the text and in --json
	}
	rep := Report{Config: path, Findings: []Finding{}}
	cfg, err := registry.Load(path)
	if err != nil {
		rep.Findings = append(rep.Findings, configFindings(path, err)...)
		rep.Findings = append(rep.Findings, Finding{Check: "config", Severity: SevInfo, Subject: path,
			Message: "the other checks need a configuration that loads; they were skipped"})
	} else {
		rep.Findings = append(rep.Findings, Finding{Check: "config", Severity: SevOK, Subject: cfg.Path,
			Message: fmt.Sprintf("loads: %d fleet(s) %s", len(cfg.Fleets), strings.Join(cfg.Names(), ", "))})
		e := &checkEnv{cfg: cfg, m: o.Manager(cfg), peers: o.Peers, sinks: o.Sinks}
		for _, c := range checkers() {
			rep.Findings = append(rep.Findings, c.run(ctx, e)...)
		}
		rep.Broker = e.broker
		rep.Federation = e.federation
	}
	rep.OK = true
	for _, f := range rep.Findings {
		if f.Severity == SevError {
			rep.OK = false
		}
	}
	return rep
}

// configFindings turns a Load error into one finding per problem.
func configFindings(path string, err error) []Finding {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []Finding
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
			out = append(out, Finding{Check: "config", Severity: SevError, Subject: subj, Message: msg,
				Fix: "edit " + subj + " (fleets.example.toml documents every key)"})
			continue
		}
		out = append(out, Finding{Check: "config", Severity: SevError, Subject: path, Message: e.Error(),
			Fix: "create it from fleets.example.toml, or name another file with --config"})
	}
	return out
}

// checkFleets looks at what each fleet's start needs on disk: the project
// directory and the command's executable.
func checkFleets(_ context.Context, e *checkEnv) []Finding {
	var out []Finding
	for _, n := range e.cfg.Names() {
		f, _ := e.cfg.Fleet(n)
		where := fmt.Sprintf("%s:%d", e.cfg.Path, f.Line)
		before := len(out)
		if fi, err := os.Stat(f.Project); err != nil || !fi.IsDir() {
			msg := "project " + f.Project + " is not a directory"
			if err != nil {
				msg = "project: " + err.Error()
			}
			out = append(out, Finding{Check: "fleet", Severity: SevError, Subject: where, Message: fmt.Sprintf("fleet %s: %s", n, msg),
				Fix: "create the directory, or correct project in [fleets." + n + "]"})
		}
		if len(f.Command) > 0 && !strings.Contains(f.Command[0], "{{") {
			if _, err := exec.LookPath(f.Command[0]); err != nil {
				out = append(out, Finding{Check: "fleet", Severity: SevError, Subject: where, Message: fmt.Sprintf("fleet %s: command %s: %v", n, f.Command[0], err),
					Fix: "install fleetd, or correct command in [fleets." + n + "]"})
			}
		}
		if len(out) == before {
			out = append(out, Finding{Check: "fleet", Severity: SevOK, Subject: where, Message: fmt.Sprintf("fleet %s: project and command found", n)})
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

// Render writes the report for a person: one block per finding, with its
// fix on the line below.
func Render(w io.Writer, rep Report) {
	for _, f := range rep.Findings {
		subj := ""
		if f.Subject != "" {
			subj = f.Subject + ": "
		}
		// Messages quote what fleets, herdr, the broker and other hosts
		// said (tool and property names of catalogues among them): escaped.
		fmt.Fprintf(w, "%-7s %-6s %s%s\n", strings.ToUpper(f.Severity), f.Check, termtext.Text(subj), termtext.Text(f.Message))
		if f.Fix != "" {
			fmt.Fprintf(w, "%-7s %-6s → %s\n", "", "", termtext.Text(f.Fix))
		}
	}
	if rep.OK {
		fmt.Fprintln(w, "check: no errors")
	}
}
