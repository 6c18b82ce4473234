package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	key, err := procfs.KeyOf(cmd.Process.Pid)
	if err != nil {
		// It already exited; the caller sees that when it waits.
		return cmd, Proc{PID: cmd.Process.Pid}, nil
	}
	return cmd, Proc{PID: key.PID, StartTime: key.StartTime}, nil
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
// that (normally none). A p that no longer names the process we started is
// never signalled.
func killSession(ctx context.Context, p *Proc, grace time.Duration) []int {
	if p == nil || p.PID <= 1 {
		return nil
	}
	if st, err := procfs.ReadStat(p.PID); err == nil && p.StartTime != 0 && st.StartTime != p.StartTime {
		// The pid now names another process. The kernel never reuses a pid
		// that is still some process's session or group id, so whatever
		// runs in session p.PID now is not ours: signal nothing.
		return nil
	}
	sid := p.PID
	signalAll := func(sig syscall.Signal) []int {
		pids := sessionPIDs(sid)
		if alive(p) {
			_ = syscall.Kill(-sid, sig)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		return pids
	}
	if !alive(p) && len(sessionPIDs(sid)) == 0 {
		return nil
	}
	signalAll(syscall.SIGTERM)
	if waitGone(ctx, sid, grace) {
		return nil
	}
	signalAll(syscall.SIGKILL)
	if waitGone(ctx, sid, 2*time.Second) {
		return nil
	}
	return sessionPIDs(sid)
}

func waitGone(ctx context.Context, sid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if len(sessionPIDs(sid)) == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
