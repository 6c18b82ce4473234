package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
)

// lavinmqCtl stops the LavinMQ the tester runs (SIGTERM to the pid in its
// pid file) and starts it again: the same binary, data directory, ports
// and loopback binds (the command line args gives, which the tester's
// LavinMQ must have been started with: pid refuses any other process),
// detached in its own session, in a private mount namespace with its own
// /tmp when one can be made. The private /tmp hides the management socket
// LavinMQ 1.0.0 always opens at /tmp/lavinmqctl.sock, which answers every
// API call without credentials (docs/ARCHITECTURE.md, "Brokers").
type lavinmqCtl struct {
	bin, dataDir, pidFile, logFile string
	amqpPort, httpPort             int
	host                           string // of both URLs; Start binds 127.0.0.1
}

// lavinmqFromEnv reads the LavinMQ's addresses (already known to be set)
// and the EnvLavinMQ* variables Stop and Start need. Only a malformed
// address is an error; missing variables make usable() say why.
func lavinmqFromEnv(mgmt, amqpURL string) (*lavinmqCtl, error) {
	c := &lavinmqCtl{
		bin: os.Getenv(EnvLavinMQBin), dataDir: os.Getenv(EnvLavinMQDataDir),
		pidFile: os.Getenv(EnvLavinMQPidFile), logFile: os.Getenv(EnvLavinMQLog),
	}
	var hosts [2]string
	for i, p := range []struct {
		env, raw string
		port     *int
	}{{EnvLavinMQMgmt, mgmt, &c.httpPort}, {EnvLavinMQAMQP, amqpURL, &c.amqpPort}} {
		u, err := url.Parse(p.raw)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %v", p.env, p.raw, err)
		}
		n, err := strconv.Atoi(u.Port())
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%s=%q: no port", p.env, p.raw)
		}
		*p.port, hosts[i] = n, u.Hostname()
	}
	c.host = hosts[0]
	if hosts[1] != hosts[0] {
		c.host = ""
	}
	return c, nil
}

func (c *lavinmqCtl) usable() string {
	var unset []string
	for _, v := range []struct{ env, val string }{
		{EnvLavinMQBin, c.bin}, {EnvLavinMQDataDir, c.dataDir}, {EnvLavinMQPidFile, c.pidFile}, {EnvLavinMQLog, c.logFile},
	} {
		if v.val == "" {
			unset = append(unset, v.env)
		}
	}
	switch {
	case len(unset) > 0:
		return strings.Join(unset, ", ") + " (the restart tests need them for the LavinMQ you run)"
	case c.host != "127.0.0.1":
		return "a LavinMQ on 127.0.0.1 (its addresses name another host)"
	}
	return ""
}

// args is lavinmq's command line: AMQP and HTTP on 127.0.0.1, the TLS
// listeners and unix sockets off.
func (c *lavinmqCtl) args() []string {
	return []string{c.bin, "-D", c.dataDir, "-p", strconv.Itoa(c.amqpPort), "--http-port", strconv.Itoa(c.httpPort),
		"--amqp-bind", "127.0.0.1", "--http-bind", "127.0.0.1", "--amqps-port=-1", "--https-port=-1", "--guest-only-loopback=true"}
}

// pid reads the pid file and checks that the process is this LavinMQ (its
// command line is args()), so a recycled pid is never signalled.
func (c *lavinmqCtl) pid() (int, error) {
	b, err := os.ReadFile(c.pidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: not a pid: %q", c.pidFile, b)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, fmt.Errorf("LavinMQ pid %d (from %s) is not running: %w", pid, c.pidFile, err)
	}
	if argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"); !slices.Equal(argv, c.args()) {
		return 0, fmt.Errorf("pid %d (from %s) is not this LavinMQ: its command line is %q", pid, c.pidFile, argv)
	}
	return pid, nil
}

