package resources

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// startTree starts `sh` with members children, each a sh with per-1
// sleeping children (per processes a member), and returns the root's pid.
func startTree(t testing.TB, members, per int) int {
	t.Helper()
	member := "sh -c '" + strings.Repeat("sleep 600 & ", per-1) + "wait'"
	return startGroup(t, exec.Command("sh", "-c", strings.Repeat(member+" & ", members)+"wait"))
}

// startGroup starts cmd as the leader of its own process group and kills
// the whole group (then reaps cmd) when the test ends; it returns cmd's pid.
func startGroup(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// pidPair waits until file holds two pids ("P C", written by a test's
// shell) and returns them.
func pidPair(t testing.TB, file, what string) (p, c int) {
	t.Helper()
	wait.For(t, 20*time.Second, what, func() (bool, string) {
		data, _ := os.ReadFile(file)
		n, _ := fmt.Sscan(string(data), &p, &c)
		return n == 2, fmt.Sprintf("%q", data)
	})
	return p, c
}

// waitTree waits until root's tree has n processes.
func waitTree(t testing.TB, s *Sampler, root, n int) *Snapshot {
	t.Helper()
	var snap *Snapshot
	wait.For(t, 20*time.Second, fmt.Sprintf("the tree of %d to have %d processes", root, n), func() (bool, string) {
		var err error
		if snap, err = s.Take(root); err != nil {
			t.Fatal(err)
		}
		got := len(snap.Tree(root))
		return got == n, fmt.Sprintf("%d processes", got)
	})
	return snap
}

// TestUsage: a tree's process count, RSS and fds add up; a busy child
// shows its CPU over the interval, an idle one none.
func TestUsage(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	root := startTree(t, 2, 3)
	snap := waitTree(t, s, root, 1+2*3)
	u := snap.Usage(snap.Tree(root))
	if u.Procs != 7 || u.RSSBytes == 0 || u.FDs < 7 {
		t.Errorf("usage %+v", u)
	}
	if kids := snap.Children(root); len(kids) != 2 || len(snap.Tree(kids[0])) != 3 {
		t.Errorf("children %v", kids)
	}

	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	if _, err := s.Take(root, busy.Process.Pid); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the busy child to use 0.3 s of CPU", func() (bool, string) {
		p, err := procfs.NewProc(busy.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.CPUTime() >= 0.3, fmt.Sprintf("%.2f s", st.CPUTime())
	})
	snap, err = s.Take(root, busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	b := snap.Usage(snap.Tree(busy.Process.Pid))
	idle := snap.Usage(snap.Tree(root))
	if b.CPUPercent == nil || *b.CPUPercent <= 1 || idle.CPUPercent == nil || *idle.CPUPercent >= *b.CPUPercent {
		t.Errorf("busy %v idle %v", b.CPUPercent, idle.CPUPercent)
	}
	if st, ok := snap.StartTime(busy.Process.Pid); !ok || st == 0 {
		t.Error("no start time")
	}
	if u := snap.Usage([]int{1 << 30}); u.Procs != 0 || u.CPUPercent != nil {
		t.Errorf("a pid not seen counts: %+v", u)
	}
}

// BenchmarkSample is one resource sample of 10 fleets × 8 members × 5
// processes (a tree per fleet; each member's subtree and the fleet's
// whole tree summed, as status does), on this machine with whatever else
// runs on it. cpu-ms/sample is this process's user+system CPU per sample
// (getrusage), the figure issue 28 bounds at 5 ms. Three cases:
//   - idle: the trees' processes sleep between samples (as the
//     benchmark's do): their figures are carried over (run time
//     unchanged), no listing of /proc;
//   - ran: as if every process had run since the previous sample: every
//     stat line read and fd directory counted, no listing;
//   - listed: /proc listed and every stat line read, each sample (the
//     first sample, one every 30 s, one after more than 64 pids were
//     allocated since the previous).
func BenchmarkSample(b *testing.B) {
	roots := make([]int, 10)
	for i := range roots {
		roots[i] = startTree(b, 8, 5)
	}
	for _, c := range []struct {
		name          string
		full, noCarry bool
	}{{"idle", false, false}, {"ran", false, true}, {"listed", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := New("")
			if err != nil {
				b.Skip("no /proc:", err)
			}
			defer s.Close()
			s.full, s.noCarry = c.full, c.noCarry
			for _, r := range roots {
				waitTree(b, s, r, 1+8*5)
			}
			if _, err := s.Take(roots...); err != nil {
				b.Fatal(err)
			}
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			lists := s.Listings()
			b.ResetTimer()
			for b.Loop() {
				snap, err := s.Take(roots...)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range roots {
					_ = snap.Usage(snap.Tree(r))
					for _, m := range snap.Children(r) {
						_ = snap.Usage(snap.Tree(m))
					}
				}
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/sample")
			b.ReportMetric(float64(s.Listings()-lists)/float64(b.N), "listings/sample")
			procs, _ := os.ReadDir("/proc")
			b.ReportMetric(float64(len(procs)), "proc-entries")
		})
	}
}

// TestTreeFollowsReparentAndFork: between two Takes a process in the tree
// loses its parent (re-parented out of the tree: no longer counted) and
// the root forks a new child (counted), though only the tree is read and
// the parent links are remembered between Takes.
func TestTreeFollowsReparentAndFork(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	file := t.TempDir() + "/pids"
	// A runs B and, once B ends, D; B runs C and writes "B C".
	a := startGroup(t, exec.Command("sh", "-c", `sh -c 'sleep 600 & echo $$ $! > `+file+`; wait' & wait; sleep 600`))
	b, c := pidPair(t, file, "B to write its and C's pids")
	snap := waitTree(t, s, a, 3)
	if got := snap.Tree(a); !sameSet(got, []int{a, b, c}) {
		t.Fatalf("tree %v, want A %d B %d C %d", got, a, b, c)
	}
	if err := syscall.Kill(b, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "A's tree to be A and its new child D, without C", func() (bool, string) {
		snap, err := s.Take(a)
		if err != nil {
			t.Fatal(err)
		}
		got := snap.Tree(a)
		// Before A forks D, it may briefly be {A} or {A, B a zombie}.
		if slices.Contains(got, c) || slices.Contains(got, b) {
			return false, fmt.Sprintf("%v still holds B %d or C %d", got, b, c)
		}
		return len(got) == 2 && slices.Contains(got, a), fmt.Sprintf("%v", got)
	})
	if _, ok := snap.StartTime(c); !ok {
		t.Error("the first snapshot lost C's start time")
	}
}

// sameSet reports whether a and b hold the same pids.
func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[int]bool{}
	for _, p := range a {
		m[p] = true
	}
	for _, p := range b {
		if !m[p] {
			return false
		}
	}
	return true
}

