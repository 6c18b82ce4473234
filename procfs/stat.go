package procfs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/procstat"
)

// procRoot is where procfs is mounted. It is a constant, not a variable:
// the package reads the running kernel's view only.
const procRoot = "/proc"

// ErrNotFound reports that a looked-up object (a socket in /proc/net/tcp*,
// or a process holding a socket inode) does not exist at the time of the
// scan.
var ErrNotFound = errors.New("procfs: not found")

// Stat is a process's /proc/PID/stat line as package procstat parses it
// (fields 1–8, 14, 15, 20, 22, 24 and 38): one type for the line, shared
// with package resources.
type Stat = procstat.Stat

// ReadStat reads and parses /proc/PID/stat with package procstat (a
// parser held to prometheus/procfs's answers by a differential fuzz test,
// at half its cost: the guard reads a caller's whole parent chain per
// connection). Fields after the command name are taken after the LAST
// ')' of the line, because the name itself may contain ')' and spaces. A
// process that no longer exists yields an error wrapping fs.ErrNotExist.
func ReadStat(pid int) (*Stat, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("procfs: read stat of pid %d: invalid pid", pid)
	}
	path := fmt.Sprintf("%s/%d/stat", procRoot, pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("procfs: read stat of pid %d: %w", pid, err)
	}
	st, err := procstat.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("procfs: parse %s: %w", path, err)
	}
	return &st, nil
}

// Key identifies a process robustly against pid reuse: a pid together with
// its start time (clock ticks since boot) names one process for the life of
// the system.
type Key struct {
	// PID is the process id.
	PID int
	// StartTime is /proc/PID/stat field 22, in clock ticks since boot.
	StartTime uint64
}

// KeyOf returns the Key of a running process. Two calls for the same pid
// return equal keys only if the pid was not reused in between.
func KeyOf(pid int) (Key, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return Key{}, err
	}
	return Key{PID: st.PID, StartTime: st.StartTime}, nil
}

// Ancestors returns the parent chain of pid: its parent first, then the
// parent's parent, up to and excluding 0. A process whose parent is 0 (pid 1,
// kthreadd) has no ancestors. The walk stops with an error if an ancestor
// vanishes mid-walk or the chain loops (which a consistent /proc never does).
func Ancestors(pid int) ([]int, error) {
	var chain []int
	seen := map[int]bool{pid: true}
	cur := pid
	for {
		st, err := ReadStat(cur)
		if err != nil {
			return chain, fmt.Errorf("procfs: ancestors of pid %d: %w", pid, err)
		}
		if st.PPID <= 0 {
			return chain, nil
		}
		if seen[st.PPID] {
			return chain, fmt.Errorf("procfs: ancestors of pid %d: loop at pid %d", pid, st.PPID)
		}
		seen[st.PPID] = true
		chain = append(chain, st.PPID)
		cur = st.PPID
	}
}

// ClockTicks is the kernel's USER_HZ, the unit of Stat.StartTime; it is 100
// on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const ClockTicks = procstat.ClockTicks

// SinceBoot returns the time since boot (CLOCK_BOOTTIME), the clock
// Stat.StartTime is measured on, so the two compare exactly: a process with
// StartTime t started SinceBoot() - t/ClockTicks seconds ago.
func SinceBoot() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("procfs: clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	return time.Duration(ts.Nano()), nil
}
