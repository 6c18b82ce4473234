package nsrelay

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
)

// ReadyLine is what testbed/cmd/nsrelay prints on stdout, alone, once its
// half listens. Nothing else goes to stdout; its log goes to stderr.
const ReadyLine = "nsrelay: ready"

// startTimeout bounds how long Start waits for a half's ReadyLine, and
// stopGrace how long a half has to exit after SIGTERM before SIGKILL.
const (
	startTimeout = 15 * time.Second
	stopGrace    = 5 * time.Second
)

// Relay is a running pair of nsrelay processes carrying Ports into one
// network namespace: Outer in the host's namespace, Inner in ns (through
// `ip netns exec`), joined by Socket. Both are killed if the test process
// dies (SIGKILL as parent-death signal) and stopped at the test's cleanup.
type Relay struct {
	// Socket is the unix socket between the halves (in a directory of its
	// own, removed at cleanup).
	Socket string
	// Ports are the ports carried, the same numbers on both sides.
	Ports []int

	t   testing.TB
	ns  *netns.NS
	bin string
	dir string
	log syncbuf.Buffer

	mu    sync.Mutex
	procs []*half // running halves: outer, inner
}

type half struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// dirPrefix starts the name of a relay's directory in os.TempDir():
// fmrl-PID-STARTTICKS- of this process, so that a later run can remove the
// directories of a killed one (sweepDirs).
func dirPrefix() string {
	start := uint64(0)
	if st, err := procfs.ReadStat(os.Getpid()); err == nil {
		start = st.StartTime
	}
	return fmt.Sprintf("fmrl-%d-%d-", os.Getpid(), start)
}

var (
	sweepOnce sync.Once
	dirRE     = regexp.MustCompile(`^fmrl-(\d+)-(\d+)-\d+$`)
)

// sweepDirs removes the relay directories (and the socket in each) of
// processes that are gone; the halves died with them (parent-death
// signal).
func sweepDirs(logf func(string, ...any)) {
	ents, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		m := dirRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		start, _ := strconv.ParseUint(m[2], 10, 64)
		if st, err := procfs.ReadStat(pid); err == nil && st.StartTime == start {
			continue // its creator runs
		}
		if err := os.RemoveAll(filepath.Join(os.TempDir(), e.Name())); err == nil {
			logf("nsrelay: removed %s, left by a run that is gone", e.Name())
		}
	}
}

// Start runs both halves of testbed/cmd/nsrelay (the binary at bin)
// carrying ports from the host's 127.0.0.1 to 127.0.0.1 inside ns, and
// returns once both listen. They are stopped at cleanup.
func Start(t testing.TB, ns *netns.NS, bin string, ports ...int) *Relay {
	t.Helper()
	if len(ports) == 0 {
		t.Fatal("nsrelay: Start with no port")
	}
	sweepOnce.Do(func() { sweepDirs(t.Logf) })
	dir, err := os.MkdirTemp("", dirPrefix())
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Socket: dir + "/relay.sock", Ports: ports, t: t, ns: ns, bin: bin, dir: dir}
	t.Cleanup(func() {
		r.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("nsrelay log:\n%s", r.Log())
		}
		os.RemoveAll(dir)
	})
	r.start()
	return r
}

// StartFor is Start with the ports of urls (e.g. a broker's management
// and AMQP URLs). Each must name a loopback host (127.0.0.1, localhost or
// ::1) and an explicit port: the relay dials 127.0.0.1.
func StartFor(t testing.TB, ns *netns.NS, bin string, urls ...string) *Relay {
	t.Helper()
	ports, err := PortsOf(urls...)
	if err != nil {
		t.Fatal(err)
	}
	return Start(t, ns, bin, ports...)
}

