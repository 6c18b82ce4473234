package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Config reload (docs/ARCHITECTURE.md "Config reload"). A Manager holds the
// config in force; Reload swaps in a newer one atomically, and every reader
// (the Manager's own verbs, the supervisor, the proxy, the status
// collector, the guard's session list) takes one snapshot per operation
// through Config. An operation under way keeps the snapshot it took: a
// start that was running when the file changed finishes with the old
// settings, and its record (Launch) says so, so the fleet then shows a
// restart pending.
//
// A fleet removed from the file while it may still run is *retired*: it
// is no longer configured, but its state directory's record (Launch,
// written by every start before anything is spawned) says enough to list
// it, read its logs, reach its tools while it runs and stop it. It is
// never started or restarted again (the supervisor has no goroutine for
// it), and it disappears from every list once stopped.

// configHolder is the Manager's current config with a generation counter
// and a channel closed at each swap, so watchers (the supervisor) learn of
// a reload without polling.
type configHolder struct {
	cur     atomic.Pointer[registry.Config]
	mu      sync.Mutex // serialises swaps
	gen     int
	changed chan struct{}
}

func (h *configHolder) init(cfg *registry.Config) {
	h.cur.Store(cfg)
	h.changed = make(chan struct{})
}

// Config returns the configuration in force: the one New was given, or the
// last one Reload swapped in. Take it once per operation and use that
// snapshot throughout.
func (m *Manager) Config() *registry.Config { return m.conf.cur.Load() }

// ConfigChanged returns a channel that is closed at the next successful
// Reload (take it before reading Config, so a reload in between is not
// missed).
func (m *Manager) ConfigChanged() <-chan struct{} {
	m.conf.mu.Lock()
	defer m.conf.mu.Unlock()
	return m.conf.changed
}

// Generation is how many times Reload has swapped the config (0: the
// config New was given).
func (m *Manager) Generation() int {
	m.conf.mu.Lock()
	defer m.conf.mu.Unlock()
	return m.conf.gen
}

// ReloadReport says what a Reload changed. Fleet lists are sorted and never
// null.
type ReloadReport struct {
	// Generation counts reloads since serve started (1 for the first).
	Generation int `json:"generation"`
	// Config is the file that was read.
	Config string `json:"config"`
	// Fleets are the fleets the file now defines.
	Fleets []string `json:"fleets"`
	// Added are fleets the file defines now and did not before: they can be
	// started at once.
	Added []string `json:"added"`
	// Removed are fleets the file no longer defines.
	Removed []string `json:"removed"`
	// Retired are the fleets, of Removed, that may still run: they stay
	// listed (not_in_config) and stoppable, and are never restarted.
	Retired []string `json:"retired"`
	// Changed are fleets whose settings differ from the previous file's.
	Changed []string `json:"changed"`
	// RestartPending maps each running fleet whose processes were started
	// with other settings than the file's to those settings' keys; they
	// apply at its next start (`fleetmgr restart NAME`).
	RestartPending map[string][]string `json:"restart_pending,omitempty"`
	// ServeRestart lists keys whose change only a new `fleetmgr serve`
	// applies (listen address, socket, guard, status sampling); the
	// running daemon keeps their old values.
	ServeRestart []string `json:"serve_restart,omitempty"`
}

