package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
)

// Never signal a stranger. A record (state.json, *.spawned.json) names a
// process by pid and start time, which name one process for one boot only:
// after a reboot the pair can name anything, and a forged file can name any
// live process with its true start time. So before a recorded process is
// signalled, it must also show that it is the one recorded:
//
//   - the boot it was recorded under (Proc.BootID) is the running one;
//   - its executable is the one recorded once it was ready (Proc.Exe; the
//     kernel's " (deleted)" suffix of a replaced binary is ignored);
//   - its identity: a herdr server has `--session <session>` in its argv,
//     fleetd (and every process it starts, which inherit its environment)
//     has FLEET_NAME=<fleet> in its environment.
//
// A record without BootID or Exe (written by an older fleetmgr) has them
// unknown and is judged by its identity alone. A process whose identity
// cannot be read (another user's) is not ours. A refusal is logged (WARN,
// with the reason), counted (fleetmgr_stale_records_total{fleet,reason})
// and nothing is signalled. docs/ARCHITECTURE.md "Lifecycle of one fleet".

// judged is a Manager's memory of its identity checks.
type judged struct {
	mu    sync.Mutex
	stale map[[2]string]uint64 // guarded by mu: refused records by fleet and reason

	bootOnce sync.Once
	boot     string // this boot's id, see Manager.bootID
}

// role is what a recorded process must show to be taken for the fleet's.
type role struct {
	kind    string // "fleetd" or "herdr", for messages
	fleet   string // the fleet; fleetd and its children carry FLEET_NAME=<fleet>
	session string // herdr: the server's --session value
	logPath string // herdr: its log copier (`fleetmgr logpipe --file <logPath>`) is the server's too
}

// fleetdRole is the identity of fleet name's fleetd and of every process
// in its session.
func fleetdRole(name string) role { return role{kind: "fleetd", fleet: name} }

// herdrRole is the identity of fleet name's herdr server: its session is
// the one whose socket st recorded (herdr's socket path is
// <config dir>/sessions/<session>/herdr.sock), else the configured one.
func (m *Manager) herdrRole(name string, st *State) role {
	r := role{kind: "herdr", fleet: name, logPath: m.LogPath(name, "herdr")}
	if st != nil && st.HerdrSocket != "" {
		r.session = filepath.Base(filepath.Dir(st.HerdrSocket))
	} else if f, err := m.Config().Fleet(name); err == nil {
		r.session = f.HerdrSession
	}
	return r
}

// Reasons a record is refused: the "reason" label of
// fleetmgr_stale_records_total.
const (
	StaleBootID    = "boot_id"    // recorded under another boot
	StalePIDReused = "pid_reused" // the pid now names a process with another start time
	StaleExe       = "exe"        // another executable than the one recorded
	StaleIdentity  = "identity"   // no --session / FLEET_NAME of the fleet
	StaleUnread    = "unreadable" // its identity cannot be read (another user's process)
)

// staleRecord is why a record was refused.
type staleRecord struct {
	code string // one of the Stale* reasons
	why  string // a sentence for logs and messages
}

// judge tells whether the live process p.PID is the one p records, for
// role r. It returns nil when it is, or when p names no live process
// (then there is nothing to refuse: see killRecorded). It never signals.
func (m *Manager) judge(p *Proc, r role) *staleRecord {
	if boot := m.bootID(); p.BootID != "" && boot != "" && p.BootID != boot {
		return &staleRecord{StaleBootID, fmt.Sprintf("%s pid %d was recorded under another boot (boot id %s, now %s)", r.kind, p.PID, p.BootID, boot)}
	}
	st, err := procfs.ReadStat(p.PID)
	if err != nil || st.State == 'Z' || st.State == 'X' {
		return nil
	}
	if p.StartTime != 0 && st.StartTime != p.StartTime {
		return &staleRecord{StalePIDReused, fmt.Sprintf("%s pid %d now names another process (start time %d, recorded %d)", r.kind, p.PID, st.StartTime, p.StartTime)}
	}
	if p.Exe != "" {
		exe, err := procfs.Exe(p.PID)
		if err != nil {
			return unreadable(p.PID, r, err)
		}
		if undeleted(exe) != undeleted(p.Exe) {
			return &staleRecord{StaleExe, fmt.Sprintf("%s pid %d runs %s, not the recorded %s", r.kind, p.PID, exe, p.Exe)}
		}
	}
	return r.identity(p.PID)
}

// identity checks pid's argv or environment for role r (nil: it matches).
func (r role) identity(pid int) *staleRecord {
	if r.kind == "herdr" {
		argv, err := procfs.Cmdline(pid)
		if err != nil {
			return unreadable(pid, r, err)
		}
		if !procfs.HasFlag(argv, "--session", r.session) {
			return &staleRecord{StaleIdentity, fmt.Sprintf("pid %d is not the herdr server of session %s (its argv is %q)", pid, r.session, clip(argv))}
		}
		return nil
	}
	ok, err := procfs.HasEnv(pid, "FLEET_NAME", r.fleet)
	if err != nil {
		return unreadable(pid, r, err)
	}
	if !ok {
		argv, _ := procfs.Cmdline(pid)
		return &staleRecord{StaleIdentity, fmt.Sprintf("pid %d (%q) has no FLEET_NAME=%s in its environment, so it is not fleet %s's fleetd", pid, clip(argv), r.fleet, r.fleet)}
	}
	return nil
}

