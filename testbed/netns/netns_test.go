package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func hexPort(p int) string { return fmt.Sprintf(":%04X ", p) }

// TestIsolation: a namespace has lo only; a listener on the host's
// loopback is not reachable from inside, one inside is not reachable from
// the host; in-process dials and commands inside see the namespace's own
// sockets.
func TestIsolation(t *testing.T) {
	ns := New(t, "iso")
	if names, err := List(); err != nil || !slices.Contains(names, ns.Name) {
		t.Fatalf("ip netns list: %v %v, want %s", names, err, ns.Name)
	}
	out, err := ns.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -o link inside: %v %s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "lo:") || !strings.Contains(lines[0], "UP") {
		t.Fatalf("links inside: %s, want lo only, up", out)
	}

	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port
	if c, err := ns.Dial("tcp", host.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("a host listener on %s is reachable from inside", host.Addr())
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial the host's %s from inside: %v, want connection refused", host.Addr(), err)
	}

	// The same port number inside: a listener of the namespace's own.
	in, err := ns.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort))
	if err != nil {
		t.Fatalf("listen inside on the host's port %d: %v", hostPort, err)
	}
	defer in.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("inside")) })}
	go func() { _ = srv.Serve(in) }()
	defer srv.Close()
	resp, err := ns.HTTPClient().Get(fmt.Sprintf("http://127.0.0.1:%d/", hostPort))
	if err != nil {
		t.Fatalf("GET inside: %v", err)
	}
	body := make([]byte, 16)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	if string(body[:n]) != "inside" {
		t.Fatalf("GET inside answered %q, want the inside server", body[:n])
	}
	inPort := 0
	for {
		l, err := ns.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		inPort = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
		// A port free on the host too, so that a refusal there means the
		// namespace's listener is not visible, not something else.
		if h, err := net.Listen("tcp", l.Addr().String()); err == nil {
			h.Close()
			break
		}
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", inPort), time.Second); err == nil {
		c.Close()
		t.Fatalf("a listener inside on %d is reachable from the host", inPort)
	}
	// A command inside sees the namespace's listeners in /proc/net/tcp,
	// the host's not.
	tcp, err := ns.Command("cat", "/proc/net/tcp").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tcp), hexPort(inPort)) {
		t.Errorf("/proc/net/tcp inside lacks the inside listener %d:\n%s", inPort, tcp)
	}
	if own, _ := os.ReadFile("/proc/net/tcp"); strings.Contains(string(own), hexPort(inPort)) {
		t.Errorf("the host's /proc/net/tcp shows the inside listener %d", inPort)
	}
}

// TestDoRestoresThread: f runs in the namespace, and afterwards threads
// are in the host's again (many calls, from many goroutines, then every
// thread of the process checked).
func TestDoRestoresThread(t *testing.T) {
	ns := New(t, "thr")
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 64)
	for range 64 {
		go func() {
			errc <- ns.Do(func() error {
				st, err := os.Stat("/proc/thread-self/ns/net")
				if err != nil {
					return err
				}
				if !os.SameFile(st, want) {
					return errors.New("f does not run in the namespace")
				}
				return nil
			})
		}()
	}
	for range 64 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		l, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err != nil {
			continue // exited meanwhile
		}
		if l != hostNS {
			t.Errorf("thread %s is in %s after Do, want the host's %s", task.Name(), l, hostNS)
		}
	}
	if ferr := errors.New("f's error"); !errors.Is(ns.Do(func() error { return ferr }), ferr) {
		t.Error("Do does not return f's error")
	}
}

