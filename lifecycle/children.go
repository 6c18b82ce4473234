package lifecycle

import (
	"os/exec"
	"sync"
	"time"
)

// children are the processes a Manager started and reaps: each is waited
// for by a goroutine of its own (Manager.reap), so it never lingers as a
// zombie while this process lives, and how it ended is kept until the
// supervisor asks (exitOf) for its restart reason.
type children struct {
	mu    sync.Mutex
	cmds  map[int]*exec.Cmd // guarded by mu: started and not yet reaped, by pid
	exits map[int]string    // guarded by mu: how reaped ones ended, by pid, until taken
}

// add notes cmd as started.
func (c *children) add(cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmds == nil {
		c.cmds = map[int]*exec.Cmd{}
	}
	c.cmds[cmd.Process.Pid] = cmd
}

// reaped notes that cmd was waited for, and how it ended.
func (c *children) reaped(cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exits == nil {
		c.exits = map[int]string{}
	}
	c.exits[cmd.Process.Pid] = exitString(cmd)
	delete(c.cmds, cmd.Process.Pid)
}

// has reports whether pid is a child not reaped yet.
func (c *children) has(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.cmds[pid]
	return ok
}

// take returns, and forgets, how child pid ended when it was reaped
// (reaped true); else running says whether it is still a child.
func (c *children) take(pid int) (exit string, reaped, running bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.exits[pid]; ok {
		delete(c.exits, pid)
		return e, true, false
	}
	_, running = c.cmds[pid]
	return "", false, running
}

// reap waits for cmd in a goroutine (so it never lingers as a zombie while
// this process lives) and returns a channel closed when it exits.
func (m *Manager) reap(cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	m.kids.add(cmd)
	go func() {
		_ = cmd.Wait()
		m.kids.reaped(cmd)
		close(done)
	}()
	return done
}

// isChild reports whether pid is a process this Manager started and has not
// reaped yet.
func (m *Manager) isChild(pid int) bool { return m.kids.has(pid) }

// exitOf returns how child pid ended ("signal: killed", "exit status 3"),
// waiting up to d for its reaper; ok is false when pid is not this
// Manager's child or d passed first.
func (m *Manager) exitOf(pid int, d time.Duration) (status string, ok bool) {
	deadline := time.Now().Add(d)
	for {
		e, reaped, running := m.kids.take(pid)
		if reaped {
			return e, true
		}
		if !running || time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func exitString(cmd *exec.Cmd) string {
	if cmd.ProcessState == nil {
		return "exited"
	}
	return cmd.ProcessState.String()
}
