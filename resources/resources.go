// Package resources measures what processes cost the machine: CPU (seconds
// and percent over the last interval), resident memory, process count and
// open file descriptors of process trees, read from /proc. It only reads
// when asked (Sampler.Take): fleetmgr samples when someone looks (a
// status, a watch, a scrape), never in the background.
//
// A Take reads only the trees it is asked for (the fleets' fleetd and
// herdr servers), not every process on the machine.
//
// Most Takes do not list /proc: a process joins a tree only by being
// born into it, and the kernel names the last pid it allocated (loadavg's
// fifth field), so when every root was in the previous Take's trees, that
// Take is recent (listEvery) and at most maxNewPIDs pids were allocated
// since, a Take reads the previous trees' processes and the new pids one
// by one (a thread has a pid too, and a /proc/TID/stat that reads like
// its whole process's: its exit signal, -1, tells it). A tree process
// whose run time (/proc/PID/schedstat, kept open) has not moved since its
// last full read, and that has one thread, has not run: its CPU time,
// threads and descriptors cannot have changed, nor its memory but for the
// kernel's reclaim, so its figures are carried over (for at most
// statEvery); its parent ending makes it read again (it was re-parented).
//
// Otherwise a Take lists /proc's pid directories (one getdents pass) and
// reads /proc/PID/stat of the processes in the trees and of processes it
// has not met before. Which pid is whose child it remembers between
// Takes, keyed by the inode number /proc gives each pid directory: the
// kernel makes a new directory (a new inode number) for a new process, so
// a reused pid is read afresh. A remembered parent link is trusted while
// the parent it names is still listed with the same inode; a process only
// changes parent when its parent exits, and one outside every tree cannot
// move into one (it is re-parented to an ancestor, outside too).
//
// A tree process's stat, schedstat and fd directory are kept open between
// Takes (up to maxHandles processes; Close releases them): reading an open
// file again costs a third of opening it by path, and the open file names
// the process, not the pid (it fails with ESRCH once the process ended).
// Stat lines are parsed by package procstat (held to prometheus/procfs's
// parse by a differential fuzz test). The kernel's
// /proc/PID/task/TID/children files would give the trees directly, but
// need CONFIG_PROC_CHILDREN, which the kernels fleetmgr was measured on
// lack, so they are not used.
package resources

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/procstat"
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
	ppid int
	cpu  float64 // seconds
	rss  uint64  // bytes
	fds  int     // open descriptors (0 when /proc refuses)
	kept bool    // fds carried over from an earlier read (the process has not run since)
}

// lastRead is a tree process's last full read (its stat line and fd
// count), with its run time then: while the run time stays the same, the
// process has not run, so neither its CPU time, nor its memory (but
// for the kernel reclaiming it: statEvery bounds that), nor its threads
// and descriptors changed.
type lastRead struct {
	p       proc
	run     uint64 // ns, from /proc/PID/schedstat; 0: unknown
	threads int
	at      time.Time
}

// statEvery is how long a Take may carry a process's figures over while
// its run time says it has not run: the kernel can reclaim a sleeping
// process's pages, lowering its RSS without it running.
const statEvery = 10 * time.Second

// seen is what the Sampler remembers of one process between Takes.
type seen struct {
	ino   uint64 // of its /proc/PID directory
	ppid  int
	pino  uint64 // the parent's directory inode when ppid was read
	start uint64
}

// counted is a process's CPU counter as a Take read it.
type counted struct {
	cpu float64
	at  time.Time
}

// Snapshot is one read of the asked process trees.
type Snapshot struct {
	At       time.Time
	procs    map[int]*proc
	children map[int][]int
	prev     map[key]counted // CPU counters as earlier Takes read them
	prevAt   time.Time
}

