package procfs

import (
	"fmt"
	"io/fs"

	prom "github.com/prometheus/procfs"
)

// proc returns pid's /proc directory as prometheus/procfs reads it. A pid
// that does not run is an error wrapping fs.ErrNotExist.
func proc(pid int) (prom.Proc, error) {
	if pid <= 0 {
		return prom.Proc{}, fmt.Errorf("pid %d: invalid pid: %w", pid, fs.ErrNotExist)
	}
	pfs, err := prom.NewFS(procRoot)
	if err != nil {
		return prom.Proc{}, err
	}
	return pfs.Proc(pid)
}

// Environ returns the environment pid was started with (/proc/PID/environ),
// as "KEY=VALUE" strings in order (prometheus/procfs's Proc.Environ).
// Changes the process made to its own environment after exec are not
// visible. Reading another user's process needs privilege; the error then
// wraps fs.ErrPermission. A zombie's environment reads as an error
// wrapping syscall.ESRCH or as empty.
func Environ(pid int) ([]string, error) {
	p, err := proc(pid)
	if err == nil {
		var env []string
		if env, err = p.Environ(); err == nil {
			return env, nil
		}
	}
	return nil, fmt.Errorf("procfs: environ of pid %d: %w", pid, err)
}

// Exe returns the absolute path of pid's executable (the /proc/PID/exe
// link, prometheus/procfs's Proc.Executable). If the file was deleted
// after exec, the kernel's " (deleted)" suffix is kept, so callers can
// tell. A process that is gone, or has no executable (a kernel thread, a
// zombie), is an error wrapping fs.ErrNotExist: prometheus/procfs answers
// "" without an error there, which a caller comparing paths would take
// for another executable.
func Exe(pid int) (string, error) {
	p, err := proc(pid)
	if err == nil {
		var exe string
		if exe, err = p.Executable(); err == nil && exe != "" {
			return exe, nil
		} else if err == nil {
			err = fs.ErrNotExist
		}
	}
	return "", fmt.Errorf("procfs: exe of pid %d: %w", pid, err)
}

// UIDs returns pid's real and effective user ids, from the "Uid:" line of
// /proc/PID/status (prometheus/procfs's Proc.NewStatus).
func UIDs(pid int) (real, effective int, err error) {
	p, err := proc(pid)
	if err == nil {
		var st prom.ProcStatus
		if st, err = p.NewStatus(); err == nil {
			return int(st.UIDs[0]), int(st.UIDs[1]), nil
		}
	}
	return 0, 0, fmt.Errorf("procfs: uids of pid %d: %w", pid, err)
}
