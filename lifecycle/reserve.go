package lifecycle

import (
	"errors"
	"syscall"

	"github.com/fleetmgr/fleetmgr/diskreserve"
)

// Reserve is the state dir's reserve (package diskreserve): serve makes it
// at start (KeepReserve) and a record write that meets ENOSPC releases it
// and writes again, so a full disk does not stop supervision (issue 25).
func (m *Manager) Reserve() *diskreserve.Reserve {
	m.reserveOnce.Do(func() { m.reserveRes = diskreserve.New(m.Config().Manager.StateDir, 0) })
	return m.reserveRes
}

// KeepReserve makes the state dir's reserve if it is missing and the file
// system has room (serve calls it at start and after each release, on the
// next record written). A failure is logged, never fatal.
func (m *Manager) KeepReserve() {
	made, err := m.Reserve().Ensure()
	switch {
	case err != nil:
		m.log.Warn("state dir: cannot make the space reserve; a full disk may stop supervision", "path", m.Reserve().Path(), "err", err)
	case made && m.Reserve().Released() > 0:
		m.log.Info("state dir: room again; the space reserve is made anew", "path", m.Reserve().Path())
	}
}

// writeRecord is writeState with the reserve, and writeState's one
// caller (Mutate's write): on ENOSPC it releases the state dir's reserve
// (once per episode, logged) and writes again. After a release, each
// later successful write tries to make the reserve again (it does once
// the file system has room).
func (m *Manager) writeRecord(path string, st *State) error {
	r := m.Reserve()
	for retried := false; ; retried = true {
		err := writeState(path, st)
		if errors.Is(err, syscall.ENOSPC) && !retried && r.Release() {
			m.log.Error("state dir: disk full; released the space reserve so fleets' records can still be written and supervision goes on; free space on the state dir's file system",
				"path", path, "reserve", r.Path(), "releases", r.Released())
			continue
		}
		if err == nil && r.Released() > 0 {
			m.KeepReserve()
		}
		return err
	}
}
