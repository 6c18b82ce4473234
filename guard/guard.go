// Package guard decides, once per connection, whether the peer process may
// use fleetmgr. fleetd trusts any caller outside a herdr pane as primary and
// fleetmgr is such a caller for every fleet, so a pane member that reached
// fleetmgr would act as primary everywhere (fleetd issue #160: "Members must
// never mount the manager"; docs/fleetd.md "Caller identity"). The rules are docs/SECURITY.md "What the guard checks"; the
// pane tests follow herdr's own way of finding a pane's processes (session id
// equal to the pane shell's pid: herdr's src/platform/linux.rs).
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
)

// Rule names the guard rule that refused a peer; it appears in every
// refusal log line and in the refusal counters.
type Rule string

// The guard's rules, in the order they are checked.
const (
	RuleUID            Rule = "uid"             // peer uid not in allowed_uids
	RuleUnresolved     Rule = "unresolved"      // peer pid/facts could not be read: fail closed
	RulePaneSession    Rule = "pane-session"    // session id equals a pane's shell_pid
	RulePaneForeground Rule = "pane-foreground" // process group equals a pane's foreground group
	RulePaneAncestor   Rule = "pane-ancestor"   // an ancestor is (in) a pane
	RuleHerdrChild     Rule = "herdr-child"     // a herdr server is an ancestor, or the parent of its session leader
	RuleHerdrEnv       Rule = "herdr-env"       // any herdr marker in its environment (IsHerdrMarker), unless all it names are operator sessions
	RuleHost           Rule = "host"            // HTTP Host/Origin not localhost (DNS rebinding)
	RuleToken          Rule = "token"           // remote listener: missing or wrong bearer token
)

// Session is one herdr session whose panes the guard must know: its name
// and API socket path.
type Session struct {
	Name   string
	Socket string
}

// Options configure a Guard.
type Options struct {
	// AllowedUIDs are the peer uids let through rule 1 (default: none, so
	// callers pass the manager's own uid).
	AllowedUIDs []int
	// OperatorSessions name herdr sessions whose panes may call (the
	// operator's own); registry refuses any that is a fleet's session.
	OperatorSessions []Session
	// Sessions lists the herdr sessions to inspect on each table refresh:
	// every fleet's plus every running session herdr lists.
	Sessions func(ctx context.Context) []Session
	// TableTTL bounds how long a pane table is reused (default 1 s). An
	// allow decision is only final on a table whose build began after the
	// peer process started (plus Settle): any pane the peer lives in existed
	// before the peer, so such a table lists it. Otherwise the table is
	// rebuilt once and the peer checked again.
	TableTTL time.Duration
	// Settle is how long after a peer's start a pane table must have begun
	// (default 50 ms): slack for herdr registering a pane whose first
	// process is the peer itself.
	Settle time.Duration
	// HerdrExes names the herdr server executables: absolute paths
	// (herdr_bin resolved) or base names; "herdr" is always included. A
	// peer descending from such a process, or whose session leader is its
	// child, is inside a pane of a herdr server wherever its socket lives,
	// so this rule needs no socket at all.
	HerdrExes []string
	// Log receives one Warn line per refusal.
	Log *slog.Logger
	// OnDecision, if set, is called for every decision (e.g. metrics).
	OnDecision func(Decision)
}

// Decision is the outcome for one peer.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Rule    Rule   `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
	PID     int    `json:"pid"`
	UID     int    `json:"uid"`
	Exe     string `json:"exe,omitempty"`
	Session string `json:"herdr_session,omitempty"`
	Pane    string `json:"pane,omitempty"`
	// EnvVars are the herdr markers found in the peer's environment (names only), for the
	// herdr-env rule; nil when none was read or found.
	EnvVars []string `json:"herdr_env,omitempty"`
}

// Error renders a refusal for the refused client.
func (d Decision) Error() string {
	return fmt.Sprintf("fleetmgr refused this caller (rule %s): %s", d.Rule, d.Reason)
}

type paneRef struct {
	session  string
	pane     string
	operator bool
	// shell identifies the pane's shell by pid and start time; a table
	// entry whose pid now names another process (pid reuse since the table
	// was built) is ignored.
	shell procfs.Key
}