// Sampler takes snapshots and remembers each process's last CPU counter,
// so a snapshot's CPUPercent covers the interval since a process was
// last read. Safe for concurrent use; Takes run one at a time.
type Sampler struct {
	mount  string
	mu     sync.Mutex
	prev   map[key]counted
	prevAt time.Time
	known  map[int]seen
	inTree map[int]bool // pids in the previous Take's trees
	open   *handles
	dents  []byte
	buf    []byte
	reads  atomic.Uint64 // Takes so far (Reads)
	lists  atomic.Uint64 // Takes that listed /proc (Listings)

	// ownNS: the mount's pids are this process's namespace's (its
	// /proc/self names os.Getpid()), so its loadavg's last pid counts
	// the pids the mount shows.
	ownNS    bool
	lastPID  int       // loadavg's last allocated pid at the previous Take; -1: unknown
	listedAt time.Time // when the last Take that listed /proc ran
	lastRead map[int]lastRead
	// full makes every Take list /proc and read every tree process's
	// stat line, noCarry every Take read every tree process's stat line
	// (BenchmarkSample's listed and ran variants: the costs when
	// nothing is known, and when every process ran since the last Take).
	full, noCarry bool
}

// maxNewPIDs is the most pids allocated since the previous Take that a
// Take reads one by one instead of listing /proc: probing a pid costs
// about as much as 1/100 of a listing on a machine of 700 processes.
const maxNewPIDs = 64

// listEvery is how often a Take lists /proc all the same (and how long
// ago the previous Take may be for it not to): it drops what the Sampler
// remembers of processes that ended outside its trees, and bounds how
// long a pid wrap that lands the allocation counter near where it was
// could hide a new process.
const listEvery = 30 * time.Second

// maxHandles bounds how many processes a Sampler keeps files open for
// (three descriptors each); the rest of a tree is read by opening its
// files afresh each Take.
const maxHandles = 1024

// handle is a tree process's /proc/PID/stat, /proc/PID/fd and
// /proc/PID/schedstat kept open between Takes: reading an open file again
// costs a third of opening it by path. They name the process, not the
// pid: once it has ended they fail with ESRCH, even if the pid runs
// another process.
type handle struct {
	ino              uint64 // of the /proc/PID directory they were opened in
	stat, fds, sched int    // descriptors; fds and sched -1 when they could not be opened
}

// handles are a Sampler's kept files, closed by Close or, failing that,
// when the Sampler is garbage.
type handles struct {
	mu sync.Mutex
	m  map[int]handle
}

func (h *handles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for pid, hd := range h.m {
		hd.close()
		delete(h.m, pid)
	}
}

func (hd handle) close() {
	_ = unix.Close(hd.stat)
	if hd.fds >= 0 {
		_ = unix.Close(hd.fds)
	}
	if hd.sched >= 0 {
		_ = unix.Close(hd.sched)
	}
}

// Close releases the files the Sampler keeps open; a later Take opens
// them again.
func (s *Sampler) Close() error {
	s.open.closeAll()
	return nil
}

// New returns a Sampler of the /proc at mountPoint ("" for /proc).
func New(mountPoint string) (*Sampler, error) {
	if mountPoint == "" {
		mountPoint = procfs.DefaultMountPoint
	}
	if _, err := procfs.NewFS(mountPoint); err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	s := &Sampler{mount: mountPoint, prev: map[key]counted{}, known: map[int]seen{}, inTree: map[int]bool{},
		open: &handles{m: map[int]handle{}}, dents: make([]byte, 32<<10), buf: make([]byte, 1024), lastPID: -1,
		lastRead: map[int]lastRead{}}
	if self, err := os.Readlink(mountPoint + "/self"); err == nil && self == strconv.Itoa(os.Getpid()) {
		s.ownNS = true
	}
	runtime.AddCleanup(s, (*handles).closeAll, s.open)
	return s, nil
}

// Listings is how many Takes listed all of /proc (the others read only
// the previous trees and the pids allocated since).
func (s *Sampler) Listings() uint64 { return s.lists.Load() }

// lastAllocated reads the last pid the kernel allocated (the fifth field
// of loadavg: "0.10 0.20 0.30 1/700 12345"); false when it cannot.
func (s *Sampler) lastAllocated() (int, bool) {
	fd, err := unix.Open(s.mount+"/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	n, err := unix.Read(fd, s.buf)
	_ = unix.Close(fd)
	if err != nil || n <= 0 || n == len(s.buf) {
		return 0, false
	}
	b := bytes.TrimRight(s.buf[:n], "\n")
	i := bytes.LastIndexByte(b, ' ')
	if i < 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(string(b[i+1:]))
	return pid, err == nil && pid >= 0
}

// Last is when the previous Take read /proc (zero before the first): the
// start of the interval the next Take's CPU percentages cover.
func (s *Sampler) Last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prevAt
}

