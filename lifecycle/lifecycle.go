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

	"github.com/fleetmgr/fleetmgr/diskreserve"
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
	// Confirm says the caller confirmed that a Stop or Restart may end
	// the fleet's live members (members.go). Without it, a Stop or
	// Restart of a fleet with live member panes does nothing and returns
	// a *MembersLiveError.
	Confirm bool
	// Origin names who asked, for the record observers
	// (RecordChange.Origin): "cli", "mcp", "dashboard", "remote" …;
	// empty means the verb's name ("start", "stop", "restart").
	Origin string

	restart bool // a supervisor's restart: keep the crash-loop record
	locked  bool // the caller holds the fleet's lock already
}

// change is the Change of a write made by verb under opt.
func (opt Options) change(verb string) Change {
	if opt.Origin != "" {
		return Change{Origin: opt.Origin}
	}
	return Change{Origin: verb}
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

	observers observers // told of every record change (record.go)

	reserveOnce sync.Once
	reserveRes  *diskreserve.Reserve // the state dir's reserve (reserve.go); see Reserve
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

// checkPort refuses to start when the fleet's port is taken: by another
// fleet (named), by this fleet started outside our records, or by a foreign
// process.
func (m *Manager) checkPort(ctx context.Context, f *registry.Fleet) error {
	if portFree(f.Port) {
		return nil
	}
	h, _, err := Probe(ctx, m.http, f.Port)
	holder := ""
	pids, perr := procfs.TCPListenerPIDs(f.Port)
	if perr == nil {
		holder = fmt.Sprintf(" (pid %d)", pids[0])
	} else if err != nil && waitPortFree(ctx, f.Port, portReleaseWait) {
		// Nothing answers and no process holds the listener: one that has
		// just ended (a fleetd killed for a restart, whose threads were
		// still closing its files) released the port meanwhile.
		return nil
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

// portReleaseWait bounds how long checkPort waits for a port whose
// listener has no readable holder to come free.
const portReleaseWait = 2 * time.Second

// waitPortFree polls port every 50 ms until it is free (true) or d or ctx
// ends (false).
func waitPortFree(ctx context.Context, port int, d time.Duration) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(d)
	for {
		if portFree(port) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-t.C:
		}
	}
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
	if err := m.refuseUnconfirmed(ctx, name, verbStop, opt); err != nil {
		return nil, err
	}
	step := m.stepper(opt, "stop", name)
	by := opt.change(verbStop)
	if _, err := readState(m.statePath(name), name); err != nil {
		// A corrupt record must not keep the fleet's processes alive:
		// keep the file aside and stop what discovery finds.
		_ = os.Rename(m.statePath(name), m.statePath(name)+".corrupt")
		step("state", fmt.Sprintf("%v; kept as %s.corrupt, stopping what discovery finds", err, m.statePath(name)))
	}
	st, err := m.mutate(name, by, func(st *State) error {
		uncountRestart(st) // a restart still waiting for its backoff never happens
		if err := st.transition(PhaseStopping, "stop begun", time.Now()); err != nil {
			return err
		}
		st.Desired, st.NextRestartAt = DesiredStopped, time.Time{}
		return nil
	})
	if err != nil {
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
		switch {
		case o.Stale != nil:
			step("fleetd", "fleetd.spawned.json: "+o.detail(p))
		case o.Running || len(o.Signalled) > 0:
			step("fleetd", fmt.Sprintf("stopped unrecorded pid %d (spawned by an interrupted start)", p.PID))
		default:
			step("fleetd", fmt.Sprintf("unrecorded pid %d (spawned by an interrupted start) had exited", p.PID))
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
	done, err := m.mutate(name, by, func(st *State) error {
		if err := st.transition(PhaseStopped, "stop: every process ended", time.Now()); err != nil {
			return err
		}
		st.Fleetd, st.Herdr = nil, nil
		if len(leftovers) > 0 {
			st.LastError = fmt.Sprintf("processes survived SIGKILL: %v", leftovers)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	if len(leftovers) > 0 {
		return done, fmt.Errorf("fleet %s: %s", name, done.LastError)
	}
	return done, nil
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
	if err := m.refuseUnconfirmed(ctx, name, verbRestart, opt); err != nil {
		return nil, err
	}
	t0 := time.Now()
	by := opt.change(verbRestart)
	st, err := m.mutate(name, by, func(st *State) error {
		st.Desired = DesiredRunning
		return st.transition(PhaseRestarting, "restart begun", time.Now())
	})
	if err != nil {
		return nil, err
	}
	if st.Fleetd != nil {
		o := m.killRecorded(ctx, st.Fleetd, fleetdRole(name), m.Config().Manager.StopGrace.Duration)
		if len(o.Left) > 0 {
			lastErr := fmt.Sprintf("processes survived SIGKILL: %v", o.Left)
			if cur, err := m.mutate(name, by, func(st *State) error {
				st.LastError = lastErr
				if err := st.transition(PhaseFailed, "restart: fleetd's session survived SIGKILL", time.Now()); err != nil {
					m.log.Error("restart", "fleet", name, "err", err)
				}
				return nil
			}); err == nil {
				st = cur
			}
			return st, fmt.Errorf("fleet %s: %s", name, lastErr)
		}
		detail := o.detail(st.Fleetd)
		m.log.Info("restart step", "fleet", name, "step", "fleetd", "detail", detail)
		if opt.Progress != nil {
			opt.Progress(Step{Fleet: name, Name: "fleetd", Detail: detail, Elapsed: time.Since(t0)})
		}
		if st, err = m.mutate(name, by, func(st *State) error { st.Fleetd = nil; return nil }); err != nil {
			return nil, err
		}
	}
	opt.Lead = opt.Lead || st.Lead
	opt.locked = true
	st2, err := m.Start(ctx, name, opt)
	if err != nil {
		m.noteStartFailure(name, by, err)
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
func (m *Manager) noteStartFailure(name string, by Change, err error) {
	if _, merr := m.mutate(name, by, func(st *State) error {
		if alive(st.Fleetd) || (st.Phase == PhaseFailed && st.LastError == err.Error()) {
			return ErrUnchanged
		}
		if terr := st.transition(PhaseFailed, reasonStartFailed(name, err.Error()), time.Now()); terr != nil {
			return terr
		}
		st.NextRestartAt = time.Time{}
		if !st.CrashLoop {
			st.LastError = err.Error() // a crash loop's error says how to get out of it: kept
		}
		return nil
	}); merr != nil {
		m.log.Error("restart", "fleet", name, "err", merr)
	}
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
