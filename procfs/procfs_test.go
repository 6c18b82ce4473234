package procfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// helperEnv selects a helper role when the test binary re-executes itself:
// "tcp:HOST:PORT" or "unix:PATH" connects and then waits; "wait" just waits.
// A helper waits until its stdin closes (or 60s), so it never outlives the
// test that owns it.
const helperEnv = "FM_PROCFS_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	os.Exit(m.Run())
}

func runHelper(role string) int {
	var conn net.Conn
	var err error
	switch {
	case strings.HasPrefix(role, "tcp:"):
		conn, err = net.Dial("tcp", strings.TrimPrefix(role, "tcp:"))
	case strings.HasPrefix(role, "unix:"):
		conn, err = net.Dial("unix", strings.TrimPrefix(role, "unix:"))
	case role == "wait":
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
	}
	if conn != nil {
		_ = conn.Close()
	}
	return 0
}

// startHelper runs the test binary as a helper child and waits for it to
// report ready. The child is stopped when the test ends.
func startHelper(t *testing.T, role string, attr *syscall.SysProcAttr, extraEnv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), extraEnv...)
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper %q did not get ready: %q %v", role, line, err)
	}
	return cmd
}

func TestReadStatSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.PPID != os.Getppid() || st.Pgrp != syscall.Getpgrp() {
		t.Fatalf("stat %+v: want pid %d ppid %d pgrp %d", st, os.Getpid(), os.Getppid(), syscall.Getpgrp())
	}
	sid, err := getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Session != sid {
		t.Fatalf("session %d, want %d", st.Session, sid)
	}
	if st.State != 'R' && st.State != 'S' {
		t.Fatalf("state %q", st.State)
	}
	if st.StartTime == 0 {
		t.Fatal("start time 0")
	}
}

func getsid(pid int) (int, error) {
	r, _, e := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func TestReadStatSetsidChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	st, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Session != pid || st.Pgrp != pid || st.PPID != os.Getpid() {
		t.Fatalf("setsid child %d: %+v", pid, st)
	}
	if st.TTYNr != 0 || st.TPGID != -1 {
		t.Fatalf("setsid child has a controlling tty: %+v", st)
	}
	self, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.StartTime < self.StartTime {
		t.Fatalf("child start %d before parent start %d", st.StartTime, self.StartTime)
	}
}

// TestReadStatCommWithParens runs a real process whose name contains ") ("
// and spaces: the parser must take the fields after the LAST ')'.
func TestReadStatCommWithParens(t *testing.T) {
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	name := "a) b (c) 1 2"
	exe := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != name {
		t.Fatalf("comm %q, want %q", st.Comm, name)
	}
	if st.PPID != os.Getpid() || st.Pgrp != cmd.Process.Pid {
		t.Fatalf("fields misparsed: %+v", st)
	}
	got, err := Exe(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != exe {
		t.Fatalf("exe %q, want %q", got, exe)
	}
}

func TestReadStatGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := ReadStat(cmd.Process.Pid) // reaped: the pid is free (reuse is unlikely this fast)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want ErrNotExist, got %v", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(cmd.Process.Pid)) {
		t.Fatalf("error does not name the pid: %v", err)
	}
	if _, err := ReadStat(0); err == nil {
		t.Fatal("pid 0 accepted")
	}
	if _, err := ReadStat(-5); err == nil {
		t.Fatal("pid -5 accepted")
	}
}

func FuzzFindTCPSocket(f *testing.F) {
	f.Add([]byte("hdr\n   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 135 1\n"))
	f.Add([]byte("hdr\n 0: zz:1 :: 01 a b c d e f\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _, _ = findTCPSocket(data, tcpPair{})
		_ = findListeners(data, 8080)
	})
}