// Reads is how many Takes the Sampler has made: each one reads /proc.
// What the rule "resources are read only when someone looks" is checked
// against (package status counts its samplers' reads with it).
func (s *Sampler) Reads() uint64 { return s.reads.Load() }

// Take reads the process trees of roots (each root pid and all its
// descendants) and returns the snapshot; its CPUPercent values cover the
// time since each process was last read. Roots that do not run are left
// out; processes that exit while it reads are skipped.
//
// When the previous Take, at most listEvery ago, had every root in its
// trees and the kernel allocated at most maxNewPIDs pids since (the last
// pid loadavg names), Take does not list /proc: a process can join a
// tree only by being born into it, so it reads the previous trees'
// processes and the pids allocated since, one by one (skipping threads,
// which have pids too). Otherwise it lists /proc.
func (s *Sampler) Take(roots ...int) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads.Add(1)
	now := time.Now()
	last, lastOK := s.lastAllocated()
	if !s.ownNS || s.full {
		lastOK = false
	}
	var snap *Snapshot
	var err error
	if lastOK && s.lastPID >= 0 && last >= s.lastPID && last-s.lastPID <= maxNewPIDs &&
		now.Sub(s.prevAt) <= listEvery && now.Sub(s.listedAt) <= listEvery && s.treesHold(roots) {
		snap = s.takeKnown(now, s.lastPID, last, roots)
	} else if snap, err = s.takeListed(now, roots); err != nil {
		return nil, err
	}
	s.lastPID = -1
	if lastOK {
		s.lastPID = last
	}
	clear(s.inTree)
	snap.prev = make(map[key]counted, len(snap.procs))
	for pid, p := range snap.procs {
		s.inTree[pid] = true
		if c, ok := s.prev[p.key]; ok {
			snap.prev[p.key] = c
		}
		s.prev[p.key] = counted{p.cpu, now}
	}
	s.prevAt = now
	return snap, nil
}

// treesHold reports whether every root was in the previous Take's trees.
func (s *Sampler) treesHold(roots []int) bool {
	for _, r := range roots {
		if r > 0 && !s.inTree[r] {
			return false
		}
	}
	return true
}

