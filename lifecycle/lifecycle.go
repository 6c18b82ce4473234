// Package lifecycle starts, stops and records fleets: for each fleet, its
// herdr session (herdr_bin --session S server) and its fleetd, in order, each
// as the leader of its own session, with state kept in the state dir so any
// fleetmgr process can stop what another started. docs/ARCHITECTURE.md
// "Lifecycle of one fleet" and "States and transitions".
package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Step is one completed step of a start or stop, for progress output.
type Step struct {
	Fleet   string        `json:"fleet"`
	Name    string        `json:"step"`
	Detail  string        `json:"detail,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Options tune one Start or Stop.
type Options struct {
	// Lead launches the fleet's lead (lead_command in a tab labelled
	// lead_tab) even when the fleet's config does not say lead = true.
	Lead bool
	// Progress, when set, is called after each completed step.
	Progress func(Step)

	restart bool // a supervisor's restart: keep the crash-loop record
	locked  bool // the caller holds the fleet's lock already
}

// Manager starts and stops the fleets of one registry.Config. It is safe for
// concurrent use; operations on one fleet are serialised by a lock file in
// the fleet's state directory, which also excludes other fleetmgr processes.
type Manager struct {
	conf    configHolder // the config in force; swapped by Reload (config.go)
	log     *slog.Logger
	environ []string
	getenv  func(string) string
	http    *http.Client

	mu      sync.Mutex
	logPipe string // guarded by mu; see SetLogPipe

	kids  children  // processes this Manager started and reaps (children.go)
	ids   judged    // the boot id and the records refused (identity.go)
	files fileWatch // wakes FollowLog and the supervisor (filewatch.go)
}

// New returns a Manager for cfg. environ is fleetmgr's environment
// (normally os.Environ()): the broker administrator's credentials are read
// from it, and children get only what env.go allows of it.
func New(cfg *registry.Config, log *slog.Logger, environ []string) *Manager {
	getenv := func(k string) string {
		for i := len(environ) - 1; i >= 0; i-- {
			if kk, v, ok := strings.Cut(environ[i], "="); ok && kk == k {
				return v
			}
		}
		return ""
	}
	m := &Manager{
		log:     log,
		environ: environ,
		getenv:  getenv,
		http:    &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	m.conf.init(cfg)
	return m
}

// FleetDir is <state_dir>/fleets/<name>: state.json, logs, rendered config.
func (m *Manager) FleetDir(name string) string {
	return filepath.Join(m.Config().Manager.StateDir, "fleets", name)
}

func (m *Manager) statePath(name string) string { return filepath.Join(m.FleetDir(name), "state.json") }

// LogPath is the log file of one of a fleet's processes ("fleetd" or "herdr").
func (m *Manager) LogPath(name, proc string) string {
	return filepath.Join(m.FleetDir(name), proc+".log")
}

// HerdrSocket is the API socket of the fleet's herdr session, resolved as
// herdr does (herdr.ConfigDir, herdr.SocketPath) from the manager's
// environment.
func (m *Manager) HerdrSocket(f *registry.Fleet) string {
	return herdr.SocketPath(herdr.ConfigDir(m.getenv), f.HerdrSession)
}

func (m *Manager) templateData(f *registry.Fleet) registry.TemplateData {
	return f.TemplateData(m.HerdrSocket(f))
}

// stepper returns the function a start or stop calls after each completed
// step: it logs the step (verb "start"/"stop", with fleet=name) and reports
// it to opt.Progress with the time since the stepper was made.
func (m *Manager) stepper(opt Options, verb, name string) func(s, detail string) {
	t0 := time.Now()
	return func(s, detail string) {
		m.log.Info(verb+" step", "fleet", name, "step", s, "detail", detail)
		if opt.Progress != nil {
			opt.Progress(Step{Fleet: name, Name: s, Detail: detail, Elapsed: time.Since(t0)})
		}
	}
}

// Start brings fleet name up: herdr session, rendered config, fleetd, then
// waits for /healthz to answer with the fleet's name. A fleet that is already
// healthy is left as it is, unless its herdr session is gone (then fleetd
// is stopped and both start again); the healthy fleetd an interrupted
// start spawned is adopted (adoptSpawned). On any failure everything this call started is
// stopped again, so nothing half-started is left running.
func (m *Manager) Start(ctx context.Context, name string, opt Options) (st *State, err error) {
	cfg := m.Config() // one config for the whole start: a reload meanwhile applies at the next one
	f, err := m.startable(cfg, name)
	if err != nil {
		return nil, err
	}
	if err := m.checkProject(f); err != nil {
		return nil, err
	}
	if !opt.locked {
		unlock, err := m.lock(ctx, name)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	step := m.stepper(opt, "start", name)
	st, err = readState(m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	m.beginStart(st, f, &opt)
	if alive(st.Fleetd) {
		if h, _, perr := Probe(ctx, m.http, st.Port); perr == nil && h.Name == name {
			if herr := herdrGone(ctx, st.HerdrSocket); herr != nil {
				// Its members' session is gone (nothing supervised it):
				// not "already running". As restart does, fleetd goes
				// and the start below brings up both.
				o := m.killRecorded(ctx, st.Fleetd, fleetdRole(name), cfg.Manager.StopGrace.Duration)
				if len(o.Left) > 0 {
					return nil, fmt.Errorf("fleet %s: its herdr session does not answer, and fleetd's processes %v survived SIGKILL", name, o.Left)
				}
				step("fleetd", fmt.Sprintf("%s: its herdr session %s does not answer on %s (%v); starting both again", o.detail(st.Fleetd), f.HerdrSession, st.HerdrSocket, herr))
				st.Fleetd = nil
				if err := writeState(m.statePath(name), st); err != nil {
					return nil, err
				}
			}
		}
	}
	if alive(st.Fleetd) {
		if h, _, perr := Probe(ctx, m.http, st.Port); perr == nil && h.Name == name {
			st.Desired = DesiredRunning
			if err := st.transition(PhaseRunning, fmt.Sprintf("start: fleetd pid %d already running and healthy", st.Fleetd.PID), time.Now()); err != nil {
				return nil, err
			}
			if err := writeState(m.statePath(name), st); err != nil {
				return nil, err
			}
			step("already running", fmt.Sprintf("fleetd pid %d on port %d", st.Fleetd.PID, st.Port))
			if opt.Lead && !opt.restart {
				// Asked for now (--lead): launched unless its tab exists. A
				// failure leaves the running fleet as it is.
				detail, err := m.launchLead(ctx, f, registry.TemplateData{HerdrSocket: st.HerdrSocket})
				if err != nil {
					return st, err
				}
				step("lead", detail)
			}
			return st, nil
		}
	}
	// The fleetd a start killed mid-way spawned (and never recorded) is
	// this fleet's when its identity checks out: it is adopted, as the
	// supervisor would, rather than refused as a stranger.
	if adopted, err := m.adoptSpawned(ctx, st, f); adopted || err != nil {
		if err != nil {
			return nil, err
		}
		step("adopted", fmt.Sprintf("fleetd pid %d on port %d, spawned by an interrupted start", st.Fleetd.PID, st.Port))
		return st, nil
	}
	// A fleetd of this fleet that fleetmgr has no record of (state dir
	// lost, corrupt, or a start killed mid-way) must not get a twin.
	if pids := m.unrecorded(ctx, f, st); len(pids) > 0 {
		pid, hint := leader(pids), ""
		if sp := m.readSpawned(name, "fleetd"); sp != nil && sp.PID == pid {
			hint = " (an interrupted start spawned it; it was not adopted: it does not answer /healthz as fleet " + name + " or its herdr session does not answer)"
		}
		return nil, fmt.Errorf("fleet %s already runs as pid %d, not in fleetmgr's records: stop it with `fleetmgr stop %s`%s", name, pid, name, hint)
	}
	data := m.templateData(f)
	if err := m.checkPort(ctx, f); err != nil {
		return nil, err
	}
	for _, d := range []string{m.FleetDir(name), f.WorktreeRoot, filepath.Dir(f.ConfigFile)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("fleet %s: %w", name, err)
		}
	}
	oldHerdrSocket := st.HerdrSocket
	// A supervisor's restart reads "restarting" until it is done (and a
	// serve killed meanwhile leaves it pending for the next serve).
	phase, reason := PhaseStarting, "start begun"
	if opt.restart {
		phase, reason = PhaseRestarting, "restart's start begun"
	}
	if err := st.transition(phase, reason, time.Now()); err != nil {
		return nil, err
	}
	prevDesired := st.Desired
	st.Desired, st.Port, st.HerdrSocket, st.LastError = DesiredRunning, f.Port, data.HerdrSocket, ""
	st.Launch = launchOf(cfg, f) // before anything runs: a fleet removed from the file meanwhile stays stoppable
	if err := writeState(m.statePath(name), st); err != nil {
		return nil, err
	}
	var started []*Proc // what this call started, for rollback
	defer func() {
		if err == nil {
			return
		}
		for i := len(started) - 1; i >= 0; i-- {
			killSession(context.WithoutCancel(ctx), started[i], cfg.Manager.StopGrace.Duration)
		}
		reason, lastErr := "start failed: "+firstLine(err.Error()), err.Error()
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Its caller gave up (Ctrl-C on `fleetmgr start`, a serve
			// shutting down): what was asked is undone with what was
			// started, so a supervisor does not bring up a fleet whose
			// start the operator interrupted. A fleet meant to run
			// before (a restart's start) stays meant to run.
			st.Desired = prevDesired
			reason, lastErr = "start interrupted by its caller", "start interrupted by its caller before fleetd was healthy"
		}
		if terr := st.transition(PhaseFailed, reason, time.Now()); terr != nil {
			m.log.Error("start", "fleet", name, "err", terr)
		}
		st.LastError, st.NextRestartAt = lastErr, time.Time{}
		if !alive(st.Fleetd) {
			st.Fleetd = nil
		}
		if werr := writeState(m.statePath(name), st); werr != nil {
			m.log.Error("write state", "fleet", name, "err", werr)
		}
	}()

	// 0. broker vhost, user and permissions (vhost.go): first, so a broker
	// that does not answer fails the start before anything runs.
	detail, err := m.ensureVhost(ctx, f)
	if err != nil {
		return st, err
	}
	step("vhost", detail)

	// 1. herdr session (the one an earlier start used goes first when the
	// fleet's herdr_session changed since: config.go).
	m.retireOldHerdr(ctx, st, oldHerdrSocket, cfg.Manager.StopGrace.Duration, step)
	hc := herdr.New(data.HerdrSocket)
	if _, perr := hc.Ping(ctx); perr == nil {
		if !alive(st.Herdr) {
			// The server an interrupted start spawned (and never recorded)
			// is ours: recorded, its death is seen by pid at once.
			st.Herdr = m.spawnedHerdr(name, st)
			st.HerdrOwned = st.Herdr != nil
		}
		step("herdr session", fmt.Sprintf("session %s already running at %s", f.HerdrSession, data.HerdrSocket))
	} else {
		p, err := m.startHerdr(ctx, f, data)
		if p != nil {
			// Also on error: a server that never answered is still ours
			// to roll back.
			started = append(started, p)
			st.Herdr, st.HerdrOwned = p, true
		}
		if err != nil {
			return st, err
		}
		settle(st.Herdr)
		// Recorded now, not only at the end: a start killed from here on
		// leaves the server in state.json.
		if err := writeState(m.statePath(name), st); err != nil {
			return st, err
		}
		step("herdr session", fmt.Sprintf("session %s ready (pid %d, socket %s)", f.HerdrSession, p.PID, data.HerdrSocket))
	}

	// 2. fleetd config.
	if err := m.renderConfig(f, data); err != nil {
		return st, err
	}
	step("config", f.ConfigFile)

	// 3. fleetd.
	p, err := m.startFleetd(ctx, f, data)
	if p != nil {
		started = append(started, p)
		st.Fleetd = p
	}
	if err != nil {
		return st, err
	}
	// herdr may have died while fleetd came up: a cheap ping
	// before the fleet is reported running.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, perr := hc.Ping(pctx)
	cancel()
	if perr != nil {
		return st, fmt.Errorf("fleet %s: herdr session %s stopped answering on %s while fleetd started (%v); last herdr log lines:\n%s", name, f.HerdrSession, data.HerdrSocket, perr, m.tail(name, "herdr", 10))
	}
	settle(st.Fleetd)
	now := time.Now()
	if err := st.transition(PhaseRunning, fmt.Sprintf("start: fleetd pid %d healthy on port %d", p.PID, f.Port), now); err != nil {
		return st, err
	}
	st.StartedAt, st.NextRestartAt = now.UTC(), time.Time{}
	step("fleetd", fmt.Sprintf("healthy on 127.0.0.1:%d (pid %d)", f.Port, p.PID))

	// 4. lead, only when opted in.
	if opt.Lead || f.Lead {
		detail, err := m.launchLead(ctx, f, data)
		if err != nil {
			return st, err
		}
		step("lead", detail)
	}
	if err := writeState(m.statePath(name), st); err != nil {
		return st, err
	}
	return st, nil
}

// checkPort refuses to start when the fleet's port is taken: by another
// fleet (named), by this fleet started outside our records, or by a foreign
// process.
func (m *Manager) checkPort(ctx context.Context, f *registry.Fleet) error {
	if portFree(f.Port) {
		return nil
	}
	h, _, err := Probe(ctx, m.http, f.Port)
	holder := ""
	if pids, perr := procfs.TCPListenerPIDs(f.Port); perr == nil {
		holder = fmt.Sprintf(" (pid %d)", pids[0])
	}
	switch {
	case err != nil:
		return fmt.Errorf("fleet %s: port %d on 127.0.0.1 is already bound by another process%s that is not a fleetd (%v); free the port or give fleet %s another port in %s", f.Name, f.Port, holder, err, f.Name, m.Config().Path)
	case h.Name == f.Name:
		return fmt.Errorf("fleet %s: a fleetd named %s%s already answers on port %d but fleetmgr has no record of starting it; stop that process, or let `fleetmgr serve` adopt it", f.Name, h.Name, holder, f.Port)
	default:
		return fmt.Errorf("fleet %s: port %d%s answers as fleet %q, not %q; stop fleet %s or change the port of one of them in %s", f.Name, f.Port, holder, h.Name, f.Name, h.Name, m.Config().Path)
	}
}

// adoptSpawned makes the fleetd an interrupted start spawned (named by
// fleetd.spawned.json, written before the start awaited it) st's fleetd,
// when st records no live one and its phase may become running, the
// process is judged this fleet's fleetd as before a signal (identity.go),
// /healthz on the port that start gave it names the fleet (awaited up to
// start_timeout while the process lives: it may still be coming up) and
// the fleet's herdr session answers. It then writes st as running and
// reports true. Short of all that it changes nothing and reports false
// (the caller refuses an unrecorded fleetd, which `fleetmgr stop` ends);
// its error is ctx's or the state file's.
func (m *Manager) adoptSpawned(ctx context.Context, st *State, f *registry.Fleet) (bool, error) {
	if alive(st.Fleetd) || st.HerdrSocket == "" || !allowedTransition(st.Phase, PhaseRunning) {
		return false, nil
	}
	p := m.readSpawned(f.Name, "fleetd")
	if p == nil || !m.recorded(p, fleetdRole(f.Name)) {
		return false, nil
	}
	port := st.Port
	if port == 0 {
		port = f.Port
	}
	deadline := time.Now().Add(m.Config().Manager.StartTimeout.Duration)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		h, _, perr := Probe(pctx, m.http, port)
		cancel()
		if perr == nil && h.Name != f.Name {
			return false, nil
		}
		if perr == nil {
			break
		}
		if !alive(p) || time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, perr := herdr.New(st.HerdrSocket).Ping(pctx)
	cancel()
	if perr != nil {
		return false, nil
	}
	settle(p)
	now := time.Now()
	if err := st.transition(PhaseRunning, fmt.Sprintf("start: adopted fleetd pid %d, spawned by an interrupted start", p.PID), now); err != nil {
		return false, err
	}
	st.Desired, st.Fleetd, st.Port, st.LastError, st.NextRestartAt = DesiredRunning, p, port, "", time.Time{}
	st.StartedAt = now.UTC()
	if !alive(st.Herdr) {
		st.Herdr = m.spawnedHerdr(f.Name, st)
		st.HerdrOwned = st.Herdr != nil
	}
	if err := writeState(m.statePath(f.Name), st); err != nil {
		return false, err
	}
	return true, nil
}

func (m *Manager) startHerdr(ctx context.Context, f *registry.Fleet, d registry.TemplateData) (*Proc, error) {
	argv := []string{m.Config().Manager.HerdrBin, "--session", f.HerdrSession, "server"}
	env := m.herdrEnv(f).environ()
	off := logSize(m.LogPath(f.Name, "herdr"))
	cmd, p, err := m.spawn(argv, f.Project, env, m.LogPath(f.Name, "herdr"))
	if err != nil {
		return nil, fmt.Errorf("fleet %s: herdr session %s: %w (is herdr_bin %q installed?)", f.Name, f.HerdrSession, err, m.Config().Manager.HerdrBin)
	}
	exited := m.reap(cmd)
	hc := herdr.New(d.HerdrSocket)
	deadline := time.Now().Add(m.Config().Manager.StartTimeout.Duration)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, perr := hc.Ping(pctx)
		cancel()
		if perr == nil {
			return &p, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("fleet %s: herdr server for session %s exited during start; last log lines:\n%s", f.Name, f.HerdrSession, m.tailFrom(f.Name, "herdr", off, 10))
		case <-ctx.Done():
			return &p, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &p, fmt.Errorf("fleet %s: herdr session %s did not answer ping on %s within %s", f.Name, f.HerdrSession, d.HerdrSocket, m.Config().Manager.StartTimeout.Duration)
		}
	}
}

func (m *Manager) renderConfig(f *registry.Fleet, d registry.TemplateData) error {
	out, err := f.RenderConfig(d)
	if err != nil {
		return fmt.Errorf("fleet %s: config_template %s: %w", f.Name, f.ConfigTemplate, err)
	}
	if out == nil {
		var buf bytes.Buffer
		tpl := template.Must(template.New("fleetd.conf").Option("missingkey=error").Parse(defaultConfigTemplate))
		if err := tpl.Execute(&buf, d); err != nil {
			return fmt.Errorf("fleet %s: default config: %w", f.Name, err)
		}
		out = buf.Bytes()
	}
	return writeFileAtomic(f.ConfigFile, out, 0o600)
}

// defaultConfigTemplate is rendered when a fleet names no config_template:
// a TOML file with the contract fields, which the fleetd stand-in reads.
const defaultConfigTemplate = `# Rendered by fleetmgr for fleet {{.Name}}; do not edit, it is rewritten on start.
name = "{{.Name}}"
port = {{.Port}}
herdr_session = "{{.HerdrSession}}"
herdr_socket = "{{.HerdrSocket}}"
worktree_root = "{{.WorktreeRoot}}"
project_dir = "{{.ProjectDir}}"
`

func (m *Manager) startFleetd(ctx context.Context, f *registry.Fleet, d registry.TemplateData) (*Proc, error) {
	argv, err := f.RenderCommand(d)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: command: %w", f.Name, err)
	}
	benv, err := m.brokerEnv(f)
	if err != nil {
		return nil, err
	}
	env := m.fleetdEnv(f, d, benv).environ()
	off := logSize(m.LogPath(f.Name, "fleetd"))
	cmd, p, err := m.spawn(argv, f.Project, env, m.LogPath(f.Name, "fleetd"))
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", f.Name, err)
	}
	exited := m.reap(cmd)
	deadline := time.Now().Add(m.Config().Manager.StartTimeout.Duration)
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		h, _, perr := Probe(pctx, m.http, f.Port)
		cancel()
		if perr == nil {
			if h.Name != f.Name {
				return &p, fmt.Errorf("fleet %s: port %d answers as fleet %q, not %q", f.Name, f.Port, h.Name, f.Name)
			}
			return &p, nil
		}
		last = perr
		select {
		case <-exited:
			return &p, fmt.Errorf("fleet %s: fleetd exited during start (%s); last log lines of %s:\n%s", f.Name, exitString(cmd), m.LogPath(f.Name, "fleetd"), m.tailFrom(f.Name, "fleetd", off, 15))
		case <-ctx.Done():
			return &p, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &p, fmt.Errorf("fleet %s: fleetd did not answer /healthz on port %d within %s (last: %v); see %s", f.Name, f.Port, m.Config().Manager.StartTimeout.Duration, last, m.LogPath(f.Name, "fleetd"))
		}
	}
}

// tail returns the last n lines of a fleet process's log.
func (m *Manager) tail(name, proc string, n int) string {
	b, err := os.ReadFile(m.LogPath(name, proc))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// Stop stops fleet name in reverse start order: fleetd (SIGTERM to its
// session, stop_grace, SIGKILL), then its herdr session (server.stop, then
// signals, then every pane's session), leaving no process behind. The desired
// state becomes stopped first, so a supervisor never restarts it. A vhost is
// never touched.
func (m *Manager) Stop(ctx context.Context, name string, opt Options) (*State, error) {
	f, err := m.Fleet(name) // also a fleet removed from the file while it ran
	if err != nil {
		return nil, err
	}
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	step := m.stepper(opt, "stop", name)
	st, err := readState(m.statePath(name), name)
	if err != nil {
		// A corrupt record must not keep the fleet's processes alive:
		// keep the file aside and stop what discovery finds.
		_ = os.Rename(m.statePath(name), m.statePath(name)+".corrupt")
		step("state", fmt.Sprintf("%v; kept as %s.corrupt, stopping what discovery finds", err, m.statePath(name)))
		st = &State{Name: name}
	}
	if err := st.transition(PhaseStopping, "stop begun", time.Now()); err != nil {
		return nil, err
	}
	st.Desired, st.NextRestartAt = DesiredStopped, time.Time{}
	if err := writeState(m.statePath(name), st); err != nil {
		return nil, err
	}
	grace := m.Config().Manager.StopGrace.Duration
	var leftovers []int
	// Every recorded process is signalled only once killRecorded found it
	// to be the fleet's (identity.go); each step says what was really done.
	if st.Fleetd != nil {
		o := m.killRecorded(ctx, st.Fleetd, fleetdRole(name), grace)
		leftovers = append(leftovers, o.Left...)
		step("fleetd", o.detail(st.Fleetd))
	}
	// What a start recorded before it was killed, and what carries the
	// fleet's contract environment without any record (discover.go).
	if p := m.readSpawned(name, "fleetd"); p != nil && !sameProc(p, st.Fleetd) && alive(p) {
		o := m.killRecorded(ctx, p, fleetdRole(name), grace)
		leftovers = append(leftovers, o.Left...)
		if o.Stale != nil {
			step("fleetd", "fleetd.spawned.json: "+o.detail(p))
		} else {
			step("fleetd", fmt.Sprintf("stopped unrecorded pid %d (spawned by an interrupted start)", p.PID))
		}
	}
	if pids := discover(name, m.fleetSockets(f, st)); len(pids) > 0 {
		leftovers = append(leftovers, killDiscovered(ctx, pids, grace)...)
		step("fleetd", fmt.Sprintf("stopped pid %v found by its FLEET_NAME/FLEET_HERDR_SOCKET environment", pids))
	}
	if p := m.readSpawned(name, "herdr"); p != nil && !sameProc(p, st.Herdr) && alive(p) {
		if st.Herdr == nil {
			st.Herdr = p
		} else {
			o := m.killRecorded(ctx, p, m.herdrRole(name, st), grace)
			leftovers = append(leftovers, o.Left...)
			if o.Stale != nil {
				step("herdr session", "herdr.spawned.json: "+o.detail(p))
			}
		}
	}
	sock := st.HerdrSocket
	if sock == "" {
		sock = m.HerdrSocket(f)
	}
	left, detail := m.stopHerdr(ctx, st, sock, grace)
	leftovers = append(leftovers, left...)
	step("herdr session", detail)
	if err := st.transition(PhaseStopped, "stop: every process ended", time.Now()); err != nil {
		return st, err
	}
	st.Fleetd, st.Herdr = nil, nil
	if len(leftovers) > 0 {
		st.LastError = fmt.Sprintf("processes survived SIGKILL: %v", leftovers)
	}
	if err := writeState(m.statePath(name), st); err != nil {
		return st, err
	}
	if len(leftovers) > 0 {
		return st, fmt.Errorf("fleet %s: %s", name, st.LastError)
	}
	return st, nil
}

// Restart stops fleet name's fleetd (SIGTERM to its session, stop_grace,
// SIGKILL) and starts it again, keeping its herdr session (and so the lead
// tab and every pane fleetd does not reap) when that still answers. It
// clears a crash loop. The desired state becomes running.
func (m *Manager) Restart(ctx context.Context, name string, opt Options) (*State, error) {
	if _, err := m.startable(m.Config(), name); err != nil {
		return nil, err
	}
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	t0 := time.Now()
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	if err := st.transition(PhaseRestarting, "restart begun", time.Now()); err != nil {
		return nil, err
	}
	st.Desired = DesiredRunning
	if err := writeState(m.statePath(name), st); err != nil {
		return nil, err
	}
	if st.Fleetd != nil {
		o := m.killRecorded(ctx, st.Fleetd, fleetdRole(name), m.Config().Manager.StopGrace.Duration)
		if len(o.Left) > 0 {
			st.LastError = fmt.Sprintf("processes survived SIGKILL: %v", o.Left)
			if err := st.transition(PhaseFailed, "restart: fleetd's session survived SIGKILL", time.Now()); err != nil {
				m.log.Error("restart", "fleet", name, "err", err)
			}
			_ = writeState(m.statePath(name), st)
			return st, fmt.Errorf("fleet %s: %s", name, st.LastError)
		}
		detail := o.detail(st.Fleetd)
		st.Fleetd = nil
		m.log.Info("restart step", "fleet", name, "step", "fleetd", "detail", detail)
		if opt.Progress != nil {
			opt.Progress(Step{Fleet: name, Name: "fleetd", Detail: detail, Elapsed: time.Since(t0)})
		}
		if err := writeState(m.statePath(name), st); err != nil {
			return st, err
		}
	}
	opt.Lead = opt.Lead || st.Lead
	opt.locked = true
	st2, err := m.Start(ctx, name, opt)
	if err != nil {
		m.noteStartFailure(name, err)
	}
	return st2, err
}

// noteStartFailure records in the state of fleet name (whose lock the
// caller holds) a restart's start that failed before it wrote anything
// itself: a check before any step (no project directory, the port taken,
// an unrecorded fleetd). Without it the fleet read "restarting" for ever
// with no error, and the supervisor's next restart reason and crash loop
// said only "fleetd not running". A start that failed later has already
// recorded its error (phase failed), and is left as it is.
func (m *Manager) noteStartFailure(name string, err error) {
	path := m.statePath(name)
	st, rerr := readState(path, name)
	if rerr != nil || alive(st.Fleetd) || (st.Phase == PhaseFailed && st.LastError == err.Error()) {
		return
	}
	if terr := st.transition(PhaseFailed, "start failed: "+firstLine(err.Error()), time.Now()); terr != nil {
		m.log.Error("restart", "fleet", name, "err", terr)
		return
	}
	st.NextRestartAt = time.Time{}
	if !st.CrashLoop {
		st.LastError = err.Error() // a crash loop's error says how to get out of it: kept
	}
	if werr := writeState(path, st); werr != nil {
		m.log.Error("write state", "fleet", name, "err", werr)
	}
}

// beginStart is called by Start once it has read the fleet's state: an
// operator's start (not a supervisor's restart) clears a crash loop and the
// backoff, and records whether a lead was asked for.
func (m *Manager) beginStart(st *State, f *registry.Fleet, opt *Options) {
	if opt.restart {
		opt.Lead = opt.Lead || st.Lead
		return
	}
	st.CrashLoop, st.RestartTimes, st.BackoffStep, st.NextRestartAt = false, nil, 0, time.Time{}
	st.Lead = opt.Lead || f.Lead
}

// stopHerdr stops the fleet's herdr session and every pane process in it.
func (m *Manager) stopHerdr(ctx context.Context, st *State, sock string, grace time.Duration) ([]int, string) {
	hc := herdr.New(sock)
	// Note every pane's shell first: a pane shell leads its own session, so
	// signalling the server's session alone would miss it.
	var panes []*Proc
	if ps, err := hc.PaneList(ctx, ""); err == nil {
		for _, p := range ps {
			if pi, err := hc.PaneProcessInfo(ctx, p.PaneID); err == nil && pi.ShellPID > 0 {
				if k, err := procKey(pi.ShellPID); err == nil {
					panes = append(panes, k)
				}
			}
		}
	}
	running, already := false, false
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	switch err := hc.ServerStop(sctx); {
	case err == nil:
		running = true
	case herdr.IsCode(err, "server_unavailable"):
		// Stopping already (a herdr before 0.8.2 answers a repeated
		// server.stop so, herdr issue #2612): it answered, it is going.
		running, already = true, true
	}
	cancel()
	var left []int
	var o killOutcome
	if st.Herdr != nil {
		r := m.herdrRole(st.Name, st)
		if m.judge(st.Herdr, r) == nil { // a stranger's exit is not waited for
			deadline := time.Now().Add(grace)
			for alive(st.Herdr) && time.Now().Before(deadline) {
				time.Sleep(25 * time.Millisecond)
			}
		}
		o = m.killRecorded(ctx, st.Herdr, r, grace)
		left = append(left, o.Left...)
	}
	for _, p := range panes {
		left = append(left, killSession(ctx, p, grace)...)
	}
	var detail string
	switch {
	case already:
		return left, fmt.Sprintf("stopped (it was stopping already; %d panes)", len(panes))
	case running:
		detail = fmt.Sprintf("stopped (%d panes)", len(panes))
	case len(o.Signalled) > 0:
		detail = "was not answering; its processes were signalled"
	case o.Stale != nil:
		detail = "was not answering"
	default:
		detail = "was not running"
	}
	if o.Stale != nil {
		detail += "; server " + o.detail(st.Herdr)
	}
	return left, detail
}

// herdrGone reports why the herdr session on sock is gone: its ping fails
// other than by running out of time (no socket, connection refused, an
// error answer). A server slow to answer within 2 s is not called gone
// (nil): a healthy fleet is never torn down because its herdr is busy;
// health_failures pings of a supervisor decide that.
func herdrGone(ctx context.Context, sock string) error {
	if sock == "" {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := herdr.New(sock).Ping(pctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return nil
	}
	return err
}
