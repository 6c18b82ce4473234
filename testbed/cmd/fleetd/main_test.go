package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// binPath is the stand-in binary built once by TestMain; herdrPath the herdr
// stand-in (testbed/cmd/herdr), empty when it is absent or does not build.
var binPath, herdrPath, herdrSkip string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetd-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "fleetd")
	out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	if _, err := os.Stat("../herdr"); err != nil {
		herdrSkip = "herdr stand-in absent: " + err.Error()
	} else if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "herdr"), "../herdr").CombinedOutput(); err != nil {
		herdrSkip = fmt.Sprintf("herdr stand-in does not build: %v\n%s", err, out)
	} else {
		herdrPath = filepath.Join(dir, "herdr")
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// lines collects a process's stderr, goroutine-safe.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.all = append(l.all, s); l.mu.Unlock() }

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

func (l *lines) find(re *regexp.Regexp) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.all {
		if m := re.FindStringSubmatch(s); m != nil {
			return m
		}
	}
	return nil
}

// proc is a running stand-in binary.
type proc struct {
	cmd  *exec.Cmd
	log  *lines
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done
	port int
	// logDone is closed when stderr reached EOF (every holder closed it).
	logDone chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// baseEnv is a valid environment for the stand-in (herdr socket absent).
func baseEnv(t *testing.T, port int) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"FLEET_NAME=bin-test",
		"FLEET_PORT=" + strconv.Itoa(port),
		"FLEET_HERDR_SOCKET=" + filepath.Join(t.TempDir(), "absent.sock"),
		"FLEET_LEAD_LAUNCH=0",
	}
}

// start runs the binary in its own process group; the group is SIGKILLed
// when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A pipe of our own rather than StderrPipe: --fork-children children
	// inherit stderr and keep it open after the daemon exits, so exit and
	// end-of-log are separate events.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	logDone := make(chan struct{})
	p := &proc{cmd: cmd, log: &lines{}, done: make(chan struct{}), logDone: logDone}
	go func() {
		defer close(logDone)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.log.add(sc.Text())
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		select {
		case <-logDone:
		case <-time.After(5 * time.Second):
			t.Error("stderr still open 5s after killing the process group")
		}
		if t.Failed() {
			t.Logf("stand-in stderr:\n%s", p.log)
		}
	})
	return p
}

var listenRe = regexp.MustCompile(`^fleetd stand-in: fleet=(\S+) listening on 127\.0\.0\.1:(\d+) pid=(\d+)$`)

// waitListening waits for the startup line and checks its fields.
func (p *proc) waitListening(t *testing.T, name string) {
	t.Helper()
	var m []string
	exited := false
	wait.For(t, 10*time.Second, "the startup line", wait.Bool(func() bool {
		if m = p.log.find(listenRe); m != nil {
			return true
		}
		select {
		case <-p.done:
			exited = true
			return true
		default:
			return false
		}
	}))
	if exited {
		t.Fatalf("exited before listening: %v", p.err)
	}
	if m[1] != name || m[3] != strconv.Itoa(p.cmd.Process.Pid) {
		t.Fatalf("startup line %q: want fleet=%s pid=%d", m[0], name, p.cmd.Process.Pid)
	}
	p.port, _ = strconv.Atoi(m[2])
}

// wait waits for exit and returns the exit status.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("still running after %v", within)
	}
	// Its last lines may still be in the pipe: wait for the end of the log,
	// briefly (forked children may hold the pipe open after the exit).
	select {
	case <-p.logDone:
	case <-time.After(time.Second):
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

func healthName(port int) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h struct{ Status, Name string }
	if err := json.Unmarshal(b, &h); err != nil || h.Status != "ok" {
		return "", fmt.Errorf("healthz %d %s", resp.StatusCode, b)
	}
	return h.Name, nil
}