// current reports whether the pane's shell pid still names the shell the
// table saw (or no process at all: a closed pane's leftovers still count).
func (r paneRef) current() bool {
	k, err := procfs.KeyOf(r.shell.PID)
	return err != nil || r.shell.StartTime == 0 || k.StartTime == r.shell.StartTime
}

type table struct {
	shells map[int]paneRef // shell_pid → pane
	fg     map[int]paneRef // foreground process group → pane
	failed []string        // sessions that are running but did not answer
	built  time.Time       // wall clock, when the build began (for the TTL)
	// since is when the build began on CLOCK_BOOTTIME, the clock process
	// start times use: every pane that existed then is in the table.
	since time.Duration
	// terms holds each listed pane's shell by terminal (socket and
	// terminal_id), for the next build (termShell).
	terms map[termKey]procfs.Key
}

// termKey names one pane's terminal: a herdr socket and the pane's
// terminal_id, unique to its PTY (it survives a pane.move).
type termKey struct{ socket, terminal string }

// Guard checks peers. It is safe for concurrent use.
type Guard struct {
	opt     Options
	opSocks map[string]string // operator socket path (cleaned) → session name
	opNames map[string]bool   // operator session names
	// herdrExes holds herdr server executables (paths and base names).
	herdrExes map[string]bool

	mu      sync.Mutex
	tab     *table
	refused sync.Map // Rule → *atomic.Int64
	served  atomic.Int64
}