// gone reports whether pid has exited (a zombie counts: its listeners and
// data directory lock are released at exit, and its reaper is init, not
// us).
func gone(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return errors.Is(err, fs.ErrNotExist) || (err == nil && st.State == 'Z')
}

// stop sends SIGTERM (LavinMQ closes its listeners and connections, syncs
// and exits; about 1.3 s here) and waits up to 30 s, then SIGKILL.
func (c *lavinmqCtl) stop(t testing.TB) {
	t.Helper()
	pid, err := c.pid()
	if err != nil {
		t.Fatalf("%s: stop: %v", NameLavinMQ, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("%s: stop: SIGTERM to %d: %v", NameLavinMQ, pid, err)
	}
	for deadline := time.Now().Add(30 * time.Second); !gone(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Logf("%s: pid %d still running 30 s after SIGTERM: killed", NameLavinMQ, pid)
			for d := time.Now().Add(5 * time.Second); !gone(pid) && time.Now().Before(d); {
				time.Sleep(50 * time.Millisecond)
			}
			break
		}
	}
	if !gone(pid) {
		t.Fatalf("%s: pid %d did not exit", NameLavinMQ, pid)
	}
}

// privateTmp reports whether this process may make a mount namespace
// (root, or CAP_SYS_ADMIN), checked with unshare itself.
func privateTmp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "true").Run() == nil
}

// privateTmpScript, run as `sh -c privateTmpScript sh CMD ARGS…` inside a
// new mount namespace, mounts an empty tmpfs on /tmp and execs CMD.
const privateTmpScript = `mount -t tmpfs -o size=1m,mode=0700 fleetmgr-lavinmq-tmp /tmp && exec "$@"`

// start starts LavinMQ detached (its own session; sh starts it in the
// background and exits, so init reaps it), appending its output to the
// log, records the pid, and waits until both ports accept connections.
func (c *lavinmqCtl) start(t testing.TB) {
	t.Helper()
	argv := c.args()
	if privateTmp() {
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", privateTmpScript, "sh"}, argv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `"$@" >>"$FLEETMGR_LAVINMQ_LOG" 2>&1 </dev/null & echo $!`, "sh"}, argv...)...)
	cmd.Env = append(lavinmqEnv(os.Environ()), "FLEETMGR_LAVINMQ_LOG="+c.logFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: start %q: %v", NameLavinMQ, argv, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%s: start: sh printed %q, not a pid", NameLavinMQ, out)
	}
	tmp := c.pidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatalf("%s: pid file: %v", NameLavinMQ, err)
	}
	if err := os.Rename(tmp, c.pidFile); err != nil {
		t.Fatalf("%s: pid file: %v", NameLavinMQ, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if listening(c.amqpPort) && listening(c.httpPort) {
			return
		}
		if gone(pid) || time.Now().After(deadline) {
			log, _ := os.ReadFile(c.logFile)
			t.Fatalf("%s: pid %d did not come up on ports %d and %d (exited: %v); the end of %s:\n%s",
				NameLavinMQ, pid, c.amqpPort, c.httpPort, gone(pid), filepath.Base(c.logFile), lastLines(string(log), 15))
		}
	}
}

// listening reports whether 127.0.0.1:port accepts a TCP connection.
func listening(port int) bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// lavinmqEnv is env for lavinmq: no systemd notification or socket
// activation variables (it would talk to this machine's systemd), and
// CONFIGURATION_DIRECTORY pointing nowhere, so a system-wide
// /etc/lavinmq/lavinmq.ini (which could open more listeners) is not read.
func lavinmqEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "JOURNAL_STREAM", "CONFIGURATION_DIRECTORY", "STATE_DIRECTORY":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "CONFIGURATION_DIRECTORY=/nonexistent")
}

// version is `lavinmq --version`.
func (c *lavinmqCtl) version() (string, error) {
	if c.bin == "" {
		return "", fmt.Errorf("%s is not set", EnvLavinMQBin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.bin, "--version").Output()
	return strings.TrimSpace(string(out)), err
}