func TestHealthzAndGracefulSIGTERM(t *testing.T) {
	port := freePort(t)
	p := start(t, baseEnv(t, port))
	p.waitListening(t, "bin-test")
	if p.port != port {
		t.Fatalf("listening on %d, want %d", p.port, port)
	}
	if name, err := healthName(port); err != nil || name != "bin-test" {
		t.Fatalf("healthz name %q %v", name, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	if !strings.Contains(p.log.String(), "stopped") {
		t.Fatal("no graceful stop logged")
	}
}

func TestConfigFileEnvWins(t *testing.T) {
	port := freePort(t)
	cfg := filepath.Join(t.TempDir(), "f.toml")
	body := fmt.Sprintf("name = \"from-file\"\nport = %d\nherdr_socket = %q\nlead_launch = false\n", port, filepath.Join(t.TempDir(), "x.sock"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, []string{"PATH=" + os.Getenv("PATH")}, "--config", cfg)
	p.waitListening(t, "from-file")
	if name, err := healthName(port); err != nil || name != "from-file" {
		t.Fatalf("healthz %q %v", name, err)
	}

	port2 := freePort(t)
	p2 := start(t, []string{"FLEET_NAME=from-env", "FLEET_PORT=" + strconv.Itoa(port2)}, "--config", cfg)
	p2.waitListening(t, "from-env")
	if name, err := healthName(port2); err != nil || name != "from-env" {
		t.Fatalf("healthz %q %v", name, err)
	}
}

func TestBadConfigExits2(t *testing.T) {
	p := start(t, []string{"FLEET_PORT=1"})
	if code := p.wait(t, 10*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if s := p.log.String(); !strings.Contains(s, "FLEET_NAME") || !strings.Contains(s, "FLEET_HERDR_SOCKET") {
		t.Fatalf("error does not name the missing variables: %s", s)
	}
	p = start(t, baseEnv(t, freePort(t)), "--no-such-flag")
	if code := p.wait(t, 10*time.Second); code != 2 {
		t.Fatalf("bad flag: exit %d, want 2", code)
	}
	if strings.Contains(p.log.String(), childFlag) {
		t.Fatal("usage shows the hidden child flag")
	}
}

func TestExitAfter(t *testing.T) {
	port := freePort(t)
	begin := time.Now()
	p := start(t, baseEnv(t, port), "--exit-after", "700ms", "--exit-code", "3")
	p.waitListening(t, "bin-test")
	if _, err := healthName(port); err != nil {
		t.Fatalf("not healthy before exiting: %v", err)
	}
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d, want 3", code)
	}
	if el := time.Since(begin); el < 700*time.Millisecond {
		t.Fatalf("exited after %v", el)
	}
}

func TestExitCodeAtStartup(t *testing.T) {
	port := freePort(t)
	p := start(t, baseEnv(t, port), "--exit-code", "4")
	if code := p.wait(t, 10*time.Second); code != 4 {
		t.Fatalf("exit %d, want 4", code)
	}
	if p.log.find(listenRe) != nil {
		t.Fatal("listened before exiting at startup")
	}
}

func TestIgnoreTerm(t *testing.T) {
	port := freePort(t)
	p := start(t, baseEnv(t, port), "--ignore-term")
	p.waitListening(t, "bin-test")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.Never(t, 500*time.Millisecond, "exit on SIGTERM despite --ignore-term", wait.Bool(func() bool {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}))
	if _, err := healthName(port); err != nil {
		t.Fatalf("not serving after ignored SIGTERM: %v", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGINT", code)
	}
}

var childRe = regexp.MustCompile(`forked child pid=(\d+)`)

func TestForkChildren(t *testing.T) {
	port := freePort(t)
	p := start(t, baseEnv(t, port), "--fork-children", "2")
	p.waitListening(t, "bin-test")
	var kids []int
	p.log.mu.Lock()
	for _, l := range p.log.all {
		if m := childRe.FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[1])
			kids = append(kids, pid)
		}
	}
	p.log.mu.Unlock()
	if len(kids) != 2 {
		t.Fatalf("children %v, want 2", kids)
	}
	pgid := p.cmd.Process.Pid
	for _, k := range kids {
		st, err := procfs.ReadStat(k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pgrp != pgid || st.PPID != pgid {
			t.Fatalf("child %d: pgrp %d ppid %d, want both %d", k, st.Pgrp, st.PPID, pgid)
		}
	}
	// Let the children install their SIGTERM disposition.
	waitLog(t, p, regexp.MustCompile(`child pid=\d+ pgid=\d+ sleeping`), 2)
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	wait.Never(t, 200*time.Millisecond, "a child dying of SIGTERM to the group", func() (bool, string) {
		for _, k := range kids {
			st, err := procfs.ReadStat(k)
			if err != nil || st.State == 'Z' {
				return true, fmt.Sprintf("child %d: %v %+v", k, err, st)
			}
		}
		return false, ""
	})
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "the children dead of SIGKILL", func() (bool, string) {
		for _, k := range kids {
			if st, err := procfs.ReadStat(k); err == nil && st.State != 'Z' {
				return false, fmt.Sprintf("child %d survives (state %c)", k, st.State)
			}
		}
		return true, ""
	})
}

func waitLog(t *testing.T, p *proc, re *regexp.Regexp, n int) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("%d lines matching %v", n, re), func() (bool, string) {
		p.log.mu.Lock()
		defer p.log.mu.Unlock()
		c := 0
		for _, l := range p.log.all {
			if re.MatchString(l) {
				c++
			}
		}
		return c >= n, fmt.Sprintf("%d lines match", c)
	})
}

func TestPortInUseExits1(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := start(t, baseEnv(t, ln.Addr().(*net.TCPAddr).Port))
	if code := p.wait(t, 10*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(p.log.String(), "address already in use") {
		t.Fatalf("no listen error logged:\n%s", p.log)
	}
}