// PortsOf returns the distinct ports of urls, in order; an error names a
// URL that is not loopback or has no explicit port.
func PortsOf(urls ...string) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("nsrelay: %q: %v", raw, err)
		}
		switch u.Hostname() {
		case "127.0.0.1", "localhost", "::1":
		default:
			return nil, fmt.Errorf("nsrelay: %q: host %q is not loopback; the relay carries the host's 127.0.0.1 ports only", raw, u.Hostname())
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("nsrelay: %q: no explicit port", raw)
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

func (r *Relay) portList() string {
	s := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// start runs the outer half, then the inner one, each up to ReadyLine.
func (r *Relay) start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.procs) != 0 {
		r.t.Fatal("nsrelay: already running")
	}
	outer := exec.Command(r.bin, "outer", "-socket", r.Socket, "-allow", r.portList())
	r.procs = append(r.procs, r.startHalf("outer", outer))
	inner := r.ns.Command(r.bin, "inner", "-socket", r.Socket, "-listen", r.portList())
	r.procs = append(r.procs, r.startHalf("inner", inner))
}

func (r *Relay) startHalf(name string, cmd *exec.Cmd) *half {
	r.t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout = pw
	cmd.Stderr = &r.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		r.t.Fatalf("nsrelay %s: %v", name, err)
	}
	pw.Close()
	h := &half{name: name, cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() { // ends at the half's exit (EOF)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			if first && sc.Text() == ReadyLine {
				close(ready)
			} else {
				fmt.Fprintf(&r.log, "%s stdout: %s\n", name, sc.Text())
			}
			first = false
		}
	}()
	go func() { _ = cmd.Wait(); close(h.done) }()
	select {
	case <-ready:
		return h
	case <-h.done:
		r.t.Fatalf("nsrelay %s exited before listening (%v):\n%s", name, cmd.ProcessState, r.Log())
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-h.done
		r.t.Fatalf("nsrelay %s did not listen within %s:\n%s", name, startTimeout, r.Log())
	}
	return nil
}

// stop signals both halves (inner first) and waits for them, SIGKILL after
// stopGrace.
func (r *Relay) stop(sig syscall.Signal) {
	r.mu.Lock()
	procs := r.procs
	r.procs = nil
	r.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].cmd.Process.Signal(sig)
	}
	for _, h := range procs {
		select {
		case <-h.done:
		case <-time.After(stopGrace):
			_ = h.cmd.Process.Kill()
			<-h.done
		}
	}
}

// Kill kills both halves with SIGKILL and returns once they are gone: every
// connection through the relay breaks, and the ports inside the namespace
// refuse connections. Restart brings the relay back.
func (r *Relay) Kill() { r.stop(syscall.SIGKILL) }

// Restart starts both halves again after Kill, on the same socket and
// ports.
func (r *Relay) Restart() {
	r.t.Helper()
	r.start()
}

// PIDs returns the pids of the running halves (outer, inner), empty after
// Kill.
func (r *Relay) PIDs() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []int
	for _, h := range r.procs {
		ps = append(ps, h.cmd.Process.Pid)
	}
	return ps
}

// Log returns both halves' log lines so far.
func (r *Relay) Log() string { return r.log.String() }

// Conns counts the connections half ("outer" or "inner") relayed to port
// so far (its "conn port=N" log lines).
func (r *Relay) Conns(half string, port int) int {
	return strings.Count(r.Log(), fmt.Sprintf("%s: conn port=%d\n", half, port))
}

// Dial opens a connection to 127.0.0.1:PORT of the host through the outer
// half only (addr "HOST:PORT", PORT one of Ports; HOST is ignored): for an
// in-process simulated host that must reach the broker through the relay
// without a namespace of its own. Shaped for amqp.Config.Dial and
// federation.Config.Dial; bounded to 10 s.
func (r *Relay) Dial(network, addr string) (net.Conn, error) {
	if network != "tcp" && network != "tcp4" {
		return nil, fmt.Errorf("nsrelay: dial %s: only tcp", network)
	}
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		return nil, fmt.Errorf("nsrelay: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return DialVia(ctx, r.Socket, p)
}
