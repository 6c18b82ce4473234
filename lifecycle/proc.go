package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
)

// spawn starts argv as the leader of a new session (setsid), so it has its
// own process group and no controlling terminal, with stdin from /dev/null
// and stdout/stderr appended to logPath. The caller owns the returned Cmd
// and must Wait on it (a daemon) or Release it (a one-shot CLI).
func spawn(argv []string, dir string, env []string, logPath string) (*exec.Cmd, Proc, error) {
	if len(argv) == 0 {
		return nil, Proc{}, errors.New("empty command")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, Proc{}, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, Proc{}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	boot, _ := procfs.BootID() // "" (unknown) where /proc does not say
	key, err := procfs.KeyOf(cmd.Process.Pid)
	if err != nil {
		// It already exited; the caller sees that when it waits.
		return cmd, Proc{PID: cmd.Process.Pid, BootID: boot}, nil
	}
	return cmd, Proc{PID: key.PID, StartTime: key.StartTime, BootID: boot}, nil
}

// alive reports whether p still names the same live (non-zombie) process.
func alive(p *Proc) bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	st, err := procfs.ReadStat(p.PID)
	if err != nil {
		return false
	}
	if p.StartTime != 0 && st.StartTime != p.StartTime {
		return false // pid reused
	}
	return st.State != 'Z' && st.State != 'X'
}

// sessionPIDs lists every live process whose session id is sid.
func sessionPIDs(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		if st.Session == sid || st.Pgrp == sid {
			out = append(out, pid)
		}
	}
	return out
}

// killSession ends every process of the session (and process group) led by
// p: SIGTERM to all of them, up to grace for them to go, then SIGKILL, then
// up to 2 s for the kernel to finish. It returns the pids still alive after
// that (normally none). A p that no longer names the process we started
// (its start time differs) is never signalled. It is for processes known
// to be ours without a record: this process's own children and processes
// just found by their environment; a process read from a record goes
// through Manager.killRecorded, which checks its identity first.
func killSession(ctx context.Context, p *Proc, grace time.Duration) []int {
	_, left := endSession(ctx, p, grace, nil)
	return left
}

// endSession is killSession returning also the pids it signalled. When p
// itself is gone, what is left in its session cannot be vouched for by p,
// so member (when not nil) is asked about each remaining process and only
// those it accepts are signalled or waited for.
func endSession(ctx context.Context, p *Proc, grace time.Duration, member func(pid int) bool) (signalled, left []int) {
	if p == nil || p.PID <= 1 {
		return nil, nil
	}
	if st, err := procfs.ReadStat(p.PID); err == nil && p.StartTime != 0 && st.StartTime != p.StartTime {
		// The pid now names another process. The kernel never reuses a pid
		// that is still some process's session or group id, so whatever
		// runs in session p.PID now is not ours: signal nothing.
		return nil, nil
	}
	sid := p.PID
	leader := alive(p)
	members := func() []int {
		pids := sessionPIDs(sid)
		if leader || member == nil {
			return pids
		}
		return slices.DeleteFunc(pids, func(pid int) bool { return !member(pid) })
	}
	seen := map[int]bool{}
	signalAll := func(sig syscall.Signal) {
		pids := members()
		if leader && alive(p) {
			_ = syscall.Kill(-sid, sig)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
			if !seen[pid] {
				seen[pid] = true
				signalled = append(signalled, pid)
			}
		}
	}
	if !leader && len(members()) == 0 {
		return nil, nil
	}
	signalAll(syscall.SIGTERM)
	if waitGone(ctx, members, grace) {
		return signalled, nil
	}
	signalAll(syscall.SIGKILL)
	if waitGone(ctx, members, 2*time.Second) {
		return signalled, nil
	}
	return signalled, members()
}

// waitGone waits up to d (or ctx) until members lists nobody.
func waitGone(ctx context.Context, members func() []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if len(members()) == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
