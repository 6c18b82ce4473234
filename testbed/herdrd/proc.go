package herdrd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// procStat holds the fields of /proc/<pid>/stat this package needs (proc(5)).
type procStat struct {
	pid, ppid, pgrp, session, tpgid int
	state                           byte
	comm                            string
}

// readStat parses /proc/<pid>/stat. comm may contain spaces and ')', so the fixed fields are
// taken after the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[closing+1:]))
	// f[0]=state f[1]=ppid f[2]=pgrp f[3]=session f[4]=tty_nr f[5]=tpgid
	if len(f) < 6 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	st := procStat{pid: pid, state: f[0][0], comm: string(b[open+1 : closing])}
	for i, dst := range []*int{&st.ppid, &st.pgrp, &st.session, nil, &st.tpgid} {
		if dst == nil {
			continue
		}
		if *dst, err = strconv.Atoi(f[i+1]); err != nil {
			return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
		}
	}
	return st, nil
}

// allStats reads the stat of every process visible in /proc; vanished processes are skipped.
func allStats() []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}

// sessionMembers lists the live (non-zombie) processes whose session id is sid, as herdr's
// src/platform/linux.rs session_processes does by scanning /proc.
func sessionMembers(sid int) []int {
	var out []int
	for _, st := range allStats() {
		if st.session == sid && st.state != 'Z' && st.state != 'X' {
			out = append(out, st.pid)
		}
	}
	return out
}

// killSession signals every process of session sid with SIGHUP, SIGTERM, then SIGKILL, 250 ms
// apart (herdr src/pane.rs shutdown_pane_processes). Each wait ends early once the session is
// empty. It returns when the session is empty or 250 ms after SIGKILL, whichever is first.
func killSession(sid int) {
	if sid <= 1 {
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGKILL} {
		pids := sessionMembers(sid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		deadline := time.Now().Add(250 * time.Millisecond)
		for time.Now().Before(deadline) && len(sessionMembers(sid)) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// childLister returns the children of a pid. herdr reads /proc/<pid>/task/<tid>/children;
// kernels without CONFIG_PROC_CHILDREN lack that file, and then a /proc scan of ppids is used.
type childLister func(pid int) []int

// newChildLister picks the /proc children files when the kernel has them, else a ppid index
// built once from a /proc scan.
func newChildLister() childLister {
	self := strconv.Itoa(os.Getpid())
	if _, err := os.Stat("/proc/" + self + "/task/" + self + "/children"); err == nil {
		return taskChildren
	}
	idx := map[int][]int{}
	for _, st := range allStats() {
		idx[st.ppid] = append(idx[st.ppid], st.pid)
	}
	return func(pid int) []int { return idx[pid] }
}

// taskChildren reads /proc/<pid>/task/*/children.
func taskChildren(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// processInfo builds pane.process_info's answer for a pane whose first process is shellPID,
// as herdr 0.8.2 does on Linux (src/app/api/panes.rs handle_pane_process_info,
// src/platform/linux.rs foreground_job): the foreground group is the tpgid of the shell; its
// members are found breadth-first from the shell and from the group leader through the
// children of every thread, kept when their pgrp is that group (zombies included: herdr only
// needs their stat), sorted by pid. A group with no member found that way is no foreground
// job: foreground_process_group_id and foreground_processes are then both omitted. argv is
// /proc/<pid>/cmdline split at NULs with empty parts dropped, omitted (with cmdline) when
// nothing is left; cwd is omitted when unreadable (a zombie's); tty is never set.
func processInfo(paneID string, shellPID int) herdr.ProcessInfo {
	pi := herdr.ProcessInfo{PaneID: paneID, ShellPID: shellPID}
	st, err := readStat(shellPID)
	if err != nil || st.tpgid <= 0 {
		return pi
	}
	fg := st.tpgid
	children := newChildLister()
	seen := map[int]bool{}
	queue := []int{shellPID, fg}
	type member struct {
		pid  int
		comm string
	}
	var members []member
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if pid <= 0 || seen[pid] {
			continue
		}
		seen[pid] = true
		if s, err := readStat(pid); err == nil && s.pgrp == fg {
			members = append(members, member{pid, s.comm})
		}
		queue = append(queue, children(pid)...)
	}
	if len(members) == 0 {
		return pi
	}
	sort.Slice(members, func(i, j int) bool { return members[i].pid < members[j].pid })
	pi.ForegroundProcessGroupID = fg
	for _, m := range members {
		fp := herdr.ForegroundProcess{PID: m.pid, Name: m.comm, Cwd: procCwd(m.pid)}
		fp.Argv = procArgv(m.pid)
		if fp.Argv != nil {
			fp.Cmdline = strings.Join(fp.Argv, " ")
		}
		pi.ForegroundProcesses = append(pi.ForegroundProcesses, fp)
	}
	return pi
}

// procArgv reads /proc/<pid>/cmdline split at NULs without empty parts (herdr's
// process_argv); nil when unreadable or empty.
func procArgv(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	var out []string
	for _, part := range strings.Split(string(b), "\x00") {
		if part != "" {
			out = append(out, part)
		}
	}
	return out
}

// procCwd is the target of /proc/<pid>/cwd, or "" when unreadable.
func procCwd(pid int) string {
	s, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return ""
	}
	return s
}