// TestCleanupKillsAndDeletes: a namespace whose test ends with a process
// still inside is deleted, the process killed.
func TestCleanupKillsAndDeletes(t *testing.T) {
	var name string
	var pid int
	t.Run("leaves a process", func(t *testing.T) {
		ns := New(t, "left")
		name = ns.Name
		cmd := ns.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid = cmd.Process.Pid
		go func() { _ = cmd.Wait() }() // reaps it once killed
		// `ip netns exec` enters the namespace after it started, then
		// execs sleep under the same pid: wait for it to be inside.
		wait.For(t, 10*time.Second, "the process inside the namespace", func() (bool, string) {
			ps, err := ns.PIDs()
			return err == nil && slices.Contains(ps, pid), fmt.Sprintf("PIDs = %v, %v; want %d among them", ps, err, pid)
		})
	})
	names, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, name) {
		t.Fatalf("%s still listed after its test's cleanup", name)
	}
	wait.For(t, 5*time.Second, fmt.Sprintf("sleep %d gone after the cleanup", pid), wait.Bool(func() bool {
		st, err := procfs.ReadStat(pid)
		return err != nil || st.State == 'Z'
	}))
}

// TestSweep: a namespace named as made by a process that is gone is
// deleted by the sweep, its leftover process killed; one whose creator
// runs, and one not ours, are left alone.
func TestSweep(t *testing.T) {
	ip, why := available()
	if why != "" {
		unusable(t, why)
	}
	// A creator that is gone: a child that has exited and been reaped.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	self, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-%d-1-stale", Prefix, gone.Process.Pid, self.StartTime)
	reused := fmt.Sprintf("%s%d-%d-1-reused", Prefix, os.Getpid(), self.StartTime+1) // our pid, another start: reused
	live := fmt.Sprintf("%s%d-%d-999-live", Prefix, os.Getpid(), self.StartTime)
	foreign := "fmtest-foreign-" + fmt.Sprint(os.Getpid())
	for _, n := range []string{stale, reused, live, foreign} {
		if out, err := run(ip, "netns", "add", n); err != nil {
			unusable(t, fmt.Sprintf("ip netns add: %v %s", err, out))
		}
		t.Cleanup(func() { _, _ = run(ip, "netns", "delete", n) })
	}
	cmd := exec.Command(ip, "netns", "exec", stale, "sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	wait.For(t, 5*time.Second, "sleep in the stale namespace", wait.Bool(func() bool {
		ps, _ := pids(ip, stale)
		return slices.Contains(ps, cmd.Process.Pid)
	}))

	for n, want := range map[string]bool{stale: true, reused: true, live: false, foreign: false, Prefix + "junk": false} {
		if got := Stale(n); got != want {
			t.Errorf("Stale(%s) = %v, want %v", n, got, want)
		}
	}
	var logs []string
	sweep(ip, func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	t.Logf("sweep said:\n%s", strings.Join(logs, "\n"))
	names, err := list(ip)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, stale) || slices.Contains(names, reused) {
		t.Errorf("stale namespaces left after the sweep: %v", names)
	}
	if !slices.Contains(names, live) {
		t.Errorf("the sweep deleted %s, whose creator runs", live)
	}
	if out, _ := run(ip, "netns", "list"); !strings.Contains(out, foreign) {
		t.Errorf("the sweep deleted %s, not ours", foreign)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the stale namespace's process still runs after the sweep")
	}
	if !strings.Contains(strings.Join(logs, "\n"), "still holds "+fmt.Sprint(cmd.Process.Pid)) {
		// Another test binary's first New sweeps too, and may have got
		// there first; the process is gone and the namespace deleted all
		// the same (checked above).
		t.Logf("this sweep did not kill %d: another process's sweep did", cmd.Process.Pid)
	}
}

// TestLabel: a bad label fails the test before anything is made.
func TestLabel(t *testing.T) {
	for _, l := range []string{"", "Beta", "b-eta", "1beta", strings.Repeat("a", 17)} {
		if labelRE.MatchString(l) {
			t.Errorf("label %q accepted", l)
		}
	}
	if !labelRE.MatchString("beta2") {
		t.Error("label beta2 refused")
	}
}

// TestDialContextCancelled: a dial whose context is already done fails
// without touching the namespace's listeners.
func TestDialContextCancelled(t *testing.T) {
	ns := New(t, "ctx")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := ns.DialContext(ctx, "tcp", "127.0.0.1:1"); err == nil {
		c.Close()
		t.Fatal("dial with a cancelled context succeeded")
	}
}