// member reports whether pid, found in the session of a recorded process
// that has exited, belongs to role r: for fleetd, FLEET_NAME=<fleet> in its
// environment; for a herdr server, its argv, or its log copier's.
func (r role) member(pid int) bool {
	if r.identity(pid) == nil {
		return true
	}
	if r.kind == "herdr" && r.logPath != "" {
		argv, err := procfs.Cmdline(pid)
		return err == nil && slices.Contains(argv, "logpipe") && procfs.HasFlag(argv, "--file", r.logPath)
	}
	return false
}

func unreadable(pid int, r role, err error) *staleRecord {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		// Gone meanwhile, or exited and not yet reaped (a zombie's environ
		// reads ESRCH): nothing to refuse; its exit is seen as an exit.
		return nil
	}
	return &staleRecord{StaleUnread, fmt.Sprintf("%s pid %d: its identity cannot be read (%v), so it is not taken for ours", r.kind, pid, err)}
}

func undeleted(exe string) string { return strings.TrimSuffix(exe, " (deleted)") }

// clip shortens an argv for a message.
func clip(argv []string) []string {
	if len(argv) > 6 {
		return append(slices.Clip(argv[:6]), "…")
	}
	return argv
}

// killOutcome is what killRecorded did.
type killOutcome struct {
	// Stale is set when the record was refused: nothing was signalled.
	Stale *staleRecord
	// Running: the recorded process itself was alive (and ours).
	Running bool
	// Signalled are the pids signalled (the recorded process and what was
	// left in its session).
	Signalled []int
	// Left are the pids still alive after SIGKILL (normally none).
	Left []int
}

// detail says, for a stop's or restart's step, what was done about the
// recorded process p.
func (o killOutcome) detail(p *Proc) string {
	switch {
	case o.Stale != nil:
		return fmt.Sprintf("record was stale; nothing signalled (%s)", o.Stale.why)
	case o.Running:
		return fmt.Sprintf("stopped (pid %d)", p.PID)
	case len(o.Signalled) > 0:
		return fmt.Sprintf("pid %d had exited; ended %d process(es) left in its session %v", p.PID, len(o.Signalled), o.Signalled)
	default:
		return fmt.Sprintf("was not running (pid %d had exited)", p.PID)
	}
}

// killRecorded ends the session of p, a process read from a record of
// fleet r.fleet, as killSession does — but only once judge has found it to
// be the process recorded. A refused record is logged (WARN, with the
// reason), counted in StaleRecords and left alone. When p has exited, only
// the processes left in its session that show r's identity are signalled.
func (m *Manager) killRecorded(ctx context.Context, p *Proc, r role, grace time.Duration) killOutcome {
	if p == nil || p.PID <= 1 {
		return killOutcome{}
	}
	if s := m.judge(p, r); s != nil {
		m.refused(r.fleet, p, s)
		return killOutcome{Stale: s}
	}
	o := killOutcome{Running: alive(p)}
	o.Signalled, o.Left = endSession(ctx, p, grace, r.member)
	return o
}

// refused logs and counts one refused record.
func (m *Manager) refused(fleet string, p *Proc, s *staleRecord) {
	m.log.Warn("record was stale; nothing signalled", "fleet", fleet, "pid", p.PID, "reason", s.code, "detail", s.why)
	m.ids.mu.Lock()
	defer m.ids.mu.Unlock()
	if m.ids.stale == nil {
		m.ids.stale = map[[2]string]uint64{}
	}
	m.ids.stale[[2]string{fleet, s.code}]++
}

// StaleRecordCount is one series of fleetmgr_stale_records_total: how many
// times this Manager refused to signal the process a record of Fleet named,
// for Reason (one of the Stale* constants).
type StaleRecordCount struct {
	Fleet, Reason string
	N             uint64
}

// StaleRecords returns the refusals counted so far, sorted by fleet and
// reason.
func (m *Manager) StaleRecords() []StaleRecordCount {
	m.ids.mu.Lock()
	defer m.ids.mu.Unlock()
	out := make([]StaleRecordCount, 0, len(m.ids.stale))
	for k, n := range m.ids.stale {
		out = append(out, StaleRecordCount{Fleet: k[0], Reason: k[1], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Fleet != out[j].Fleet {
			return out[i].Fleet < out[j].Fleet
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// bootID is the running boot's id, read once per Manager ("" when /proc
// does not say: boot ids are then not compared).
func (m *Manager) bootID() string {
	m.ids.bootOnce.Do(func() { m.ids.boot, _ = procfs.BootID() })
	return m.ids.boot
}

// settle fills p.Exe from the live process once it is ready (its socket
// or /healthz answered, so any wrapper has exec'ed), for the checks above.
// A process still in the log pipe's wrapper (`fleetmgr logpipe … --
// argv`, which execs argv) is left without one.
func settle(p *Proc) {
	if p == nil || p.Exe != "" {
		return
	}
	if argv, err := procfs.Cmdline(p.PID); err != nil || (len(argv) > 1 && argv[1] == "logpipe") {
		return
	}
	if exe, err := procfs.Exe(p.PID); err == nil && alive(p) {
		p.Exe = exe
	}
}

// recorded reports whether p names a live process that is the one recorded
// for role r: alive (pid and start time) and judged ours.
func (m *Manager) recorded(p *Proc, r role) bool {
	return alive(p) && m.judge(p, r) == nil
}