// Reload makes cfg the config in force, for every reader at once, and
// returns what changed. It refuses (and changes nothing) when cfg names
// another state directory: the daemon's records, locks and logs live in
// its state directory, so only a new `fleetmgr serve` can move there.
// cfg must be fully loaded (ports allocated) and is not modified.
func (m *Manager) Reload(cfg *registry.Config) (*ReloadReport, error) {
	m.conf.mu.Lock()
	old := m.conf.cur.Load()
	if cfg.Manager.StateDir != old.Manager.StateDir {
		m.conf.mu.Unlock()
		return nil, fmt.Errorf("%s: [manager] state_dir changed from %s to %s; a running fleetmgr serve keeps its state dir: restart serve to use the new one (the file was not applied)",
			cfg.Path, old.Manager.StateDir, cfg.Manager.StateDir)
	}
	m.conf.cur.Store(cfg)
	m.conf.gen++
	gen := m.conf.gen
	close(m.conf.changed)
	m.conf.changed = make(chan struct{})
	m.conf.mu.Unlock()

	r := &ReloadReport{Generation: gen, Config: cfg.Path, Fleets: cfg.Names(),
		Added: []string{}, Removed: []string{}, Retired: []string{}, Changed: []string{}, ServeRestart: serveRestartKeys(old, cfg)}
	for _, n := range r.Fleets {
		nf := cfg.Fleets[n]
		of, ok := old.Fleets[n]
		if !ok {
			r.Added = append(r.Added, n)
			continue
		}
		if len(diffSettings(settingsOf(old, of), settingsOf(cfg, nf))) > 0 {
			r.Changed = append(r.Changed, n)
		}
		if st, err := m.State(n); err == nil && len(st.Shown.RestartPending) > 0 {
			if r.RestartPending == nil {
				r.RestartPending = map[string][]string{}
			}
			r.RestartPending[n] = st.Shown.RestartPending
		}
	}
	for _, n := range old.Names() {
		if _, ok := cfg.Fleets[n]; ok {
			continue
		}
		r.Removed = append(r.Removed, n)
		if m.retired(cfg, n) != nil {
			r.Retired = append(r.Retired, n)
		}
	}
	return r, nil
}

// serveRestartKeys lists the keys that differ between old and cfg and that
// a running serve cannot (fully) apply: its listeners, its guard and its
// status sampling are set up once.
func serveRestartKeys(old, cfg *registry.Config) []string {
	var out []string
	check := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, key)
		}
	}
	// herdr_bin applies to the next start of each fleet, but the guard
	// recognises herdr servers by the executable serve started with.
	check("manager.herdr_bin", old.Manager.HerdrBin, cfg.Manager.HerdrBin)
	check("manager.listen", old.Manager.Listen, cfg.Manager.Listen)
	check("manager.mcp_socket", old.Manager.MCPSocket, cfg.Manager.MCPSocket)
	check("manager.fast_path", old.Manager.FastPath, cfg.Manager.FastPath)
	// The journal is opened (or not) once, when serve starts.
	check("manager.journal", old.Manager.Journal, cfg.Manager.Journal)
	check("guard.allowed_uids", old.Guard.AllowedUIDs, cfg.Guard.AllowedUIDs)
	check("guard.operator_sessions", old.Guard.OperatorSessions, cfg.Guard.OperatorSessions)
	check("status.interval", old.Status.Interval, cfg.Status.Interval)
	check("status.fleet_timeout", old.Status.FleetTimeout, cfg.Status.FleetTimeout)
	check("status.max_watches", old.Status.MaxWatches, cfg.Status.MaxWatches)
	check("status.ignore", old.Status.Ignore, cfg.Status.Ignore)
	// The federation's identity, trust, timing and broker connection are
	// set up once, when serve starts (docs/FEDERATION.md).
	check("federation", federationKeys(old), federationKeys(cfg))
	return out
}

// federationKeys is what of cfg the serve daemon's federation was built
// from: [federation] as written (not the line it is on) and, with it, the
// broker it connects to; nil without [federation].
func federationKeys(cfg *registry.Config) any {
	f := cfg.Federation
	if f == nil {
		return nil
	}
	k := struct {
		Host, Vhost, KeyFile, AMQP, Mgmt string
		Heartbeat, ControlTimeout        time.Duration
		Trust                            []string
	}{Host: f.Host, Vhost: f.Vhost, KeyFile: f.KeyFile, Heartbeat: f.Heartbeat.Duration, ControlTimeout: f.ControlTimeout.Duration, Trust: f.Trust}
	if b := cfg.Broker; b != nil {
		k.AMQP, k.Mgmt = b.AMQPURL, b.ManagementURL
	}
	return k
}

