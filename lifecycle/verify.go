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
// and answers /healthz with the fleet's name (red-team S5), or the state
// cannot be read — it returns an error naming the holder pid and the
// fleet, and nothing should be forwarded there. A fleet on another host is
// not checked (its listener is not a local process of ours). ctx is
// accepted for callers' deadlines; the check reads procfs only.
func (m *Manager) VerifyListener(ctx context.Context, name string) error {
	f, err := m.cfg.Fleet(name)
	if err != nil {
		return err
	}
	if f.Host != "" && f.Host != registry.LocalHost {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	pids, err := procfs.TCPListenerPIDs(f.Port)
	if errors.Is(err, procfs.ErrNotFound) {
		return nil // nobody listens: the connection fails on its own, as "fleet down"
	}
	if err != nil {
		return fmt.Errorf("fleet %s: cannot tell which process listens on 127.0.0.1:%d (%v); refusing to forward to it: %w", name, f.Port, err, ErrUnverifiedListener)
	}
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return fmt.Errorf("fleet %s: %v: %w", name, err, ErrUnverifiedListener)
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
				name, f.Port, pid, name, recorded, pid, name, ErrUnverifiedListener)
		}
	}
	return nil
}
