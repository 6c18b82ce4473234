package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestExtractSession(t *testing.T) {
	cases := []struct {
		in       []string
		rest     string
		session  string
		wantFail bool
	}{
		{[]string{"--session", "a", "server"}, "server", "a", false},
		{[]string{"server", "--session", "b"}, "server", "b", false},
		{[]string{"--session=c", "server", "stop"}, "server stop", "c", false},
		{[]string{"server", "--", "--session", "d"}, "server -- --session d", "", false},
		{[]string{"server", "--session"}, "", "", true},
	}
	for _, c := range cases {
		rest, s, err := extractSession(c.in)
		if (err != nil) != c.wantFail || strings.Join(rest, " ") != c.rest || s != c.session {
			t.Errorf("extractSession(%q) = %q %q %v", c.in, rest, s, err)
		}
	}
}

// cli is a built stand-in binary plus the environment it runs in.
type cli struct {
	t         *testing.T
	bin       string
	env       []string
	configDir string
}

func buildCLI(t *testing.T) *cli {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "herdr")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	xdg, err := os.MkdirTemp("", "fm") // short: socket paths must stay < 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(xdg) })
	home := filepath.Join(xdg, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := append(herdr.ScrubEnv(os.Environ()), "XDG_CONFIG_HOME="+xdg, "HOME="+home)
	return &cli{t: t, bin: bin, env: env, configDir: filepath.Join(xdg, "herdr")}
}

// exec runs a short CLI command and returns stdout, stderr and the exit status.
func (c *cli) exec(args ...string) (string, string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// server is a running `herdr --session NAME server`.
type server struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan error
	client *herdr.Client
	sock   string
}

// start launches a server as a supervisor would: own session (setsid), no stdin/stdout.
func (c *cli) start(args ...string) *server {
	c.t.Helper()
	s := &server{stderr: &syncbuf.Buffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(c.bin, args...)
	s.cmd.Env = c.env
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := s.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	c.t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
			s.done <- nil
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			c.t.Errorf("server %v ignored SIGTERM", args)
		}
	})
	return s
}

// ready waits for the socket to answer ping.
func (s *server) ready(t *testing.T, sock string) *herdr.Pong {
	t.Helper()
	s.sock = sock
	s.client = herdr.New(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := s.client.WaitReady(ctx)
	if err != nil {
		t.Fatalf("server not ready: %v\nstderr:\n%s", err, s.stderr.String())
	}
	return p
}

// exited waits for the server process to exit and returns its status.
func (s *server) exited(t *testing.T) int {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(15 * time.Second):
		t.Fatalf("server did not exit; stderr:\n%s", s.stderr.String())
		return -1
	}
}