// Fleet returns fleet name as the Manager knows it: from the config in
// force, else — for a fleet the config no longer defines but whose record
// says it may still run (retired) — rebuilt from what its last start
// recorded (Launch), with the config's manager-wide defaults for the rest.
// Any other name is the config's error, which lists the fleets the file
// defines.
func (m *Manager) Fleet(name string) (*registry.Fleet, error) {
	cfg := m.Config()
	f, err := cfg.Fleet(name)
	if err == nil {
		return f, nil
	}
	if rf := m.retired(cfg, name); rf != nil {
		return rf, nil
	}
	return nil, err
}

// InConfig reports whether the config in force defines fleet name.
func (m *Manager) InConfig(name string) bool {
	_, ok := m.Config().Fleets[name]
	return ok
}

// Names returns, sorted, the fleets the config defines and the retired
// ones (removed from it while they may still run): every fleet that can be
// listed and stopped.
func (m *Manager) Names() []string {
	cfg := m.Config()
	return slices.Sorted(slices.Values(append(cfg.Names(), m.retiredNames(cfg)...)))
}

// Retired returns, sorted, the fleets the config no longer defines whose
// records say they may still run.
func (m *Manager) Retired() []string { return m.retiredNames(m.Config()) }

func (m *Manager) retiredNames(cfg *registry.Config) []string {
	ents, err := os.ReadDir(filepath.Join(cfg.Manager.StateDir, "fleets"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); e.IsDir() && cfg.Fleets[n] == nil && m.retired(cfg, n) != nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// retired rebuilds fleet name, which cfg does not define, from its state
// record when that record says it may still run: wanted running, or a
// recorded fleetd or herdr server alive. nil otherwise (also for a name
// that is not a fleet name, so a caller's text never reaches a path).
func (m *Manager) retired(cfg *registry.Config, name string) *registry.Fleet {
	if !registry.ValidFleetName(name) || cfg.Fleets[name] != nil {
		return nil
	}
	dir := filepath.Join(cfg.Manager.StateDir, "fleets", name)
	st, err := readState(filepath.Join(dir, "state.json"), name)
	if err != nil || !(st.Desired == DesiredRunning || alive(st.Fleetd) || alive(st.Herdr)) {
		return nil
	}
	f := &registry.Fleet{Name: name, Port: st.Port, HerdrSession: name, MCPPath: registry.DefaultMCPPath,
		StateDir: dir, LogDir: dir, Env: map[string]string{},
		CallTimeout: cfg.Manager.CallTimeout, Restart: cfg.Manager.Restart}
	if l := st.Launch; l != nil {
		f.HerdrSession, f.Project, f.WorktreeRoot, f.Host = l.HerdrSession, l.Project, l.WorktreeRoot, l.Host
		f.Vhost, f.BrokerUser = l.Vhost, l.BrokerUser
		if l.MCPPath != "" {
			f.MCPPath = l.MCPPath
		}
	} else if st.HerdrSocket != "" {
		// A record from before Launch existed: herdr's socket is
		// <config>/sessions/<session>/herdr.sock.
		f.HerdrSession = filepath.Base(filepath.Dir(st.HerdrSocket))
	}
	return f
}

// startable returns fleet name from cfg for a start or restart: a retired
// fleet can only be stopped, and the error says so and how to get it back.
// A fleet that would share its herdr session, port, vhost or worktree root
// with a retired fleet that may still run is refused too: the file's own
// isolation rules (registry) cannot see fleets it no longer names.
func (m *Manager) startable(cfg *registry.Config, name string) (*registry.Fleet, error) {
	f, err := cfg.Fleet(name)
	if err == nil {
		for _, rn := range m.retiredNames(cfg) {
			r := m.retired(cfg, rn)
			if r == nil {
				continue
			}
			var what string
			switch {
			case r.HerdrSession == f.HerdrSession:
				what = "herdr session " + f.HerdrSession
			case r.Port == f.Port && f.Port != 0:
				what = fmt.Sprintf("port %d", f.Port)
			case r.Vhost != "" && r.Vhost == f.Vhost:
				what = "broker vhost " + f.Vhost
			case r.WorktreeRoot != "" && r.WorktreeRoot == f.WorktreeRoot:
				what = "worktree root " + f.WorktreeRoot
			default:
				continue
			}
			return nil, fmt.Errorf("fleet %s would share its %s with fleet %s, which is no longer in %s but may still run; stop it first (`fleetmgr stop %s`)",
				name, what, rn, cfg.Path, rn)
		}
		return f, nil
	}
	if m.retired(cfg, name) != nil {
		return nil, fmt.Errorf("fleet %s is no longer in %s (it was removed while it ran); it can be stopped (`fleetmgr stop %s`), not started: add [fleets.%s] back and run `fleetmgr reload` to manage it again",
			name, cfg.Path, name, name)
	}
	return nil, err
}

// Launch is what a fleet's last start was made from, recorded in its
// state before anything is spawned: enough to list, reach and stop the
// fleet once the file no longer defines it, and a digest per setting to
// tell whether the file now asks for something else (a restart pending).
type Launch struct {
	// Config is the fleets.toml the start read.
	Config       string `json:"config"`
	HerdrSession string `json:"herdr_session"`
	Project      string `json:"project"`
	WorktreeRoot string `json:"worktree_root,omitempty"`
	MCPPath      string `json:"mcp_path"`
	Host         string `json:"host,omitempty"`
	Vhost        string `json:"vhost,omitempty"`
	BrokerUser   string `json:"broker_user,omitempty"`
	// Settings maps each key that shapes the fleet's processes (see
	// settingsOf) to a digest of its value, never the value itself
	// (env values may be secrets).
	Settings map[string]string `json:"settings"`
	// At is when the start began.
	At time.Time `json:"at"`
}

// launchOf is the Launch record of a start of f under cfg.
func launchOf(cfg *registry.Config, f *registry.Fleet) *Launch {
	return &Launch{Config: cfg.Path, HerdrSession: f.HerdrSession, Project: f.Project, WorktreeRoot: f.WorktreeRoot,
		MCPPath: f.MCPPath, Host: f.Host, Vhost: f.Vhost, BrokerUser: f.BrokerUser,
		Settings: settingsOf(cfg, f), At: time.Now().UTC()}
}

// notApplied are the registry.Fleet fields left out of settingsOf: the
// name itself, where it was written, derived directories, and what applies
// without a restart (the supervisor's policy and call_timeout are read from
// the config in force on every use; host decides whether fleetmgr
// supervises at all; tools is the proxy's, applied by the reload itself).
var notApplied = map[string]bool{"Name": true, "Line": true, "PortAllocated": true, "StateDir": true, "LogDir": true,
	"Restart": true, "CallTimeout": true, "Host": true, "Tools": true}

// settingsOf maps every setting that a start of f under cfg bakes into the
// fleet's processes to a short digest of its value: each field of
// registry.Fleet (keyed as in fleets.toml, e.g. "worktree_root"; a field
// added later is covered without a change here) but those in notApplied,
// plus the [manager] and [broker] keys a start uses ("manager.herdr_bin",
// "manager.log_max_mb", "manager.log_max_backups", "manager.pass_env",
// "broker.amqp_url").
func settingsOf(cfg *registry.Config, f *registry.Fleet) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(*f)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if fd := t.Field(i); fd.IsExported() && !notApplied[fd.Name] {
			out[snakeCase(fd.Name)] = digest(v.Field(i).Interface())
		}
	}
	out["manager.herdr_bin"] = digest(cfg.Manager.HerdrBin)
	out["manager.log_max_mb"] = digest(cfg.Manager.LogMaxMB)
	out["manager.log_max_backups"] = digest(cfg.Manager.LogMaxBackups)
	out["manager.pass_env"] = digest(cfg.Manager.PassEnv)
	amqp := ""
	if cfg.Broker != nil {
		amqp = cfg.Broker.AMQPURL
	}
	out["broker.amqp_url"] = digest(amqp)
	return out
}

