package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/procfs"
)

// kernelLine is a stat line as Linux 6 writes it (52 fields).
const kernelLine = "4242 (my (odd) name) S 1 4242 4242 34816 4250 4194304 1203 0 3 0 157 42 0 0 20 0 9 0 81234 1234567168 5120 18446744073709551615 1 1 0 0 0 0 0 0 2 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

// prometheusStat parses data as prometheus/procfs does: written to
// dir/PID/stat and read back with Proc.Stat. A panic in it (it slices
// past the end of some malformed lines) is returned as an error.
func prometheusStat(t testing.TB, dir string, pid int, data []byte) (st procfs.ProcStat, err error) {
	t.Helper()
	pdir := filepath.Join(dir, strconv.Itoa(pid))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "stat"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.Proc(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return p.Stat()
}

// agree reports where ours and prometheus/procfs's parse differ.
func agree(ours Stat, theirs procfs.ProcStat) error {
	type pair struct {
		name string
		a, b any
	}
	for _, p := range []pair{
		{"PID", ours.PID, theirs.PID}, {"Comm", ours.Comm, theirs.Comm}, {"State", string(ours.State), theirs.State},
		{"PPID", ours.PPID, theirs.PPID}, {"PGRP", ours.Pgrp, theirs.PGRP}, {"Session", ours.Session, theirs.Session},
		{"TTY", ours.TTYNr, theirs.TTY}, {"TPGID", ours.TPGID, theirs.TPGID}, {"UTime", ours.UTime, theirs.UTime},
		{"STime", ours.STime, theirs.STime}, {"NumThreads", ours.NumThreads, theirs.NumThreads},
		{"Starttime", ours.StartTime, theirs.Starttime}, {"RSS", ours.RSS, theirs.RSS},
		{"CPUTime", ours.CPUTime(), theirs.CPUTime()}, {"ResidentBytes", ours.ResidentBytes(), uint64(max(theirs.ResidentMemory(), 0))},
	} {
		if p.a != p.b {
			return fmt.Errorf("%s: ours %v, prometheus/procfs %v", p.name, p.a, p.b)
		}
	}
	return nil
}

// kernelFormat reports whether data is laid out as the kernel writes a
// stat line: "PID (COMM) " then single-space separated fields, a state
// letter and decimal numbers without '+' or leading zeros, and a newline.
func kernelFormat(data []byte) bool {
	l, r := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if l < 2 || r < l || data[l-1] != ' ' || !bytes.HasSuffix(data, []byte{'\n'}) || r+2 > len(data) || data[r+1] != ' ' {
		return false
	}
	if _, ok := decimal(data[:l-1], false, 31); !ok {
		return false
	}
	f := bytes.Split(data[r+2:len(data)-1], []byte{' '})
	if len(f) < minFields || len(f[0]) != 1 || !isLetter(f[0][0]) {
		return false
	}
	for _, tok := range f[1:] {
		if _, ok := decimal(tok, true, 64); !ok {
			return false
		}
	}
	return true
}

// FuzzParseAgreesWithPrometheus is the differential test package doc
// promises: whatever Parse accepts, prometheus/procfs accepts with the
// same value in every field; a kernel-format line prometheus/procfs
// accepts, Parse accepts.
func FuzzParseAgreesWithPrometheus(f *testing.F) {
	f.Add([]byte(kernelLine))
	f.Add([]byte("1 (systemd) S 0 1 1 0 -1 4194560 50000 900000 100 2000 300 400 5000 6000 20 0 1 0 3 170000000 3000 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"))
	f.Add([]byte("7 (a) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 -5 0 0 0 0 0 -3\n"))
	f.Add([]byte("7 (a) S 010 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"))
	f.Add([]byte("7 (a)"))
	f.Add([]byte(")("))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		ours, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			if !kernelFormat(data) {
				return
			}
			l := bytes.IndexByte(data, '(')
			pid, _ := strconv.Atoi(string(data[:l-1]))
			if pid <= 0 {
				return
			}
			if _, perr := prometheusStat(t, dir, pid, data); perr == nil {
				t.Fatalf("Parse refused a kernel-format line prometheus/procfs reads: %v\n%q", err, data)
			}
			return
		}
		theirs, err := prometheusStat(t, dir, ours.PID, data)
		if err != nil {
			t.Fatalf("Parse accepted what prometheus/procfs refuses (%v):\n%q", err, data)
		}
		if err := agree(ours, theirs); err != nil {
			t.Fatalf("%v\n%q", err, data)
		}
	})
}