// takeKnown reads the previous Take's tree processes and the pids
// allocated after from up to to, and walks roots' trees in them.
func (s *Sampler) takeKnown(now time.Time, from, to int, roots []int) *Snapshot {
	fresh := make(map[int]*proc, len(s.inTree)+to-from)
	procs := make([]proc, 0, len(s.inTree)+to-from)
	// procs holds every process read or carried over: at most the new
	// pids and the previous trees' processes, so it never grows (the
	// pointers into it stay good).
	add := func(pid int, st procstat.Stat) {
		procs = append(procs, proc{key: key{pid, st.StartTime}, ppid: st.PPID, cpu: st.CPUTime(), rss: st.ResidentBytes()})
		fresh[pid] = &procs[len(procs)-1]
		s.known[pid] = seen{ppid: st.PPID, start: st.StartTime}
	}
	// ended are the processes found ended (gone, or zombies: the kernel
	// re-parents a process's children as it exits), whose children are
	// read again rather than carried over.
	ended := map[int]bool{}
	gone := func(pid int) {
		if k, ok := s.known[pid]; ok {
			delete(s.prev, key{pid, k.start})
			delete(s.known, pid)
		}
		ended[pid] = true
	}
	for pid := from + 1; pid <= to; pid++ {
		st, ok := s.statByPath(pid)
		if !ok {
			gone(pid)
			continue
		}
		if st.ExitSignal == -1 || st.PID != pid {
			continue // a thread, not a process
		}
		if k, ok := s.known[pid]; ok && k.start != st.StartTime {
			gone(pid)   // an earlier process of that pid ended
			s.drop(pid) // its kept files are not this one's
		}
		add(pid, st)
		if st.State == 'Z' || st.State == 'X' {
			ended[pid] = true
		}
	}
	// The previous trees' processes: those whose run time has not moved
	// since their last full read (single-threaded ones: schedstat counts
	// the leader thread only) are carried over, unless their parent has
	// ended (they have another now); the others are read.
	var full, idle []int
	runs := make(map[int]uint64, len(s.inTree))
	for pid := range s.inTree {
		if fresh[pid] != nil {
			continue
		}
		lr, ok := s.lastRead[pid]
		if ok && !s.noCarry && lr.threads == 1 && now.Sub(lr.at) < statEvery {
			run, alive := s.runTime(pid)
			switch {
			case !alive:
				gone(pid)
				continue
			case run != 0 && run == lr.run:
				idle = append(idle, pid)
				continue
			}
			runs[pid] = run
		}
		full = append(full, pid)
	}
	read := func(pid int) {
		run, ok := runs[pid]
		if lr, known := s.lastRead[pid]; !ok && (!known || lr.threads == 1) {
			// Read before the stat line: a run in between shows next
			// time. Not for a process last seen with more threads: its
			// leader's run time would not tell.
			run, _ = s.runTime(pid)
		}
		st, ok := s.stat(pid, 0, false)
		if !ok {
			gone(pid)
			return
		}
		add(pid, st)
		if st.State == 'Z' || st.State == 'X' {
			ended[pid] = true
		}
		if st.NumThreads != 1 {
			run = 0
		}
		s.lastRead[pid] = lastRead{p: *fresh[pid], run: run, threads: st.NumThreads, at: now}
	}
	for _, pid := range full {
		read(pid)
	}
	// A carried-over process whose parent ended is read (its parent is
	// another now), which may find it ended too: until none is left.
	for again := true; again; {
		again = false
		rest := idle[:0]
		for _, pid := range idle {
			if ended[s.lastRead[pid].p.ppid] {
				read(pid)
				again = true
			} else {
				rest = append(rest, pid)
			}
		}
		idle = rest
	}
	for _, pid := range idle {
		lr := s.lastRead[pid]
		procs = append(procs, lr.p)
		p := &procs[len(procs)-1]
		p.kept = true
		fresh[pid] = p
	}
	snap := &Snapshot{At: now, procs: make(map[int]*proc, len(fresh)), children: map[int][]int{}, prevAt: s.prevAt}
	kids := make(map[int][]int, len(fresh))
	for pid, p := range fresh {
		kids[p.ppid] = append(kids[p.ppid], pid)
	}
	var walk func(p *proc)
	walk = func(p *proc) {
		snap.procs[p.pid] = p
		for _, c := range kids[p.pid] {
			if _, done := snap.procs[c]; !done {
				snap.children[p.pid] = append(snap.children[p.pid], c)
				walk(fresh[c])
			}
		}
	}
	for _, r := range roots {
		if p := fresh[r]; r > 0 && p != nil && snap.procs[r] == nil {
			walk(p)
		}
	}
	s.keep(snap.procs, nil)
	for pid, lr := range s.lastRead {
		p := snap.procs[pid]
		switch {
		case p == nil || p.start != lr.p.start:
			delete(s.lastRead, pid)
		case !p.kept:
			lr.p.fds = p.fds
			s.lastRead[pid] = lr
		}
	}
	return snap
}