// sessionMembers lists live processes whose session id is sid.
func sessionMembers(sid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 3 && f[3] == strconv.Itoa(sid) && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

func sessions(t *testing.T, out string) map[string]herdr.SessionInfo {
	t.Helper()
	var l struct {
		Sessions []herdr.SessionInfo `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("session list --json: %v: %q", err, out)
	}
	m := map[string]herdr.SessionInfo{}
	for _, s := range l.Sessions {
		m[s.Name] = s
	}
	if len(l.Sessions) == 0 || l.Sessions[0].Name != "default" {
		t.Fatalf("default not first: %q", out)
	}
	return m
}

// TestCLI builds the binary and drives a named session end to end.
func TestCLI(t *testing.T) {
	c := buildCLI(t)
	ctx := context.Background()

	srv := c.start("--session", "fleet-t", "server")
	sock := herdr.SocketPath(c.configDir, "fleet-t")
	pong := srv.ready(t, sock)
	if pong.Protocol != 20 || pong.Capabilities == nil || !pong.Capabilities.DetachedServerDaemon {
		t.Fatalf("pong = %+v (server was started with setsid)", pong)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	lines := strings.SplitN(srv.stderr.String(), "\n", 5)
	if len(lines) < 5 || !strings.Contains(lines[0], "ready") || !strings.Contains(lines[1], sock) || !strings.Contains(lines[2], "herdr-client.sock") || !strings.HasPrefix(lines[3], "log:") {
		t.Fatalf("ready lines:\n%s", srv.stderr.String())
	}

	out, _, code := c.exec("session", "list", "--json")
	m := sessions(t, out)
	if code != 0 || !m["fleet-t"].Running || m["fleet-t"].SocketPath != sock || m["default"].Running || !m["default"].Default {
		t.Fatalf("session list: %d %q", code, out)
	}
	if out, _, code := c.exec("session", "list"); code != 0 || !strings.Contains(out, "fleet-t") || !strings.Contains(out, "running") {
		t.Fatalf("session list table: %d %q", code, out)
	}

	// A second server for the same session refuses.
	if _, errOut, code := c.exec("server", "--session=fleet-t"); code != 1 || !strings.Contains(errOut, "already running") {
		t.Fatalf("second server: %d %q", code, errOut)
	}

	// Workspace, tab, and a command run in a pane.
	work := t.TempDir()
	wc, err := srv.client.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: work, Label: "fleet-t"})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := srv.client.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: wc.Workspace.WorkspaceID, Label: "lead", Env: map[string]string{"ROLE": "lead"}})
	if err != nil {
		t.Fatal(err)
	}
	pane := tc.RootPane.PaneID
	if err := srv.client.PaneSendInput(ctx, pane, `echo "$((40+2))-$HERDR_SESSION-$ROLE-$PWD"`, []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	want := "42-fleet-t-lead-" + work
	wait.For(t, 10*time.Second, fmt.Sprintf("output %q in the pane", want), func() (bool, string) {
		r, err := srv.client.PaneRead(ctx, herdr.PaneReadParams{PaneID: pane, Source: herdr.SourceRecent, StripANSI: true})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains("\n"+r.Text+"\n", "\n"+want+"\n"), "pane text:\n" + r.Text
	})

	// The pane's shell leads its own session, distinct from the server's.
	pi, err := srv.client.PaneProcessInfo(ctx, pane)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := unix.Getsid(pi.ShellPID)
	if err != nil || sid != pi.ShellPID {
		t.Fatalf("getsid(%d) = %d, %v", pi.ShellPID, sid, err)
	}
	if srvSid, _ := unix.Getsid(srv.cmd.Process.Pid); srvSid == sid {
		t.Fatal("pane shares the server's session")
	}
	root, err := srv.client.PaneProcessInfo(ctx, wc.RootPane.PaneID)
	if err != nil {
		t.Fatal(err)
	}
	// A background job in the pane must die with the session too.
	if err := srv.client.PaneSendInput(ctx, pane, "sleep 300 &", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the background job started", func() (bool, string) {
		m := sessionMembers(pi.ShellPID)
		return len(m) >= 2, fmt.Sprintf("session members %v", m)
	})

	// session stop: answered, socket refuses, and nothing of the pane sessions is left.
	out, errOut, code := c.exec("session", "stop", "fleet-t", "--json")
	var stopped struct {
		Stopped bool              `json:"stopped"`
		Session herdr.SessionInfo `json:"session"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &stopped) != nil || !stopped.Stopped || stopped.Session.Name != "fleet-t" || stopped.Session.Running {
		t.Fatalf("session stop: %d %q %q", code, out, errOut)
	}
	for _, shell := range []int{pi.ShellPID, root.ShellPID} {
		if m := sessionMembers(shell); len(m) != 0 {
			t.Fatalf("processes of pane session %d remain after stop: %v", shell, m)
		}
	}
	if code := srv.exited(t); code != 0 {
		t.Fatalf("server exit status %d; stderr:\n%s", code, srv.stderr.String())
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left: %v", err)
	}
	out, _, _ = c.exec("session", "list", "--json")
	if s, ok := sessions(t, out)["fleet-t"]; !ok || s.Running {
		t.Fatalf("stopped session should stay listed, not running: %q", out)
	}

	// Errors: not running (1), bad name (1), usage (2).
	_, errOut, code = c.exec("session", "stop", "fleet-t", "--json")
	var e struct {
		Error herdr.Error `json:"error"`
	}
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Error.Code != "session_stop_failed" {
		t.Fatalf("stop stopped session: %d %q", code, errOut)
	}
	_, errOut, code = c.exec("session", "stop", "bad/name", "--json")
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Error.Code != "invalid_session_name" {
		t.Fatalf("stop bad name: %d %q", code, errOut)
	}
	for _, args := range [][]string{{"session", "stop"}, {"session", "stop", "a", "b"}, {"session", "list", "--bogus"}, {"frobnicate"}, {"--session"}} {
		if _, _, code := c.exec(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestCLISignalsAndServerStop checks that SIGTERM and `server stop` both shut a session down
// cleanly, killing its panes.
func TestCLISignalsAndServerStop(t *testing.T) {
	c := buildCLI(t)
	ctx := context.Background()
	for _, how := range []string{"SIGTERM", "SIGHUP", "server stop"} {
		t.Run(how, func(t *testing.T) {
			name := "s-" + strings.ReplaceAll(how, " ", "-")
			srv := c.start("server", "--session", name)
			srv.ready(t, herdr.SocketPath(c.configDir, name))
			wc, err := srv.client.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{})
			if err != nil {
				t.Fatal(err)
			}
			pi, err := srv.client.PaneProcessInfo(ctx, wc.RootPane.PaneID)
			if err != nil {
				t.Fatal(err)
			}
			switch how {
			case "SIGTERM":
				_ = srv.cmd.Process.Signal(syscall.SIGTERM)
			case "SIGHUP":
				_ = srv.cmd.Process.Signal(syscall.SIGHUP)
			default:
				if out, errOut, code := c.exec("--session", name, "server", "stop"); code != 0 {
					t.Fatalf("server stop: %d %q %q", code, out, errOut)
				}
			}
			if code := srv.exited(t); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if m := sessionMembers(pi.ShellPID); len(m) != 0 {
				t.Fatalf("pane processes remain: %v", m)
			}
			if herdr.SocketReachable(srv.sock) {
				t.Fatal("socket still answers")
			}
		})
	}
}

// TestExtractStandin: the stand-in's protocol and version come from flags, else from the
// environment, else the defaults; they are removed from the arguments before "--" only.
func TestExtractStandin(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	cases := []struct {
		in       []string
		env      map[string]string
		rest     string
		protocol int
		version  string
		wantFail bool
	}{
		{[]string{"server"}, nil, "server", 20, "0.8.2-standin", false},
		{[]string{"--standin-protocol", "19", "server"}, nil, "server", 19, "0.8.0-standin", false},
		{[]string{"server", "--standin-protocol=22"}, nil, "server", 22, "0.9.3-standin", false},
		{[]string{"--standin-version", "0.9.1", "--standin-protocol", "22", "server"}, nil, "server", 22, "0.9.1", false},
		{[]string{"server"}, map[string]string{envProtocol: "22", envVersion: "0.9.2"}, "server", 22, "0.9.2", false},
		{[]string{"--standin-protocol=19", "server"}, map[string]string{envProtocol: "22"}, "server", 19, "0.8.0-standin", false},
		{[]string{"server", "--", "--standin-protocol", "1"}, nil, "server -- --standin-protocol 1", 20, "0.8.2-standin", false},
		{[]string{"--standin-protocol", "x"}, nil, "", 0, "", true},
		{[]string{"--standin-protocol"}, nil, "", 0, "", true},
		{[]string{"server"}, map[string]string{envProtocol: "0"}, "", 0, "", true},
	}
	for _, c := range cases {
		env = c.env
		rest, st, err := extractStandin(c.in, getenv)
		if (err != nil) != c.wantFail || (err == nil && (strings.Join(rest, " ") != c.rest || st.protocol != c.protocol || st.version != c.version)) {
			t.Errorf("extractStandin(%q, %v) = %q %+v %v", c.in, c.env, rest, st, err)
		}
	}
}

// TestCLIVersionAndProtocol: `herdr --version` prints "herdr VERSION" as herdr does, and a
// server started with another protocol reports it in ping.
func TestCLIVersionAndProtocol(t *testing.T) {
	c := buildCLI(t)
	if out, _, code := c.exec("--version"); code != 0 || out != "herdr 0.8.2-standin\n" {
		t.Fatalf("--version: %d %q", code, out)
	}
	if out, _, code := c.exec("--standin-protocol", "22", "server", "-V"); code != 0 || out != "herdr 0.9.3-standin\n" {
		t.Fatalf("-V with protocol 22: %d %q", code, out)
	}
	srv := c.start("--standin-protocol", "19", "--session", "old", "server")
	pong := srv.ready(t, herdr.SocketPath(c.configDir, "old"))
	if pong.Protocol != 19 || pong.Version != "0.8.0-standin" {
		t.Fatalf("pong = %+v", pong)
	}
}
