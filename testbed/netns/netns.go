// Package netns is test equipment: one Linux network namespace per
// simulated host, so that a test can run a second fleetmgr (its herdr and
// fleetd children too) on a loopback of its own, where nothing of the
// first host's network is reachable. Nothing in the product imports it.
//
// A namespace is made with iproute2 (`ip netns add`, its lo brought up),
// commands run in it through `ip netns exec` (Command), and in-process
// sockets are made in it from a locked OS thread moved there with setns(2)
// (Do, Dial, Listen, HTTPClient). Its name is Prefix + the creating
// process's pid and start time + a label, so a later run can tell the
// namespaces of a test that was killed (its creator is gone) from those of
// a test still running, and sweep them: every New sweeps stale namespaces
// once per process (their leftover processes are killed, then the
// namespace deleted). The test's cleanup kills what is left in its own
// namespace and deletes it.
//
// Making namespaces needs root (CAP_SYS_ADMIN) and the `ip` command. When
// either is missing, or the kernel refuses, New skips the test saying why;
// with CI set (to anything non-empty, as scripts/test's CI runs) it fails
// it instead, since CI runs as root.
//
// The namespace separates the network only: the file system, and so every
// unix socket on it, is shared with the host (nsrelay carries the broker
// in over exactly such a socket).
package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/procfs"
)

// Prefix starts the name of every namespace this package makes:
// fmns-PID-STARTTICKS-N-LABEL, where PID and STARTTICKS (field 22 of
// /proc/PID/stat) identify the creating process and N counts namespaces
// within it.
const Prefix = "fmns-"

// opTimeout bounds every `ip` invocation.
const opTimeout = 15 * time.Second

// labelRE is what a label may be: short, so names stay readable in
// `ip netns list`.
var labelRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

// NS is one network namespace made by New. Its methods are safe for
// concurrent use until the test's cleanup deletes it.
type NS struct {
	// Name is the namespace's name for `ip netns` (fmns-…).
	Name string
	// Path is its bind mount, /run/netns/NAME: open it for setns(2).
	Path string

	ip  string   // the ip executable
	fd  *os.File // Path, open for setns; keeps the namespace while we use it
	log func(format string, args ...any)
}

var (
	counter   atomic.Int64
	sweepOnce sync.Once
)

// New makes a network namespace with lo up for the test and deletes it at
// cleanup (after killing every process still in it). label (^[a-z][a-z0-9]{0,15}$,
// e.g. "beta") names the simulated host in the namespace's name. Without
// root or `ip`, or when the kernel refuses, the test is skipped (failed
// under CI) with the reason.
func New(t testing.TB, label string) *NS {
	t.Helper()
	if !labelRE.MatchString(label) {
		t.Fatalf("netns: label %q: want ^[a-z][a-z0-9]{0,15}$", label)
	}
	ip, why := available()
	if why != "" {
		unusable(t, why)
	}
	sweepOnce.Do(func() { sweep(ip, t.Logf) })
	self, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	name := fmt.Sprintf("%s%d-%d-%d-%s", Prefix, os.Getpid(), self.StartTime, counter.Add(1), label)
	if out, err := run(ip, "netns", "add", name); err != nil {
		unusable(t, fmt.Sprintf("`ip netns add %s` failed (%v): %s", name, err, out))
	}
	n := &NS{Name: name, Path: "/run/netns/" + name, ip: ip, log: t.Logf}
	t.Cleanup(n.destroy)
	if out, err := run(ip, "-n", name, "link", "set", "lo", "up"); err != nil {
		t.Fatalf("netns %s: bring lo up: %v: %s", name, err, out)
	}
	f, err := os.Open(n.Path)
	if err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	n.fd = f
	return n
}

// unusable skips the test, or fails it under CI.
func unusable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("netns: CI is set, so simulated hosts must run (CI runs as root), but %s", why)
	}
	t.Skipf("netns: skipped: %s", why)
}

// available returns the ip executable, or why namespaces cannot be made
// here.
func available() (ip, why string) {
	if os.Geteuid() != 0 {
		return "", fmt.Sprintf("making network namespaces needs root (CAP_SYS_ADMIN); running as uid %d", os.Geteuid())
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
			if _, serr := os.Stat(p); serr == nil {
				return p, ""
			}
		}
		return "", "no `ip` command (Debian package iproute2; scripts/test installs it)"
	}
	return ip, ""
}

// run runs ip with args, bounded by opTimeout, and returns its combined
// output.
func run(ip string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, ip, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Command returns a command that runs name with args inside the namespace
// (`ip netns exec NAME name args…`). ip execs name, so the started
// process's pid is name's own; its children stay in the namespace.
// ip netns exec also gives it a mount namespace of its own with /sys
// remounted for this network namespace; the file system is otherwise the
// host's.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(n.ip, n.argv(name, args)...)
}

// CommandContext is Command with a context that kills the process.
func (n *NS) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, n.ip, n.argv(name, args)...)
}

func (n *NS) argv(name string, args []string) []string {
	return append([]string{"netns", "exec", n.Name, name}, args...)
}