// takeListed lists /proc and reads roots' trees: /proc/PID/stat of the
// previous trees' processes, of pids not met before (or whose directory
// is new) and of those whose remembered parent is gone.
func (s *Sampler) takeListed(now time.Time, roots []int) (*Snapshot, error) {
	s.lists.Add(1)
	listed, err := s.list()
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	s.listedAt = now
	fresh := map[int]*proc{}
	read := func(pid int, ino uint64) *proc {
		st, ok := s.stat(pid, ino, true)
		if !ok {
			delete(s.known, pid)
			return nil
		}
		p := &proc{key: key{pid, st.StartTime}, ppid: st.PPID, cpu: st.CPUTime(), rss: st.ResidentBytes()}
		s.known[pid] = seen{ino: ino, ppid: st.PPID, pino: listed[st.PPID], start: st.StartTime}
		fresh[pid] = p
		return p
	}
	for pid := range s.known {
		if _, ok := listed[pid]; !ok {
			delete(s.known, pid)
		}
	}
	for pid, ino := range listed {
		k, ok := s.known[pid]
		if !ok || k.ino != ino || s.inTree[pid] || (k.ppid != 0 && listed[k.ppid] != k.pino) {
			read(pid, ino)
		}
	}
	kids := map[int][]int{}
	for pid, k := range s.known {
		kids[k.ppid] = append(kids[k.ppid], pid)
	}
	snap := &Snapshot{At: now, procs: map[int]*proc{}, children: map[int][]int{}, prevAt: s.prevAt}
	// get is pid's stat as read in this Take (reading it now if not yet).
	get := func(pid int) *proc {
		if p := fresh[pid]; p != nil {
			return p
		}
		return read(pid, listed[pid])
	}
	var walk func(p *proc)
	walk = func(p *proc) {
		snap.procs[p.pid] = p
		for _, c := range kids[p.pid] {
			if _, done := snap.procs[c]; done {
				continue
			}
			// The remembered link is checked against the child's own
			// line: it may have been re-parented since.
			if cp := get(c); cp != nil && cp.ppid == p.pid {
				snap.children[p.pid] = append(snap.children[p.pid], c)
				walk(cp)
			}
		}
	}
	for _, r := range roots {
		if _, ok := listed[r]; !ok || r <= 0 {
			continue
		}
		if _, done := snap.procs[r]; done {
			continue
		}
		if p := get(r); p != nil {
			walk(p)
		}
	}
	s.keep(snap.procs, listed)
	clear(s.lastRead)       // the next Take reads every tree process in full
	for k := range s.prev { // forget processes that ended
		if kn, ok := s.known[k.pid]; !ok || kn.start != k.start {
			delete(s.prev, k)
		}
	}
	return snap, nil
}

// list returns every pid /proc lists, with its directory's inode number
// (one pass of getdents over /proc).
func (s *Sampler) list() (map[int]uint64, error) {
	fd, err := unix.Open(s.mount, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", s.mount, err)
	}
	defer unix.Close(fd)
	out := make(map[int]uint64, len(s.known)+64)
	for {
		n, err := unix.Getdents(fd, s.dents)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.mount, err)
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := s.dents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			if pid, ok := pidName(b[19:reclen]); ok && b[18] == unix.DT_DIR {
				out[pid] = binary.NativeEndian.Uint64(b[0:8])
			}
			b = b[reclen:]
		}
	}
}

// pidName parses a NUL-terminated directory name that is all digits.
func pidName(name []byte) (int, bool) {
	pid := 0
	for i, c := range name {
		if c == 0 {
			return pid, i > 0
		}
		if c < '0' || c > '9' || pid > 1<<30 {
			return 0, false
		}
		pid = pid*10 + int(c-'0')
	}
	return pid, len(name) > 0 && pid > 0
}

// stat reads and parses /proc/PID/stat, through the kept file when the
// process has one (opened in the directory of inode ino, when checkIno;
// an unchecked kept file is trusted: it fails once its process ended);
// false when the process is gone or its line does not parse.
func (s *Sampler) stat(pid int, ino uint64, checkIno bool) (procstat.Stat, bool) {
	s.open.mu.Lock()
	hd, ok := s.open.m[pid]
	s.open.mu.Unlock()
	if !ok || checkIno && hd.ino != ino {
		return s.statByPath(pid)
	}
	n, err := unix.Pread(hd.stat, s.buf, 0)
	if err != nil || n <= 0 || n == len(s.buf) {
		return procstat.Stat{}, false
	}
	st, err := procstat.Parse(s.buf[:n])
	return st, err == nil
}

