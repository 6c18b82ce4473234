package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/envfile"
)

// Runner runs a service manager's command (systemctl, launchctl) and
// returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) (string, error)

// ExecTimeout bounds one systemctl or launchctl command (ExecRunner).
const ExecTimeout = 30 * time.Second

// ExecRunner runs the command with os/exec, bounded to ExecTimeout.
func ExecRunner(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Options are what Install, Uninstall and Status act on.
type Options struct {
	// Kind is the service manager.
	Kind Kind
	// Spec is what the definition runs (Install and Status).
	Spec Spec
	// Path is where the definition goes (DefinitionPath).
	Path string
	// Run runs systemctl/launchctl; nil is ExecRunner.
	Run Runner
	// UID is the user whose launchd domain (gui/UID) the agent joins.
	UID int
}

func (o Options) run() Runner {
	if o.Run != nil {
		return o.Run
	}
	return ExecRunner
}

// Result is what Install or Uninstall did.
type Result struct {
	// Path is the definition's path.
	Path string `json:"path"`
	// Changed reports whether the definition was written (new or
	// different) or, for Uninstall, removed.
	Changed bool `json:"changed"`
	// EnvFile is the secrets file; EnvFileCreated reports whether Install
	// created it (empty, 0600).
	EnvFile        string `json:"env_file,omitempty"`
	EnvFileCreated bool   `json:"env_file_created,omitempty"`
	// Ran lists the service manager commands run, in order.
	Ran []string `json:"ran,omitempty"`
	// Todo lists commands for the operator to run, when the service
	// manager could not be reached; Note says why.
	Todo []string `json:"todo,omitempty"`
	Note string   `json:"note,omitempty"`
}

// Install writes the definition (atomically, mode 0644; a definition
// already as it should be is left alone), creates the secrets file empty
// and private when missing (and refuses one group or others can read),
// then has the service manager start it now and at every login:
//
//	systemd: systemctl --user daemon-reload; enable --now fleetmgr.service;
//	         try-restart when the unit changed (KillMode=process: fleets stay)
//	launchd: launchctl bootout gui/UID/LABEL (if loaded); bootstrap gui/UID PLIST
//
// When the service manager does not answer (no user systemd instance, as
// in a container), the commands are returned in Result.Todo instead.
func Install(ctx context.Context, o Options) (*Result, error) {
	def, err := Render(o.Kind, o.Spec)
	if err != nil {
		return nil, err
	}
	res := &Result{Path: o.Path, EnvFile: o.Spec.EnvFile}
	if res.EnvFileCreated, err = envfile.Ensure(o.Spec.EnvFile); err != nil {
		return nil, fmt.Errorf("environment file: %w", err)
	}
	if old, err := os.ReadFile(o.Path); err != nil || !bytes.Equal(old, def) {
		if err := writeAtomic(o.Path, def, 0o644); err != nil {
			return nil, err
		}
		res.Changed = true
	}
	run := o.run()
	switch o.Kind {
	case Systemd:
		steps := [][]string{{"systemctl", "--user", "daemon-reload"}, {"systemctl", "--user", "enable", "--now", UnitName}}
		if res.Changed {
			steps = append(steps, []string{"systemctl", "--user", "try-restart", UnitName})
		}
		return res, res.runSteps(ctx, run, steps, "systemctl --user")
	case Launchd:
		if o.Spec.Log != "" {
			_ = os.MkdirAll(filepath.Dir(o.Spec.Log), 0o755)
		}
		domain := "gui/" + strconv.Itoa(o.UID)
		if _, err := run(ctx, "launchctl", "print", domain+"/"+Label); err == nil {
			_, _ = run(ctx, "launchctl", "bootout", domain+"/"+Label)
			res.Ran = append(res.Ran, "launchctl bootout "+domain+"/"+Label)
		}
		return res, res.runSteps(ctx, run, [][]string{{"launchctl", "bootstrap", domain, o.Path}}, "launchctl")
	}
	return nil, fmt.Errorf("unknown service manager %q", o.Kind)
}

// runSteps runs each command in order. The first that fails stops the
// rest: when it is the first of all (the manager does not answer), every
// step becomes a Todo and nil is returned; a later failure is an error.
func (r *Result) runSteps(ctx context.Context, run Runner, steps [][]string, what string) error {
	for i, st := range steps {
		out, err := run(ctx, st[0], st[1:]...)
		if err != nil {
			if i == 0 {
				for _, s := range steps {
					r.Todo = append(r.Todo, strings.Join(s, " "))
				}
				r.Note = fmt.Sprintf("%s did not answer (%s); run these yourself where it does", what, oneLine(out, err))
				return nil
			}
			return fmt.Errorf("%s: %s", strings.Join(st, " "), oneLine(out, err))
		}
		r.Ran = append(r.Ran, strings.Join(st, " "))
	}
	return nil
}

func oneLine(out string, err error) string {
	if out = strings.TrimSpace(out); out != "" {
		if i := strings.IndexByte(out, '\n'); i > 0 {
			out = out[:i]
		}
		return out
	}
	if err == nil {
		return "no output"
	}
	return err.Error()
}

// Uninstall stops the service (fleets keep running: KillMode=process),
// disables it and removes the definition. Without a reachable service
// manager it removes the definition and, for systemd, the enablement link
// (default.target.wants/fleetmgr.service beside it) itself, and says that
// a serve it started may still run. The secrets file is kept.
func Uninstall(ctx context.Context, o Options) (*Result, error) {
	res := &Result{Path: o.Path}
	if _, err := os.Lstat(o.Path); errors.Is(err, fs.ErrNotExist) {
		res.Note = o.Path + " is not installed"
		return res, nil
	}
	run := o.run()
	reachable := true
	switch o.Kind {
	case Systemd:
		if out, err := run(ctx, "systemctl", "--user", "disable", "--now", UnitName); err != nil {
			reachable = false
			res.Note = fmt.Sprintf("systemctl --user did not answer (%s): a fleetmgr serve it started, if any, still runs", oneLine(out, err))
		} else {
			res.Ran = append(res.Ran, "systemctl --user disable --now "+UnitName)
		}
	case Launchd:
		domain := "gui/" + strconv.Itoa(o.UID)
		if out, err := run(ctx, "launchctl", "bootout", domain+"/"+Label); err != nil {
			res.Note = fmt.Sprintf("launchctl bootout: %s (not loaded?)", oneLine(out, err))
		} else {
			res.Ran = append(res.Ran, "launchctl bootout "+domain+"/"+Label)
		}
	default:
		return nil, fmt.Errorf("unknown service manager %q", o.Kind)
	}
	if err := os.Remove(o.Path); err != nil {
		return res, err
	}
	res.Changed = true
	if o.Kind == Systemd {
		if !reachable {
			link := filepath.Join(filepath.Dir(o.Path), "default.target.wants", UnitName)
			if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, err
			}
		} else if out, err := run(ctx, "systemctl", "--user", "daemon-reload"); err != nil {
			return res, fmt.Errorf("systemctl --user daemon-reload: %s", oneLine(out, err))
		} else {
			res.Ran = append(res.Ran, "systemctl --user daemon-reload")
		}
	}
	return res, nil
}