func TestParseHexAddrPort(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:0000":                         "0.0.0.0:0",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:C350": "[::ffff:127.0.0.1]:50000",
	} {
		got, err := parseHexAddrPort(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got.String() != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "0100007:1", "XX00007F:1", "0100007F:10000", "01000000007F:1"} {
		if _, err := parseHexAddrPort(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestKeyOfAndAncestors(t *testing.T) {
	cmd := startHelper(t, "wait", &syscall.SysProcAttr{Setpgid: true})
	pid := cmd.Process.Pid
	k1, err := KeyOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := KeyOf(pid)
	if err != nil || k1 != k2 || k1.PID != pid || k1.StartTime == 0 {
		t.Fatalf("keys %+v %+v %v", k1, k2, err)
	}
	self, _ := KeyOf(os.Getpid())
	if self == k1 {
		t.Fatal("distinct processes share a key")
	}
	anc, err := Ancestors(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(anc) < 2 || anc[0] != os.Getpid() || anc[1] != os.Getppid() {
		t.Fatalf("ancestors of %d = %v, want [%d %d ...]", pid, anc, os.Getpid(), os.Getppid())
	}
	if slices.Contains(anc, 0) || slices.Contains(anc, pid) {
		t.Fatalf("ancestors %v contain 0 or the pid itself", anc)
	}
	if a1, err := Ancestors(1); err != nil || len(a1) != 0 {
		t.Fatalf("Ancestors(1) = %v, %v", a1, err)
	}
}

func TestEnvironExeUIDs(t *testing.T) {
	cmd := startHelper(t, "wait", nil, "FM_PROCFS_MARK=hello world=1")
	env, err := Environ(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "FM_PROCFS_MARK=hello world=1") || !slices.Contains(env, helperEnv+"=wait") {
		t.Fatalf("environ lacks the marks: %d entries", len(env))
	}
	exe, err := Exe(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe != self {
		t.Fatalf("exe %q, want %q", exe, self)
	}
	r, e, err := UIDs(cmd.Process.Pid)
	if err != nil || r != os.Getuid() || e != os.Geteuid() {
		t.Fatalf("uids %d %d %v, want %d %d", r, e, err, os.Getuid(), os.Geteuid())
	}
	if _, err := Environ(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("environ of missing pid: %v", err)
	}
}

// acceptPeer starts a helper that connects to ln and returns the helper and
// the server side of its connection.
func acceptPeer(t *testing.T, ln net.Listener, role string) (*exec.Cmd, net.Conn) {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	cmd := startHelper(t, role, nil)
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		return cmd, r.c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection from helper")
	}
	return nil, nil
}

func TestTCPPeerPID(t *testing.T) {
	cases := []struct{ network, listen, dial string }{
		{"tcp4", "127.0.0.1:0", "127.0.0.1"},
		{"tcp6", "[::1]:0", "::1"},
		{"tcp", "[::]:0", "127.0.0.1"}, // dual stack: server sees ::ffff:127.0.0.1
	}
	for _, tc := range cases {
		t.Run(tc.network+"_"+tc.dial, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.listen)
			if err != nil {
				t.Skipf("cannot listen on %s: %v", tc.listen, err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			cmd, conn := acceptPeer(t, ln, "tcp:"+net.JoinHostPort(tc.dial, fmt.Sprint(port)))
			client := conn.RemoteAddr().(*net.TCPAddr).AddrPort()
			server := conn.LocalAddr().(*net.TCPAddr).AddrPort()
			pid, uid, err := TCPPeerPID(client, server)
			if err != nil {
				t.Fatal(err)
			}
			if pid != cmd.Process.Pid || uid != os.Getuid() {
				t.Fatalf("peer of %s→%s = pid %d uid %d, want pid %d uid %d", client, server, pid, uid, cmd.Process.Pid, os.Getuid())
			}
			// Mapped and unmapped forms find the same socket.
			mapped := netip.AddrPortFrom(netip.AddrFrom16(client.Addr().As16()), client.Port())
			smapped := netip.AddrPortFrom(netip.AddrFrom16(server.Addr().As16()), server.Port())
			if client.Addr().Unmap().Is4() {
				if p2, _, err := TCPPeerPID(mapped, smapped); err != nil || p2 != pid {
					t.Fatalf("mapped form: %d %v", p2, err)
				}
			}
			// Reversed endpoints name the server's own socket: this process.
			if p3, _, err := TCPPeerPID(server, client); err != nil || p3 != os.Getpid() {
				t.Fatalf("reversed: pid %d err %v, want %d", p3, err, os.Getpid())
			}
		})
	}
}

func TestTCPPeerPIDNotFound(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := ln.Addr().(*net.TCPAddr).AddrPort()
	_, _, err = TCPPeerPID(netip.MustParseAddrPort("127.0.0.1:1"), server)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
	// The listening socket itself (remote 0.0.0.0:0) is never a peer.
	_, _, err = TCPPeerPID(server, netip.MustParseAddrPort("0.0.0.0:0"))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("listener matched: %v", err)
	}
}

func TestUnixPeerCred(t *testing.T) {
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd, conn := acceptPeer(t, ln, "unix:"+path)
	pid, uid, err := UnixPeerCred(conn.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	if pid != cmd.Process.Pid || uid != os.Getuid() {
		t.Fatalf("peer cred pid %d uid %d, want %d %d", pid, uid, cmd.Process.Pid, os.Getuid())
	}
	if _, _, err := UnixPeerCred(nil); err == nil {
		t.Fatal("nil conn accepted")
	}
}

func TestUnixPeerCredSocketpair(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "sp0")
	defer f.Close()
	defer syscall.Close(fds[1])
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid, uid, err := UnixPeerCred(c.(*net.UnixConn))
	if err != nil || pid != os.Getpid() || uid != os.Getuid() {
		t.Fatalf("socketpair cred %d %d %v", pid, uid, err)
	}
}

// TestTCPPeerPIDsSharedSocket: a client socket held by two processes (this
// one, and a child that inherited it) yields both pids.
func TestTCPPeerPIDsSharedSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=wait")
	cmd.ExtraFiles = []*os.File{f}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper not ready: %q", line)
	}
	ra := netip.MustParseAddrPort(s.RemoteAddr().String())
	la := netip.MustParseAddrPort(s.LocalAddr().String())
	pids, _, err := TCPPeerPIDs(ra, la)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("holders %v, want this process %d and the child %d", pids, os.Getpid(), cmd.Process.Pid)
	}
}