// Do runs f on an OS thread moved into the namespace and waits for it.
// Sockets f creates belong to the namespace for their whole life,
// whichever thread later uses them. f must not start goroutines that
// create sockets (they run on other threads, outside); name lookups may do
// that, so dial IP literals. The thread goes back to the host's namespace
// afterwards, or, if it cannot, is thrown away by the Go runtime.
func (n *NS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread unless the thread is back home: a locked
		// thread whose goroutine exits is terminated, never reused.
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", n.Name, err)
			return
		}
		defer home.Close()
		if err := unix.Setns(int(n.fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns %s: setns: %w", n.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// DialContext opens a connection from inside the namespace (address an IP
// literal and port, e.g. "127.0.0.1:5672": the namespace's own loopback).
func (n *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Dial is DialContext without a context (10 s timeout), shaped for
// amqp.Config.Dial and federation.Config.Dial.
func (n *NS) Dial(network, addr string) (net.Conn, error) {
	return n.DialContext(context.Background(), network, addr)
}

// Listen opens a listener inside the namespace (e.g. "tcp",
// "127.0.0.1:0"); the caller closes it.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// HTTPClient returns a client whose connections are dialled inside the
// namespace. Keep-alives are off, so no idle connection holds the
// namespace after the request.
func (n *NS) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:       n.DialContext,
		DisableKeepAlives: true,
		Proxy:             nil,
	}}
}

// PIDs lists the processes whose network namespace is this one (`ip netns
// pids`).
func (n *NS) PIDs() ([]int, error) {
	return pids(n.ip, n.Name)
}

func pids(ip, name string) ([]int, error) {
	out, err := run(ip, "netns", "pids", name)
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %v: %s", name, err, out)
	}
	var ps []int
	for _, f := range strings.Fields(out) {
		if p, err := strconv.Atoi(f); err == nil && p > 0 && p != os.Getpid() {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// destroy kills what is left in the namespace and deletes it.
func (n *NS) destroy() {
	if ps, err := n.PIDs(); err != nil {
		n.log("netns %s: %v", n.Name, err)
	} else if len(ps) > 0 {
		n.log("netns %s: processes left in it at cleanup, killed: %v", n.Name, describe(ps))
		killAll(ps)
	}
	if n.fd != nil {
		n.fd.Close()
	}
	if out, err := run(n.ip, "netns", "delete", n.Name); err != nil {
		n.log("netns %s: delete: %v: %s", n.Name, err, out)
	}
}

// describe names pids with their commands, for logs.
func describe(ps []int) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		comm := "?"
		if st, err := procfs.ReadStat(p); err == nil {
			comm = st.Comm
		}
		fmt.Fprintf(&b, "%d (%s)", p, comm)
	}
	return b.String()
}

// killAll sends SIGKILL to each pid and waits (up to 5 s) until none is
// left but zombies.
func killAll(ps []int) {
	for _, p := range ps {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range ps {
		for time.Now().Before(deadline) {
			st, err := procfs.ReadStat(p)
			if err != nil || st.State == 'Z' {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// nameRE parses a name New made: pid, start ticks.
var nameRE = regexp.MustCompile(`^` + regexp.QuoteMeta(Prefix) + `(\d+)-(\d+)-\d+-[a-z][a-z0-9]*$`)

// Stale reports whether a namespace called name was made by this package
// in a process that is gone (no process with that pid, or one started at
// another time). Names not made by New are never stale.
func Stale(name string) bool {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err1 := strconv.Atoi(m[1])
	start, err2 := strconv.ParseUint(m[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	st, err := procfs.ReadStat(pid)
	return err != nil || st.StartTime != start
}

// List returns the names `ip netns list` shows that start with Prefix.
func List() ([]string, error) {
	ip, why := available()
	if why != "" {
		return nil, errors.New(why)
	}
	return list(ip)
}

func list(ip string) ([]string, error) {
	out, err := run(ip, "netns", "list")
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %v: %s", err, out)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		// "NAME" or "NAME (id: N)"
		if f := strings.Fields(sc.Text()); len(f) > 0 && strings.HasPrefix(f[0], Prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// sweep deletes the namespaces of gone creators, killing their leftover
// processes first. Concurrent sweeps (two test binaries) may race on one
// namespace; the loser's errors are only logged.
func sweep(ip string, logf func(string, ...any)) {
	names, err := list(ip)
	if err != nil {
		logf("netns: sweep: %v", err)
		return
	}
	for _, name := range names {
		if !Stale(name) {
			continue
		}
		if ps, err := pids(ip, name); err == nil && len(ps) > 0 {
			logf("netns: sweep: stale %s (its creator is gone) still holds %s: killed", name, describe(ps))
			killAll(ps)
		}
		if out, err := run(ip, "netns", "delete", name); err != nil {
			logf("netns: sweep: delete stale %s: %v: %s", name, err, out)
			continue
		}
		logf("netns: sweep: deleted stale %s (its creator is gone)", name)
	}
}