// State is what Status finds.
type State struct {
	Kind Kind   `json:"kind"`
	Path string `json:"path"`
	// Installed reports whether the definition exists.
	Installed bool `json:"installed"`
	// Current reports whether it is what Install would write now (same
	// executable, config, environment); false means `fleetmgr service
	// install` would change it.
	Current bool `json:"current"`
	// Enabled and Active are the service manager's words
	// (systemctl is-enabled / is-active; launchctl: "loaded" or ""), ""
	// when it does not answer (Note says why).
	Enabled string `json:"enabled,omitempty"`
	Active  string `json:"active,omitempty"`
	// EnvFile is the secrets file and EnvFileProblem what is wrong with
	// it ("" when it is private and parses).
	EnvFile        string `json:"env_file"`
	EnvFileProblem string `json:"env_file_problem,omitempty"`
	Note           string `json:"note,omitempty"`
}

// Status reports the definition at o.Path against what Install would write
// for o.Spec, the service manager's view of it, and the secrets file.
func Status(ctx context.Context, o Options) (*State, error) {
	st := &State{Kind: o.Kind, Path: o.Path, EnvFile: o.Spec.EnvFile}
	want, err := Render(o.Kind, o.Spec)
	if err != nil {
		return nil, err
	}
	if got, err := os.ReadFile(o.Path); err == nil {
		st.Installed, st.Current = true, bytes.Equal(got, want)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if _, err := envfile.Read(o.Spec.EnvFile); err != nil {
		st.EnvFileProblem = err.Error()
	}
	run := o.run()
	switch o.Kind {
	case Systemd:
		// is-enabled and is-active exit non-zero for "disabled" and
		// "inactive" too; only no output at all means no answer.
		// is-enabled reads unit files (it answers without a running
		// manager); is-active asks the manager. Both exit non-zero for
		// "disabled" and "inactive": only their words count.
		if en, _ := run(ctx, "systemctl", "--user", "is-enabled", UnitName); isWord(en) {
			st.Enabled = en
		}
		if ac, err := run(ctx, "systemctl", "--user", "is-active", UnitName); isWord(ac) {
			st.Active = ac
		} else {
			st.Note = "systemctl --user did not answer: " + oneLine(ac, err)
		}
	case Launchd:
		if _, err := run(ctx, "launchctl", "print", "gui/"+strconv.Itoa(o.UID)+"/"+Label); err == nil {
			st.Enabled, st.Active = "loaded", "loaded"
		}
	}
	return st, nil
}

// isWord reports whether s is one lower-case word, as systemctl's
// is-enabled/is-active answer ("enabled", "inactive", "not-found" …).
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r == '-') {
			return false
		}
	}
	return true
}

// writeAtomic writes data to path (creating its directory, 0755) through a
// temporary file and a rename.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm)
}