// ownFDs counts this process's open descriptors.
func ownFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestHandlesFollowTheTree: a Take keeps three files open per process of
// its trees, closes those of processes that ended, and Close closes the
// rest; the counts read through kept files match a fresh Sampler's.
func TestHandlesFollowTheTree(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	root := startTree(t, 2, 3) // holds a pidfd of its own
	base := ownFDs(t)
	waitTree(t, s, root, 7)
	if got := ownFDs(t) - base; got != 3*7 { // stat, fd directory, schedstat
		t.Errorf("%d descriptors kept for 7 processes, want 21", got)
	}
	var snap *Snapshot
	// The shells may still be starting their children: wait until the
	// two agree.
	wait.For(t, 20*time.Second, "counts through kept files to match a fresh Sampler's", func() (bool, string) {
		if snap, err = s.Take(root); err != nil {
			t.Fatal(err)
		}
		fresh, err := New("")
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close()
		osnap, err := fresh.Take(root)
		if err != nil {
			t.Fatal(err)
		}
		a, b := snap.Usage(snap.Tree(root)), osnap.Usage(osnap.Tree(root))
		return a.Procs == 7 && a.Procs == b.Procs && a.FDs == b.FDs && a.FDs >= 7, fmt.Sprintf("kept %+v, fresh %+v", a, b)
	})
	kid := snap.Children(root)[0]
	if err := syscall.Kill(kid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "the killed member's shell to leave the tree", func() (bool, string) {
		snap, err := s.Take(root)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := snap.StartTime(kid)
		return !ok, fmt.Sprintf("tree %v", snap.Tree(root))
	})
	snap, err = s.Take(root)
	if err != nil {
		t.Fatal(err)
	}
	n := len(snap.Tree(root))
	if got := ownFDs(t) - base; got != 3*n {
		t.Errorf("%d descriptors kept for %d processes, want %d", got, n, 3*n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ownFDs(t); got != base {
		t.Errorf("%d descriptors after Close, %d before the first Take", got, base)
	}
}

// TestCarriesOverOnlyWhatDidNotRun: a sleeping single-threaded process's
// figures are carried over from its last read (its run time has not
// moved); once it runs (it allocates 50 MB, opens 20 files and starts 3
// threads) the next Takes read it afresh and show all of it; its threads,
// whose ids are pids allocated since the previous Take, are not taken for
// processes (the tree stays the shell and the process).
func TestCarriesOverOnlyWhatDidNotRun(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// The interpreter itself, not a wrapper script that runs it (pyenv's
	// shims), so the process carried over is python's.
	exe, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skip("no python3:", err)
	}
	script := `import sys, threading
print("ready", flush=True)
sys.stdin.readline()
block = bytearray(50 << 20)
for i in range(len(block) // 4096):
    block[i * 4096] = 1
files = [open("/dev/null") for _ in range(20)]
stop = threading.Event()
for _ in range(3):
    threading.Thread(target=stop.wait).start()
print("ok", flush=True)
sys.stdin.readline()
stop.set()
`
	cmd := exec.Command("sh", "-c", `"$0" -c "$1"; sleep 600`, strings.TrimSpace(string(exe)), script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	root := startGroup(t, cmd)
	// Once it says ready it waits on stdin: its figures from then on
	// (not from its start, when it may wait on the disk with a file open).
	ready := make([]byte, 6)
	if _, err := io.ReadFull(out, ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("python said %q, %v", ready, err)
	}
	var py int
	var before Usage
	wait.For(t, 20*time.Second, "python's figures carried over from an earlier read", func() (bool, string) {
		snap, err := s.Take(root)
		if err != nil {
			t.Fatal(err)
		}
		kids := snap.Children(root)
		if len(kids) != 1 {
			return false, fmt.Sprintf("children %v", kids)
		}
		py = kids[0]
		before = snap.Usage([]int{py})
		return snap.procs[py].kept, fmt.Sprintf("python %d %+v, carried %v", py, before, snap.procs[py].kept)
	})
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ok\n" {
		t.Fatalf("python said %q, %v", buf, err)
	}
	// It ran since the last Take: the next one reads it afresh.
	snap, err := s.Take(root)
	if err != nil {
		t.Fatal(err)
	}
	if u := snap.Usage([]int{py}); snap.procs[py] == nil || snap.procs[py].kept || u.RSSBytes < before.RSSBytes+50<<20 || u.FDs < before.FDs+20 {
		t.Fatalf("after python ran: before %+v now %+v", before, u)
	}
	wait.For(t, 20*time.Second, "a Take without a listing (at most 64 pids allocated since the previous)", func() (bool, string) {
		lists := s.Listings()
		snap, err := s.Take(root)
		if err != nil {
			t.Fatal(err)
		}
		if tree := snap.Tree(root); len(tree) != 2 {
			t.Fatalf("tree of %d processes %v: threads taken for processes", len(tree), tree)
		}
		return s.Listings() == lists, "it listed /proc"
	})
	_, _ = in.Write([]byte("done\n"))
}

// TestCarriedChildLeavesWithItsZombieParent: R (a sleep that never reaps)
// has a child P, whose child C sleeps. Once C's figures are carried over
// (it has not run), P is killed: a zombie R does not reap, so its pid
// still reads, but the kernel gave C another parent as P exited. A Take
// that does not list /proc must read C again rather than carry it over
// under P: the tree is R and P only.
func TestCarriedChildLeavesWithItsZombieParent(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	file := t.TempDir() + "/pids"
	r := startGroup(t, exec.Command("sh", "-c", `sh -c 'sleep 600 & echo $$ $! > `+file+`; wait' & exec sleep 600`))
	p, c := pidPair(t, file, "P to write its and C's pids")
	wait.For(t, 20*time.Second, "C carried over in R's tree", func() (bool, string) {
		snap, err := s.Take(r)
		if err != nil {
			t.Fatal(err)
		}
		pc := snap.procs[c]
		return pc != nil && pc.kept && sameSet(snap.Tree(r), []int{r, p, c}), fmt.Sprintf("tree %v", snap.Tree(r))
	})
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "P a zombie", func() (bool, string) {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		return strings.Contains(string(st), ") Z "), string(st)
	})
	wait.For(t, 20*time.Second, "a Take without a listing", func() (bool, string) {
		lists := s.Listings()
		snap, err := s.Take(r)
		if err != nil {
			t.Fatal(err)
		}
		tree := snap.Tree(r)
		if s.Listings() != lists {
			return false, fmt.Sprintf("listed; tree %v", tree)
		}
		if !sameSet(tree, []int{r, p}) {
			t.Fatalf("tree %v, want R %d and zombie P %d without C %d", tree, r, p, c)
		}
		return true, ""
	})
}
