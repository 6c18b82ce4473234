package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// ErrUnverifiedListener is wrapped by VerifyListener's refusals: the
// process on a fleet's port is not (or cannot be shown to be) its fleetd.
var ErrUnverifiedListener = errors.New("listener is not the fleet's recorded fleetd")

// VerifyListener checks that the process listening on 127.0.0.1:<port> of
// fleet name is the fleetd fleetmgr started for it: every holder of that
// listening socket (procfs.TCPListenerPIDs) must be the recorded fleetd
// (state.json's, or the one an in-progress start spawned,
// <fleet dir>/fleetd.spawned.json, judged as before a signal: boot id, exe,
// FLEET_NAME) or a process in that fleetd's session.
// Otherwise — another same-uid process bound the port after fleetd died
// and answers /healthz with the fleet's name, or the state
// cannot be read — it returns an error naming the holder pid and the
// fleet, and nothing should be forwarded there. A fleet on another host is
// not checked (its listener is not a local process of ours). ctx is
// accepted for callers' deadlines; the check reads procfs only.
func (m *Manager) VerifyListener(ctx context.Context, name string) error {
	return m.VerifyListenerOn(ctx, name, 0)
}

// VerifyListenerOn is VerifyListener for the listener on 127.0.0.1:port
// (the port a connection was made to); port 0 means the fleet's own: the
// one its recorded fleetd runs on (which a reload that changed the fleet's
// port leaves in place until its next start), else the configured one.
func (m *Manager) VerifyListenerOn(ctx context.Context, name string, port int) error {
	f, err := m.Fleet(name)
	if err != nil {
		return err
	}
	if f.Host != "" && f.Host != registry.LocalHost {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, serr := readState(m.statePath(name), name)
	if port == 0 {
		port = f.Port
		if serr == nil && st.Port != 0 && alive(st.Fleetd) {
			port = st.Port
		}
	}
	pids, err := procfs.TCPListenerPIDs(port)
	if errors.Is(err, procfs.ErrNotFound) {
		return nil // nobody listens: the connection fails on its own, as "fleet down"
	}
	if err != nil {
		return fmt.Errorf("fleet %s: cannot tell which process listens on 127.0.0.1:%d (%v); refusing to forward to it: %w", name, port, err, ErrUnverifiedListener)
	}
	if serr != nil {
		return fmt.Errorf("fleet %s: %v: %w", name, serr, ErrUnverifiedListener)
	}
	sids := map[int]bool{}
	var recorded []int
	for _, p := range []*Proc{st.Fleetd, m.readSpawned(name, "fleetd")} {
		if p != nil && m.recorded(p, fleetdRole(name)) { // a stale record vouches for nobody (identity.go)
			sids[p.PID] = true
			recorded = append(recorded, p.PID)
		}
	}
	for _, pid := range pids {
		if !sids[pid] && !sids[sessionOf(pid)] {
			return fmt.Errorf("fleet %s: 127.0.0.1:%d is held by pid %d, not by the fleetd fleetmgr started for fleet %s (recorded: %v); refusing to forward calls to it (stop pid %d, then `fleetmgr start %s`): %w",
				name, port, pid, name, recorded, pid, name, ErrUnverifiedListener)
		}
	}
	return nil
}