func TestBootID(t *testing.T) {
	a, err := BootID()
	if err != nil {
		t.Fatal(err)
	}
	b, err := BootID()
	if err != nil || a != b {
		t.Fatalf("two readings differ: %q %q %v", a, b, err)
	}
	// random(4): a UUID in its 8-4-4-4-12 text form.
	parts := strings.Split(a, "-")
	if len(a) != 36 || len(parts) != 5 || len(parts[0]) != 8 || len(parts[4]) != 12 {
		t.Fatalf("boot id %q is not a UUID", a)
	}
}

func TestCmdlineHasFlagHasEnv(t *testing.T) {
	cmd := startHelper(t, "wait", nil, "FLEET_NAME=kb", "FM_EMPTY=")
	pid := cmd.Process.Pid
	argv, err := Cmdline(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv, []string{os.Args[0], "-test.run=^$"}) {
		t.Fatalf("cmdline %q", argv)
	}
	for _, c := range []struct {
		key, value string
		want       bool
	}{{"FLEET_NAME", "kb", true}, {"FLEET_NAME", "k", false}, {"FLEET_NAM", "E=kb", false}, {"FM_EMPTY", "", true}, {"FLEET_NAME", "kbx", false}} {
		if got, err := HasEnv(pid, c.key, c.value); err != nil || got != c.want {
			t.Errorf("HasEnv(%s=%s) = %v, %v; want %v", c.key, c.value, got, err, c.want)
		}
	}
	if _, err := Cmdline(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("cmdline of a missing pid: %v", err)
	}
	if _, err := HasEnv(1<<30, "A", "b"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("HasEnv of a missing pid: %v", err)
	}
	// A zombie has no argument vector.
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	wait.For(t, 10*time.Second, "the child to be a zombie", func() (bool, string) {
		st, err := ReadStat(z.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return st.State == 'Z', fmt.Sprintf("state %c", st.State)
	})
	if argv, err := Cmdline(z.Process.Pid); err != nil || len(argv) != 0 {
		t.Fatalf("cmdline of a zombie: %q %v", argv, err)
	}
	// Nor an executable: an error, never "" (lifecycle would take "" for
	// another program than the one recorded).
	if exe, err := Exe(z.Process.Pid); !errors.Is(err, fs.ErrNotExist) || exe != "" {
		t.Fatalf("exe of a zombie: %q %v", exe, err)
	}
	if exe, err := Exe(1 << 30); !errors.Is(err, fs.ErrNotExist) || exe != "" {
		t.Fatalf("exe of a missing pid: %q %v", exe, err)
	}
	if _, _, err := UIDs(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("uids of a missing pid: %v", err)
	}
}

func TestHasFlag(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"herdr", "--session", "kb", "server"}, true},
		{[]string{"herdr", "--session=kb", "server"}, true},
		{[]string{"herdr", "--session", "kb2", "server"}, false},
		{[]string{"herdr", "--session"}, false},
		{[]string{"--session", "kb"}, false}, // argv[0] is the program, not an option
		{[]string{"sh", "-c", "--session kb"}, false},
		{[]string{"herdr", "server", "--session", "kb"}, true},
		{nil, false},
	} {
		if got := HasFlag(c.argv, "--session", "kb"); got != c.want {
			t.Errorf("HasFlag(%q) = %v, want %v", c.argv, got, c.want)
		}
	}
}
