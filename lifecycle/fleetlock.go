package lifecycle

import "context"

// LockFleet takes fleet name's lock (the flock on <state_dir>/fleets/NAME/lock
// that every start, stop, restart and vhost deletion holds), waiting until
// ctx ends, and returns its release. `fleetmgr remove` holds it while it
// checks that the fleet is stopped, rewrites fleets.toml and deletes the
// fleet's state directory, so no start of that fleet runs in between. The
// lock is per open file: a holder must not call a Manager method that takes
// the same fleet's lock (Start, Stop, DeleteVhost …) before releasing it.
func (m *Manager) LockFleet(ctx context.Context, name string) (func(), error) {
	return m.lock(ctx, name)
}
