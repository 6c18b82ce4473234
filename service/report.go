package service

import "fmt"

// Lines are what `fleetmgr service install` (done: "installed") or
// `uninstall` ("removed") prints of r.
func (r *Result) Lines(done string) []string {
	var out []string
	if r.Changed {
		out = append(out, done+" "+r.Path)
	} else if r.Note == "" {
		out = append(out, r.Path+" is up to date")
	}
	if r.EnvFileCreated {
		out = append(out, fmt.Sprintf("created %s (mode 0600): put the broker administrator's variables there, one NAME=value per line", r.EnvFile))
	}
	for _, c := range r.Ran {
		out = append(out, "ran: "+c)
	}
	if r.Note != "" {
		out = append(out, r.Note)
	}
	for _, t := range r.Todo {
		out = append(out, "  "+t)
	}
	return out
}

// Lines are what `fleetmgr service status` prints of s.
func (s *State) Lines() []string {
	var out []string
	switch {
	case !s.Installed:
		out = append(out, s.Path+": not installed (fleetmgr service install)")
	case s.Current:
		out = append(out, s.Path+": installed, current")
	default:
		out = append(out, s.Path+": installed, but not what install would write now (another executable, config or environment): run fleetmgr service install")
	}
	if s.Enabled != "" || s.Active != "" {
		out = append(out, fmt.Sprintf("enabled: %s, active: %s", orDash(s.Enabled), orDash(s.Active)))
	}
	if s.Note != "" {
		out = append(out, s.Note)
	}
	if s.EnvFileProblem != "" {
		return append(out, "environment file: "+s.EnvFileProblem)
	}
	return append(out, fmt.Sprintf("environment file: %s (private)", s.EnvFile))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// LSB exit statuses of `fleetmgr service status` (the Linux Standard
// Base's init-script status actions: 0 running, 3 not running, 4 status
// unknown, which fleetmgr uses for "not installed").
const (
	StatusRunning      = 0
	StatusNotRunning   = 3
	StatusNotInstalled = 4
)

// ExitStatus is s's LSB exit status: StatusNotInstalled without a
// definition; else StatusRunning when the service manager says the unit
// is active (launchd: loaded), or, when it does not answer, serveRuns (a
// fleetmgr serve of this state dir runs); else StatusNotRunning.
func (s *State) ExitStatus(serveRuns bool) int {
	switch {
	case !s.Installed:
		return StatusNotInstalled
	case s.Active == "active" || s.Active == "loaded":
		return StatusRunning
	case s.Active == "" && serveRuns:
		return StatusRunning
	}
	return StatusNotRunning
}
