package lifecycle

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Last-resort discovery: when the state dir was lost, is
// another one (XDG_STATE_HOME differs) or its state.json is corrupt,
// fleetmgr still finds a fleet's processes by the contract environment it
// gives every fleetd (env.go; docs/ARCHITECTURE.md "Lifecycle of one
// fleet"): FLEET_NAME=<name>
// and FLEET_HERDR_SOCKET=<the fleet's herdr socket>. Children of fleetd
// inherit both, so the scan also finds them.

// fleetSockets lists the herdr sockets fleet f's processes may carry in
// FLEET_HERDR_SOCKET: the one resolved from this Manager's environment and
// the one st recorded (when st is not nil).
func (m *Manager) fleetSockets(f *registry.Fleet, st *State) []string {
	socks := []string{m.HerdrSocket(f)}
	if st != nil && st.HerdrSocket != "" && st.HerdrSocket != socks[0] {
		socks = append(socks, st.HerdrSocket)
	}
	return socks
}

// discover returns, ascending, the live processes (never this one) whose
// environment has FLEET_NAME=name and FLEET_HERDR_SOCKET in socks.
// Processes whose environ cannot be read (other users') are skipped.
func discover(name string, socks []string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := procfs.Environ(pid)
		if err != nil {
			continue
		}
		if slices.Contains(env, "FLEET_NAME="+name) && slices.ContainsFunc(env, func(kv string) bool {
			v, ok := strings.CutPrefix(kv, "FLEET_HERDR_SOCKET=")
			return ok && slices.Contains(socks, v)
		}) {
			if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' && st.State != 'X' {
				out = append(out, pid)
			}
		}
	}
	return out
}

// sessionOf returns the session id of pid (0 when it is gone).
func sessionOf(pid int) int {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.Session
}

// killDiscovered ends the discovered processes pids: each one's whole
// session when it leads it (fleetd always does: spawn setsids it), and
// otherwise the process alone (SIGTERM, grace, SIGKILL). It returns the
// pids still alive afterwards.
func killDiscovered(ctx context.Context, pids []int, grace time.Duration) []int {
	var left []int
	done := map[int]bool{}
	for _, pid := range pids {
		sid := sessionOf(pid)
		if sid == 0 || done[sid] {
			continue
		}
		if sid == pid || slices.Contains(pids, sid) {
			done[sid] = true
			k, err := procKey(sid)
			if err != nil {
				continue
			}
			left = append(left, killSession(ctx, k, grace)...)
			continue
		}
		k, err := procKey(pid)
		if err != nil {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(grace)
		for alive(k) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(25 * time.Millisecond)
		}
		if alive(k) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(100 * time.Millisecond)
			if alive(k) {
				left = append(left, pid)
			}
		}
	}
	return left
}

// unrecorded returns the discovered processes of fleet f that fleetmgr's
// records do not account for: not in the session of the running recorded
// fleetd. Stragglers of a recorded fleetd that has exited (its children,
// its log copier draining) are ours: they are ended here, not reported.
func (m *Manager) unrecorded(ctx context.Context, f *registry.Fleet, st *State) []int {
	recorded := map[int]bool{}
	for _, p := range []*Proc{st.Fleetd, m.readSpawned(f.Name, "fleetd")} {
		if p != nil && !alive(p) {
			recorded[p.PID] = true
		}
	}
	var out, stray []int
	for _, pid := range discover(f.Name, m.fleetSockets(f, st)) {
		sid := sessionOf(pid)
		switch {
		case st.Fleetd != nil && alive(st.Fleetd) && sid == st.Fleetd.PID:
		case recorded[sid]:
			stray = append(stray, pid)
		default:
			out = append(out, pid)
		}
	}
	if len(stray) > 0 {
		m.log.Warn("ending leftovers of an exited fleetd", "fleet", f.Name, "pids", stray)
		killDiscovered(ctx, stray, m.Config().Manager.StopGrace.Duration)
	}
	return out
}

// leader returns the session leader among pids' sessions to name in a
// message: the first pid that leads its session, else the first pid.
func leader(pids []int) int {
	for _, p := range pids {
		if sessionOf(p) == p {
			return p
		}
	}
	return pids[0]
}