// digest is the first 16 hex digits of the SHA-256 of v's JSON encoding
// (maps encode with sorted keys, so equal values give equal digests).
func digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, "%#v", v)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// snakeCase turns a Go field name into its fleets.toml key:
// "WorktreeRoot" → "worktree_root", "MCPPath" → "mcp_path",
// "BrokerURIEnv" → "broker_uri_env".
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// diffSettings returns, sorted, the keys whose digests differ between
// was and now (a key only one of them has counts when that side's value is
// not the zero digest of an absent setting).
func diffSettings(was, now map[string]string) []string {
	var out []string
	for k, v := range now {
		if w, ok := was[k]; ok && w != v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// retireOldHerdr stops the herdr session a fleet's earlier start used at
// oldSock when this start resolves another socket (herdr_session changed
// since, applied by this start): otherwise it would keep running, with its
// panes, outside every record. A session at the same socket is left to
// the start, which reuses it when it answers.
func (m *Manager) retireOldHerdr(ctx context.Context, st *State, oldSock string, grace time.Duration, step func(string, string)) {
	if oldSock == "" || oldSock == st.HerdrSocket {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, perr := herdr.New(oldSock).Ping(pctx)
	cancel()
	switch {
	case perr != nil && !alive(st.Herdr):
		// gone already
	case !st.HerdrOwned:
		step("herdr session", fmt.Sprintf("previous session at %s left running: fleetmgr did not start it (the fleet's herdr session changed)", oldSock))
	default:
		_, detail := m.stopHerdr(ctx, st, oldSock, grace)
		step("herdr session", fmt.Sprintf("previous session at %s: %s (the fleet's herdr session changed)", oldSock, detail))
	}
	st.Herdr, st.HerdrOwned = nil, false
}

// Lines describes the report for people, one line per fact: what was
// added, removed (and still running), changed, awaiting a restart, and
// what only a new serve applies.
func (r *ReloadReport) Lines() []string {
	out := []string{fmt.Sprintf("reloaded %s (generation %d): %d fleet(s) %s", r.Config, r.Generation, len(r.Fleets), strings.Join(r.Fleets, ", "))}
	if len(r.Added) > 0 {
		out = append(out, "added: "+strings.Join(r.Added, ", ")+" (start with `fleetmgr start NAME`)")
	}
	for _, n := range r.Removed {
		if slices.Contains(r.Retired, n) {
			out = append(out, fmt.Sprintf("removed: %s, still running: listed as not in the config and never restarted; `fleetmgr stop %s` stops it", n, n))
		} else {
			out = append(out, "removed: "+n)
		}
	}
	for _, n := range r.Changed {
		if keys := r.RestartPending[n]; len(keys) > 0 {
			out = append(out, fmt.Sprintf("changed: %s (%s): restart pending, `fleetmgr restart %s` applies it", n, strings.Join(keys, ", "), n))
		} else {
			out = append(out, fmt.Sprintf("changed: %s (applies at its next start)", n))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(r.RestartPending)) {
		if !slices.Contains(r.Changed, n) { // started before an earlier change, or by a start that raced a reload
			out = append(out, fmt.Sprintf("restart pending: %s (%s), `fleetmgr restart %s` applies it", n, strings.Join(r.RestartPending[n], ", "), n))
		}
	}
	if len(r.ServeRestart) > 0 {
		out = append(out, "not applied until fleetmgr serve restarts: "+strings.Join(r.ServeRestart, ", "))
	}
	return out
}