// statByPath reads and parses /proc/PID/stat by its path.
func (s *Sampler) statByPath(pid int) (procstat.Stat, bool) {
	fd, err := unix.Open(s.path(pid, "stat"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procstat.Stat{}, false
	}
	n, err := unix.Read(fd, s.buf)
	_ = unix.Close(fd)
	if err != nil || n <= 0 || n == len(s.buf) {
		return procstat.Stat{}, false
	}
	st, err := procstat.Parse(s.buf[:n])
	return st, err == nil
}

// runTime is pid's run time in nanoseconds (the first field of its kept
// /proc/PID/schedstat: its leader thread's), 0 when unknown (no kept
// file, or a kernel without schedstats, which writes "0 0 0"); alive
// false when the process has ended.
func (s *Sampler) runTime(pid int) (run uint64, alive bool) {
	s.open.mu.Lock()
	hd, ok := s.open.m[pid]
	s.open.mu.Unlock()
	if !ok || hd.sched < 0 {
		return 0, true
	}
	n, err := unix.Pread(hd.sched, s.buf, 0)
	if err != nil || n <= 0 {
		return 0, err != unix.ESRCH
	}
	for _, c := range s.buf[:n] {
		if c < '0' || c > '9' {
			break
		}
		run = run*10 + uint64(c-'0')
	}
	return run, true
}

// drop closes pid's kept files, if any.
func (s *Sampler) drop(pid int) {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	if hd, ok := s.open.m[pid]; ok {
		hd.close()
		delete(s.open.m, pid)
	}
}

// path is /proc/PID/name under the Sampler's mount point.
func (s *Sampler) path(pid int, name string) string {
	return s.mount + "/" + strconv.Itoa(pid) + "/" + name
}

// keep counts the open descriptors of tree's processes and keeps their
// files open for the next Take (up to maxHandles processes); the files
// of processes no longer in a tree, or ended, are closed. listed is the
// listing of /proc the tree was read from (pid → directory inode), nil
// when the Take did not list: kept files are then known to be the tree
// processes' (those of ended processes failed to read).
func (s *Sampler) keep(tree map[int]*proc, listed map[int]uint64) {
	s.open.mu.Lock()
	defer s.open.mu.Unlock()
	for pid, hd := range s.open.m {
		if tree[pid] == nil || listed != nil && listed[pid] != hd.ino {
			hd.close()
			delete(s.open.m, pid)
		}
	}
	for pid, p := range tree {
		if p.kept {
			continue // has not run since its descriptors were counted
		}
		hd, ok := s.open.m[pid]
		if !ok && len(s.open.m) < maxHandles {
			if fd, err := unix.Open(s.path(pid, "stat"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				hd = handle{ino: listed[pid], stat: fd, fds: -1, sched: -1}
				if fd, err := unix.Open(s.path(pid, "fd"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
					hd.fds = fd
				}
				if fd, err := unix.Open(s.path(pid, "schedstat"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
					hd.sched = fd
				}
				s.open.m[pid], ok = hd, true
			}
		}
		// Linux 6.2 and later give the count as the fd directory's
		// size: one stat instead of reading the directory.
		var st unix.Stat_t
		if ok && hd.fds >= 0 {
			err := unix.Fstat(hd.fds, &st)
			if err == nil && st.Size > 0 {
				p.fds = int(st.Size)
				continue
			}
		} else if err := unix.Stat(s.path(pid, "fd"), &st); err == nil && st.Size > 0 {
			p.fds = int(st.Size)
			continue
		}
		if fs, err := procfs.NewFS(s.mount); err == nil {
			if pr, err := fs.Proc(pid); err == nil {
				p.fds, _ = pr.FileDescriptorsLen()
			}
		}
	}
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
// CPUPercent is set when an earlier Take read at least one of them at
// least 100 ms before: each such process counts its CPU time since that
// read over that interval; one read for the first time counts its whole
// CPU time over the interval since the previous Take.
func (snap *Snapshot) Usage(pids []int) Usage {
	var u Usage
	var pct float64
	known := false
	for _, pid := range pids {
		p := snap.procs[pid]
		if p == nil {
			continue
		}
		u.Procs++
		u.CPUSeconds += p.cpu
		u.RSSBytes += p.rss
		u.FDs += p.fds
		if before, ok := snap.prev[p.key]; ok {
			if wall := snap.At.Sub(before.at); wall >= 100*time.Millisecond {
				known = true
				pct += max(p.cpu-before.cpu, 0) / wall.Seconds() * 100
			}
		} else if wall := snap.At.Sub(snap.prevAt); !snap.prevAt.IsZero() && wall >= 100*time.Millisecond {
			pct += p.cpu / wall.Seconds() * 100
		}
	}
	if known {
		u.CPUPercent = &pct
	}
	return u
}

// Children returns the pids of pid's children this snapshot saw.
func (snap *Snapshot) Children(pid int) []int { return append([]int(nil), snap.children[pid]...) }