// TestParseLiveProcesses: every process this test can read parses, the
// same as prometheus/procfs parses it.
func TestParseLiveProcesses(t *testing.T) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	all, err := fs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range all {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
		if err != nil {
			continue // gone
		}
		ours, err := Parse(data)
		if err != nil {
			t.Fatalf("pid %d: %v\n%q", p.PID, err, data)
		}
		theirs, err := prometheusStat(t, t.TempDir(), p.PID, data)
		if err != nil {
			t.Fatalf("pid %d: prometheus/procfs: %v", p.PID, err)
		}
		if err := agree(ours, theirs); err != nil {
			t.Errorf("pid %d: %v", p.PID, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no process read")
	}
}

// TestParseRefuses: malformed lines are errors naming the field, never
// panics.
func TestParseRefuses(t *testing.T) {
	for _, in := range []string{"", "(", ")(", "x (a) S", "7 (a)", "7 (a) ", "7 (a) SS 1",
		"0 (a) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"7 (a) S 010 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"7 (a) S 1 7 7 0 -1 0 0 0 0 0 -1 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"7 (a) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
	} {
		if _, err := Parse([]byte(in)); err == nil || !errors.Is(err, ErrFormat) {
			t.Errorf("Parse(%q) = %v, want an ErrFormat error", in, err)
		}
	}
	st, err := Parse([]byte(kernelLine))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 4242, Comm: "my (odd) name", State: 'S', PPID: 1, Pgrp: 4242, Session: 4242, TTYNr: 34816, TPGID: 4250,
		UTime: 157, STime: 42, NumThreads: 9, StartTime: 81234, RSS: 5120, ExitSignal: 17}
	if st != want {
		t.Errorf("Parse = %+v, want %+v", st, want)
	}
}

// BenchmarkParse compares Parse with prometheus/procfs on one line (the
// read of the file included for both, from a temp dir).
func BenchmarkParse(b *testing.B) {
	dir := b.TempDir()
	if _, err := prometheusStat(b, dir, 4242, []byte(kernelLine)); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "4242", "stat")
	b.Run("procstat", func(b *testing.B) {
		for b.Loop() {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prometheus", func(b *testing.B) {
		fs, _ := procfs.NewFS(dir)
		p, _ := fs.Proc(4242)
		for b.Loop() {
			if _, err := p.Stat(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecimalBounds: the range checks sit exactly at the types' limits.
func TestDecimalBounds(t *testing.T) {
	for _, c := range []struct {
		in     string
		signed bool
		bits   int
		want   uint64
		ok     bool
	}{
		{"9223372036854775807", true, 64, 1<<63 - 1, true},
		{"9223372036854775808", true, 64, 0, false},
		{"-9223372036854775808", true, 64, 1 << 63, true},
		{"-9223372036854775809", true, 64, 0, false},
		{"18446744073709551615", false, 64, 1<<64 - 1, true},
		{"18446744073709551616", false, 64, 0, false},
		{"2147483648", false, 31, 0, false},
		{"2147483647", false, 31, 1<<31 - 1, true},
		{"2147483647", true, 32, 1<<31 - 1, true},
		{"-1", false, 64, 0, false},
		{"-0", true, 64, 0, true},
		{"-", true, 64, 0, false},
		{"00", false, 64, 0, false},
		{"0", false, 64, 0, true},
		{"1_0", false, 64, 0, false},
	} {
		got, ok := decimal([]byte(c.in), c.signed, c.bits)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("decimal(%q, %v, %d) = %d, %v; want %d, %v", c.in, c.signed, c.bits, got, ok, c.want, c.ok)
		}
		if !c.signed && c.bits == 64 {
			v, err := strconv.ParseUint(c.in, 10, 64)
			if (err == nil) != ok && c.in != "00" && c.in != "1_0" || ok && v != got {
				t.Errorf("decimal(%q) disagrees with strconv: %d, %v", c.in, v, err)
			}
		}
	}
}

// TestExitSignalTellsThreads: this process's own stat line (a process its
// parent, go test, started) has exit signal SIGCHLD (17); a thread of it
// that is not the leader, read as /proc/TID/stat, has -1, the mark
// package resources tells a thread from a process by.
func TestExitSignalTellsThreads(t *testing.T) {
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	st, err := Parse(self)
	if err != nil || st.ExitSignal != 17 {
		t.Fatalf("own line: exit signal %d, %v", st.ExitSignal, err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	threads := 0
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if tid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tid)) // by its id, as a pid is read
		if err != nil {
			continue // ended
		}
		ts, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if ts.ExitSignal != -1 || ts.PID != tid {
			t.Errorf("thread %d: pid %d, exit signal %d, want -1", tid, ts.PID, ts.ExitSignal)
		}
		threads++
	}
	if threads == 0 {
		t.Fatal("a Go test process with no thread but its leader")
	}
}
