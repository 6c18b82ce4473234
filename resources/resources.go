// Package resources measures what processes cost the machine: CPU (seconds
// and percent over the last interval), resident memory, process count and
// open file descriptors of a process tree, read from /proc through
// github.com/prometheus/procfs. It only reads when asked (Sampler.Take):
// fleetmgr samples when someone looks (a status, a watch, a scrape), never
// in the background.
package resources

import (
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// Usage is what a set of processes costs.
type Usage struct {
	// CPUPercent is CPU time used over the interval between the previous
	// snapshot and this one, as a percentage of one core (200 = two cores
	// busy); nil when no earlier snapshot saw these processes.
	CPUPercent *float64 `json:"cpu_percent,omitempty"`
	// CPUSeconds is the user + system CPU time the processes have used
	// since they started (a counter, for rates).
	CPUSeconds float64 `json:"cpu_seconds"`
	// RSSBytes is their resident memory, summed.
	RSSBytes uint64 `json:"rss_bytes"`
	// Procs is how many processes there are.
	Procs int `json:"procs"`
	// FDs is how many file descriptors they hold open, summed (those
	// /proc lets this user read).
	FDs int `json:"fds"`
}

// key identifies a process across snapshots: a pid with its start time
// (a reused pid is another process).
type key struct {
	pid   int
	start uint64
}

type proc struct {
	key
	ppid, sid int
	cpu       float64 // seconds
	rss       uint64  // bytes
}

// Snapshot is one read of every process on the machine.
type Snapshot struct {
	At       time.Time
	procs    map[int]*proc
	children map[int][]int
	prev     map[key]float64 // cpu seconds in the previous snapshot
	prevAt   time.Time
	fs       procfs.FS
	mount    string
	fdMu     sync.Mutex
	fdMemo   map[int]int
}

// Sampler takes snapshots and remembers the last one's CPU counters, so
// each snapshot's CPUPercent covers the interval since the previous one.
// Safe for concurrent use.
type Sampler struct {
	fs     procfs.FS
	mount  string
	mu     sync.Mutex
	prev   map[key]float64
	prevAt time.Time
}

// New returns a Sampler of the /proc at mountPoint ("" for /proc).
func New(mountPoint string) (*Sampler, error) {
	if mountPoint == "" {
		mountPoint = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(mountPoint)
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	return &Sampler{fs: fs, mount: mountPoint}, nil
}

// Last is when the previous Take read /proc (zero before the first): the
// start of the interval the next Take's CPU percentages cover.
func (s *Sampler) Last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prevAt
}

// Take reads every process's stat once and returns the snapshot; its
// CPUPercent values cover the time since the previous Take. Processes
// that exit while it reads are skipped.
func (s *Sampler) Take() (*Snapshot, error) {
	all, err := s.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	snap := &Snapshot{At: time.Now(), procs: make(map[int]*proc, len(all)), children: map[int][]int{}, fs: s.fs, mount: s.mount, fdMemo: map[int]int{}}
	for _, p := range all {
		st, err := p.Stat()
		if err != nil {
			continue // gone
		}
		pr := &proc{key: key{p.PID, st.Starttime}, ppid: st.PPID, sid: st.Session, cpu: st.CPUTime(), rss: uint64(max(st.ResidentMemory(), 0))}
		snap.procs[p.PID] = pr
		snap.children[st.PPID] = append(snap.children[st.PPID], p.PID)
	}
	cur := make(map[key]float64, len(snap.procs))
	for _, p := range snap.procs {
		cur[p.key] = p.cpu
	}
	s.mu.Lock()
	snap.prev, snap.prevAt = s.prev, s.prevAt
	s.prev, s.prevAt = cur, snap.At
	s.mu.Unlock()
	return snap, nil
}

// Tree returns the pids of roots and all their descendants that this
// snapshot saw, each once (a root it did not see is left out with its
// tree).
func (snap *Snapshot) Tree(roots ...int) []int {
	seen := map[int]bool{}
	var out []int
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] || snap.procs[pid] == nil {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range snap.children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		if r > 0 {
			walk(r)
		}
	}
	return out
}

// StartTime returns pid's start time in clock ticks since boot (procfs
// field 22), and whether the snapshot saw pid.
func (snap *Snapshot) StartTime(pid int) (uint64, bool) {
	p := snap.procs[pid]
	if p == nil {
		return 0, false
	}
	return p.start, true
}

// Usage sums pids' costs (pids the snapshot did not see count nothing).
// CPUPercent is set when the previous snapshot saw at least one of them
// and was taken at least 100 ms earlier; a process it did not see counts
// its whole CPU time since it started, within the interval.
func (snap *Snapshot) Usage(pids []int) Usage {
	var u Usage
	var delta float64
	known := false
	for _, pid := range pids {
		p := snap.procs[pid]
		if p == nil {
			continue
		}
		u.Procs++
		u.CPUSeconds += p.cpu
		u.RSSBytes += p.rss
		u.FDs += snap.fds(pid)
		if before, ok := snap.prev[p.key]; ok {
			known = true
			delta += max(p.cpu-before, 0)
		} else {
			delta += p.cpu
		}
	}
	if wall := snap.At.Sub(snap.prevAt); known && wall >= 100*time.Millisecond {
		pct := delta / wall.Seconds() * 100
		u.CPUPercent = &pct
	}
	return u
}

// fds counts pid's open descriptors (memoised per snapshot; 0 when /proc
// refuses).
func (snap *Snapshot) fds(pid int) int {
	snap.fdMu.Lock()
	n, ok := snap.fdMemo[pid]
	snap.fdMu.Unlock()
	if ok {
		return n
	}
	// Linux 6.2 and later give the count as /proc/PID/fd's size: one
	// stat instead of reading the directory.
	var st syscall.Stat_t
	if err := syscall.Stat(snap.fdDir(pid), &st); err == nil && st.Size > 0 {
		n = int(st.Size)
	} else if p, err := snap.fs.Proc(pid); err == nil {
		n, _ = p.FileDescriptorsLen()
	}
	snap.fdMu.Lock()
	snap.fdMemo[pid] = n
	snap.fdMu.Unlock()
	return n
}

// fdDir is /proc/PID/fd under the snapshot's mount point.
func (snap *Snapshot) fdDir(pid int) string {
	return snap.mount + "/" + strconv.Itoa(pid) + "/fd"
}

// Children returns the pids of pid's children this snapshot saw.
func (snap *Snapshot) Children(pid int) []int { return append([]int(nil), snap.children[pid]...) }