// New returns a Guard with opt.
func New(opt Options) *Guard {
	if opt.TableTTL <= 0 {
		opt.TableTTL = time.Second
	}
	if opt.Settle <= 0 {
		opt.Settle = 50 * time.Millisecond
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{opt: opt, opSocks: map[string]string{}, opNames: map[string]bool{}, herdrExes: map[string]bool{"herdr": true}}
	for _, e := range opt.HerdrExes {
		g.herdrExes[e] = true
	}
	for _, s := range opt.OperatorSessions {
		g.opSocks[filepath.Clean(s.Socket)] = s.Name
		g.opNames[s.Name] = true
	}
	return g
}

// Refusals returns how many peers each rule has refused so far.
func (g *Guard) Refusals() map[Rule]int64 {
	out := map[Rule]int64{}
	g.refused.Range(func(k, v any) bool { out[k.(Rule)] = v.(*atomic.Int64).Load(); return true })
	return out
}

// Served returns how many peers were let through.
func (g *Guard) Served() int64 { return g.served.Load() }

// Record logs and counts a decision made outside Check (host, token).
func (g *Guard) Record(d Decision) Decision {
	if d.Allowed {
		g.served.Add(1)
	} else {
		v, _ := g.refused.LoadOrStore(d.Rule, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		attrs := []any{"rule", string(d.Rule), "pid", d.PID, "uid", d.UID,
			"exe", d.Exe, "herdr_session", d.Session, "pane", d.Pane, "reason", d.Reason}
		if len(d.EnvVars) > 0 {
			attrs = append(attrs, "herdr_env", strings.Join(d.EnvVars, ","))
		}
		g.opt.Log.Warn("guard refused a caller", attrs...)
	}
	if g.opt.OnDecision != nil {
		g.opt.OnDecision(d)
	}
	return d
}

// Check decides for the process pid whose kernel-reported uid is uid, and
// logs and counts the decision.
func (g *Guard) Check(ctx context.Context, pid, uid int) Decision {
	return g.Record(g.decide(ctx, pid, uid, 0))
}

// decide is Check without logging or counting. before, when not 0, is a
// time (CLOCK_BOOTTIME) by which the peer process existed — when its
// connection was accepted — so a process started later under its pid is
// not it.
func (g *Guard) decide(ctx context.Context, pid, uid int, before time.Duration) Decision {
	d, st, tab := g.check(ctx, pid, uid, 0, before)
	// An allow is final only on a table begun after the peer started (a
	// pane made a moment ago cannot slip through).
	// The same goes for refusals by rules that work without the table
	// (environment, herdr executable): the fresh table names the pane, or
	// finds it belongs to an operator session.
	if (d.Allowed || d.Rule == RuleHerdrEnv || d.Rule == RuleHerdrChild) && st != nil {
		if need := st.StartedSinceBoot() + g.opt.Settle; tab.since < need {
			d, _, _ = g.check(ctx, pid, uid, need, before)
		}
	}
	return d
}

// check applies the rules on a pane table begun no earlier than need (on
// CLOCK_BOOTTIME; 0: any cached table within the TTL). It returns the
// decision, the peer's stat (nil when unreadable) and the table used.
// The peer's facts are read from /proc one after another, some after the
// table is built (which can take as long as a herdr session takes to
// answer); a process that exits meanwhile and whose pid is taken by
// another would have the other's ancestry and environment judged, so an
// allow is final only if the pid still names the process whose stat was
// read first, and that process existed before (when not 0).
func (g *Guard) check(ctx context.Context, pid, uid int, need, before time.Duration) (d Decision, self *procfs.Stat, tab *table) {
	defer func() {
		if !d.Allowed || self == nil {
			return
		}
		if k, err := procfs.KeyOf(pid); err != nil || k.StartTime != self.StartTime {
			d = Decision{PID: pid, UID: uid, Exe: d.Exe, Rule: RuleUnresolved,
				Reason: "the peer process exited while it was checked, and its pid names another process now (pid reuse): its facts cannot be trusted"}
		}
	}()
	d = Decision{PID: pid, UID: uid}
	tab = &table{}
	if exe, err := procfs.Exe(pid); err == nil {
		d.Exe = exe
	}
	if pid <= 0 {
		d.Rule, d.Reason = RuleUnresolved, "the peer process could not be identified"
		return
	}
	if !slices.Contains(g.opt.AllowedUIDs, uid) {
		d.Rule, d.Reason = RuleUID, fmt.Sprintf("uid %d is not in [guard] allowed_uids %v", uid, g.opt.AllowedUIDs)
		return
	}
	self, err := procfs.ReadStat(pid)
	if err != nil {
		d.Rule, d.Reason = RuleUnresolved, fmt.Sprintf("cannot read the peer process: %v", err)
		return
	}
	if before > 0 && self.StartedSinceBoot() > before {
		d.Rule, d.Reason = RuleUnresolved, fmt.Sprintf("pid %d names a process that started after the connection was made: the peer exited and its pid was reused", pid)
		return d, nil, tab
	}
	tab = g.table(ctx, need)
	if len(tab.failed) > 0 {
		d.Rule, d.Reason = RuleUnresolved, fmt.Sprintf("herdr session(s) %s are running but did not list their panes, so pane membership cannot be ruled out", strings.Join(tab.failed, ", "))
		return
	}
	// Structural rules: the peer, then each ancestor up to pid 1.
	chain := []*procfs.Stat{self}
	if anc, err := procfs.Ancestors(pid); err == nil {
		for _, a := range anc {
			if st, err := procfs.ReadStat(a); err == nil {
				chain = append(chain, st)
			}
		}
	} else {
		d.Rule, d.Reason = RuleUnresolved, fmt.Sprintf("cannot walk the peer's ancestors: %v", err)
		return
	}
	var opMatch *paneRef
	for i, st := range chain {
		for _, m := range []struct {
			key  int
			in   map[int]paneRef
			rule Rule
			what string
		}{
			{st.Session, tab.shells, RulePaneSession, "session id %d is the shell of pane %s in herdr session %s"},
			{st.PID, tab.shells, RulePaneAncestor, "pid %d is the shell of pane %s in herdr session %s"},
			{st.Pgrp, tab.fg, RulePaneForeground, "process group %d is the foreground job of pane %s in herdr session %s"},
		} {
			ref, ok := m.in[m.key]
			if !ok || !ref.current() {
				continue
			}
			if ref.operator {
				r := ref
				opMatch = &r
				continue
			}
			rule := m.rule
			who := "the peer's"
			if i > 0 {
				rule, who = RulePaneAncestor, fmt.Sprintf("its ancestor %d (%s):", st.PID, st.Comm)
			}
			d.Rule, d.Session, d.Pane = rule, ref.session, ref.pane
			d.Reason = who + " " + fmt.Sprintf(m.what, m.key, ref.pane, ref.session)
			return
		}
	}
	// herdr servers in the ancestry, found by executable: this holds for a
	// pane of any herdr server, even one whose socket the guard cannot see
	// (another XDG_CONFIG_HOME, an overridden socket path).
	for i, st := range chain {
		if d2, hit := g.herdrRule(st, chain[:i], tab); hit {
			d.Rule, d.Reason = d2.Rule, d2.Reason
			return
		}
	}
	env, err := procfs.Environ(pid)
	if err != nil {
		d.Rule, d.Reason = RuleUnresolved, fmt.Sprintf("cannot read the peer's environment: %v", err)
		return
	}
	if f := readEnv(env, g.opSocks, g.opNames); len(f.vars) > 0 {
		d.EnvVars, d.Pane = f.names, f.pane
		if f.allowed() {
			d.Allowed, d.Session = true, f.sessions[0]
			d.Reason = "started from operator session " + strings.Join(f.sessions, ", ")
			return
		}
		d.Rule, d.Reason = RuleHerdrEnv, f.reason()
		if len(f.foreign) > 0 {
			d.Session = f.foreign[0]
		}
		return
	}
	d.Allowed = true
	if opMatch != nil {
		d.Session, d.Pane, d.Reason = opMatch.session, opMatch.pane, "pane of operator session "+opMatch.session
	}
	return
}

// sessionOfSocket names the herdr session of an API socket path as herdr
// lays them out (<config>/sessions/NAME/herdr.sock, or <config>/herdr.sock
// for "default"); "" when the path has neither shape.
func sessionOfSocket(sock string) string {
	if sock == "" || filepath.Base(sock) != "herdr.sock" {
		return ""
	}
	dir := filepath.Dir(sock)
	if filepath.Base(filepath.Dir(dir)) == "sessions" {
		return filepath.Base(dir)
	}
	return "default"
}

// isHerdr reports whether pid runs a herdr server executable.
func (g *Guard) isHerdr(pid int) (string, bool) {
	exe, err := procfs.Exe(pid)
	if err != nil {
		return "", false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	return exe, g.herdrExes[exe] || g.herdrExes[filepath.Base(exe)]
}

// herdrRule applies the herdr-child rule to st, one process of the peer's
// chain (below lists the chain's processes under it, nearest last): st
// itself a herdr server, or st's session leader a child of one. Panes of
// operator sessions are let through.
func (g *Guard) herdrRule(st *procfs.Stat, below []*procfs.Stat, tab *table) (Decision, bool) {
	if len(below) > 0 {
		if exe, ok := g.isHerdr(st.PID); ok {
			child := below[len(below)-1]
			if ref, isShell := tab.shells[child.PID]; isShell && ref.operator {
				return Decision{}, false
			}
			return Decision{Rule: RuleHerdrChild, Reason: fmt.Sprintf("it descends from herdr server pid %d (%s) through pid %d (%s)", st.PID, exe, child.PID, child.Comm)}, true
		}
	}
	if st.Session > 1 && st.Session != st.PID {
		if leader, err := procfs.ReadStat(st.Session); err == nil && leader.PPID > 1 {
			if exe, ok := g.isHerdr(leader.PPID); ok {
				if ref, isShell := tab.shells[leader.PID]; isShell && ref.operator {
					return Decision{}, false
				}
				return Decision{Rule: RuleHerdrChild, Reason: fmt.Sprintf("pid %d's session leader %d (%s) is a child of herdr server pid %d (%s): a pane shell", st.PID, leader.PID, leader.Comm, leader.PPID, exe)}, true
			}
		}
	}
	return Decision{}, false
}

// table returns the cached pane table, rebuilding it when older than the
// TTL or begun before need (CLOCK_BOOTTIME; 0: no such demand).
func (g *Guard) table(ctx context.Context, need time.Duration) *table {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t := g.tab; t != nil && time.Since(t.built) < g.opt.TableTTL && t.since >= need {
		return t
	}
	g.tab = g.build(ctx)
	return g.tab
}

// Each build lists every session's panes anew (pane.list: so a pane made a
// moment ago is in it), but asks pane.process_info only of panes it has not
// seen before: a pane's shell_pid is fixed for its terminal's life, so a
// pane the last table had, whose shell still runs (pid and start time),
// keeps it, and its foreground process group is read where herdr reads it
// (the tpgid of /proc/<shell_pid>/stat). A table then costs one request per
// session instead of one per pane, which every new caller (each
// `fleetmgr status`) made herdr answer (issue 26).
func (g *Guard) build(ctx context.Context) *table {
	prev := g.tab // g.mu is held (table)
	t := &table{shells: map[int]paneRef{}, fg: map[int]paneRef{}, built: time.Now(), terms: map[termKey]procfs.Key{}}
	t.since, _ = procfs.SinceBoot()
	seen := map[string]bool{}
	var sessions []Session
	if g.opt.Sessions != nil {
		sessions = g.opt.Sessions(ctx)
	}
	sessions = append(sessions, g.opt.OperatorSessions...)
	type result struct {
		s      Session
		panes  map[int]paneRef
		fg     map[int]paneRef
		terms  map[termKey]procfs.Key
		failed bool
	}
	var wg sync.WaitGroup
	results := make(chan result, len(sessions))
	for _, s := range sessions {
		if seen[s.Socket] {
			continue
		}
		seen[s.Socket] = true
		wg.Add(1)
		go func(s Session) {
			defer wg.Done()
			r := result{s: s, panes: map[int]paneRef{}, fg: map[int]paneRef{}, terms: map[termKey]procfs.Key{}}
			_, op := g.opSocks[filepath.Clean(s.Socket)]
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			hc := herdr.New(s.Socket)
			panes, err := hc.PaneList(cctx, "")
			if err != nil {
				// A socket that refuses connections is a stopped session.
				r.failed = herdr.SocketReachable(s.Socket) && !errors.Is(err, context.Canceled)
				results <- r
				return
			}
			for _, p := range panes {
				ref := paneRef{session: s.Name, pane: p.PaneID, operator: op}
				tk := termKey{s.Socket, p.TerminalID}
				if shell, fg, ok := prev.termShell(tk); ok {
					ref.shell = shell
					r.panes[shell.PID] = ref
					if fg > 0 {
						r.fg[fg] = ref
					}
					r.terms[tk] = shell
					continue
				}
				pi, err := hc.PaneProcessInfo(cctx, p.PaneID)
				if err != nil {
					if herdr.IsCode(err, "pane_not_found") {
						continue // closed meanwhile
					}
					r.failed = true
					break
				}
				if k, err := procfs.KeyOf(pi.ShellPID); err == nil {
					ref.shell = k
					if p.TerminalID != "" && pi.ShellPID > 0 {
						r.terms[tk] = k
					}
				} else {
					ref.shell = procfs.Key{PID: pi.ShellPID}
				}
				if pi.ShellPID > 0 {
					r.panes[pi.ShellPID] = ref
				}
				if pi.ForegroundProcessGroupID > 0 {
					r.fg[pi.ForegroundProcessGroupID] = ref
				}
			}
			results <- r
		}(s)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.failed {
			t.failed = append(t.failed, r.s.Name)
		}
		for k, v := range r.panes {
			t.shells[k] = v
		}
		for k, v := range r.fg {
			t.fg[k] = v
		}
		maps.Copy(t.terms, r.terms)
	}
	slices.Sort(t.failed)
	return t
}

// termShell returns the shell the table t (nil: none) saw in terminal k,
// with its foreground process group now (the tpgid of its stat; 0: none),
// when that shell still runs: same pid and start time. ok is false for a
// terminal t did not have, or whose shell is gone or unreadable: then
// pane.process_info is asked.
func (t *table) termShell(k termKey) (shell procfs.Key, fg int, ok bool) {
	if t == nil || k.terminal == "" {
		return procfs.Key{}, 0, false
	}
	shell, ok = t.terms[k]
	if !ok {
		return procfs.Key{}, 0, false
	}
	st, err := procfs.ReadStat(shell.PID)
	if err != nil || st.StartTime != shell.StartTime {
		return procfs.Key{}, 0, false
	}
	return shell, max(st.TPGID, 0), true
}
