// Package harness is test equipment: it builds fleetmgr and the stand-ins
// (testbed/cmd/herdr, testbed/cmd/fleetd, testbed/cmd/mcpprobe), writes a
// fleets.toml in a throwaway directory and runs real processes against it.
// An Env made by NewEnvIn is a simulated host: its processes run in a
// network namespace of their own (testbed/netns). Nothing in the product
// imports it.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Bins are the paths of the binaries a test drives.
type Bins struct {
	Fleetmgr, Herdr, Fleetd, Probe string
	RefProxy                       string // testbed/cmd/refproxy, BenchmarkOverhead's net/http reference
	NSRelay                        string // testbed/cmd/nsrelay, the broker relay into a namespace (testbed/nsrelay)
	Dir                            string
}

// RepoRoot finds the module root (the directory holding go.mod) from the
// test's working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Build compiles the binaries into dir (one `go build` invocation).
func Build(dir string) (*Bins, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	// -buildvcs=auto (over a -buildvcs=false in GOFLAGS) stamps the VCS
	// revision in a git checkout, as a plain `go build` there does, so
	// `fleetmgr --version` is tested as operators get it.
	cmd := exec.Command("go", "build", "-buildvcs=auto", "-o", dir+"/",
		"./cmd/fleetmgr", "./testbed/cmd/herdr", "./testbed/cmd/fleetd", "./testbed/cmd/mcpprobe", "./testbed/cmd/refproxy", "./testbed/cmd/nsrelay")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return &Bins{
		Fleetmgr: filepath.Join(dir, "fleetmgr"),
		Herdr:    filepath.Join(dir, "herdr"),
		Fleetd:   filepath.Join(dir, "fleetd"),
		Probe:    filepath.Join(dir, "mcpprobe"),
		RefProxy: filepath.Join(dir, "refproxy"),
		NSRelay:  filepath.Join(dir, "nsrelay"),
		Dir:      dir,
	}, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (all n probe listeners are open at once).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// Fleet describes one [fleets.NAME] table for Env.
type Fleet struct {
	Name  string
	Port  int    // 0: a free port is chosen
	Extra string // extra TOML lines for the table
	// Args are extra arguments for the fleetd stand-in.
	Args []string
}

// Env is one throwaway fleetmgr installation: config, state dir, herdr
// config dir (XDG_CONFIG_HOME) and the environment for its processes.
type Env struct {
	T          testing.TB
	Bins       *Bins
	Dir        string
	StateDir   string
	XDG        string
	ConfigPath string
	Listen     string
	Ports      map[string]int
	Environ    []string
	// Netns is the network namespace this Env's processes run in (its
	// fleetmgr, and so its herdr and fleetd children), set by NewEnvIn;
	// nil: the host's. Listen and Ports are then on the namespace's
	// loopback, reachable through Command, HTTPClient and DialContext
	// only. Files (state dir, sockets) are on the shared file system.
	Netns *netns.NS
}

// NewEnv writes a fleets.toml with fleets (on the stand-ins) and registers a
// cleanup that stops every fleet and kills what is left.
func NewEnv(t testing.TB, bins *Bins, managerExtra string, fleets ...Fleet) *Env {
	t.Helper()
	return newEnv(t, bins, nil, managerExtra, fleets...)
}

// NewEnvIn is NewEnv for a simulated host: every process the Env runs
// (Run, MustRun, StartServe, StartHerdr, Command, RunProbe and the cleanup's
// `stop --all`) runs inside ns, so its fleets listen on ns's loopback and
// reach only what ns offers (a broker carried in by testbed/nsrelay, whose
// URLs read as on the host). ns must outlive the Env: make it first, so its
// cleanup runs after the Env's.
func NewEnvIn(t testing.TB, bins *Bins, ns *netns.NS, managerExtra string, fleets ...Fleet) *Env {
	t.Helper()
	if ns == nil {
		t.Fatal("harness: NewEnvIn with no namespace (use NewEnv)")
	}
	return newEnv(t, bins, ns, managerExtra, fleets...)
}

// FastPathEnv is the environment variable that runs the e2e tests with
// serve's MCP fast path off: FLEETMGR_TEST_FAST_PATH=off writes
// `fast_path = false` into every Env's [manager] (unless the test sets
// fast_path itself), so the same tests check the go-sdk's own answers.
// scripts/test runs the proxy tests both ways.
const FastPathEnv = "FLEETMGR_TEST_FAST_PATH"

// FastPathOff reports whether FastPathEnv asks for the fast path off.
// Tests of the fast path's own answers (where it knowingly differs from
// the SDK, e.g. a JSON answer where the SDK streams) skip then.
func FastPathOff() bool {
	switch os.Getenv(FastPathEnv) {
	case "off", "false", "0":
		return true
	}
	return false
}

func newEnv(t testing.TB, bins *Bins, ns *netns.NS, managerExtra string, fleets ...Fleet) *Env {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, Bins: bins, Dir: dir, StateDir: filepath.Join(dir, "state"), XDG: filepath.Join(dir, "xdg"),
		ConfigPath: filepath.Join(dir, "fleets.toml"), Ports: map[string]int{}, Netns: ns}
	// All ports are chosen while every probe listener is still open, so no
	// two of them can be the same. In a namespace too: they were free on
	// the host, and the only other listeners there are the relay's, on
	// ports the host's brokers hold.
	ports := FreePorts(t, 1+len(fleets))
	e.Listen = "127.0.0.1:" + strconv.Itoa(ports[0])
	// In [manager] itself, before managerExtra: that may open other
	// tables ([broker], [federation]).
	fastPath := ""
	if FastPathOff() && !strings.Contains(managerExtra, "fast_path") {
		fastPath = "fast_path = false\n"
	}
	// stop_grace is 3 s unless managerExtra sets its own.
	grace := "stop_grace = \"3s\"\n"
	if strings.Contains(managerExtra, "stop_grace") {
		grace = ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nlisten = %q\nstate_dir = %q\nherdr_bin = %q\nport_range = [1024, 65535]\n%sstart_timeout = \"15s\"\n%s%s\n",
		e.Listen, e.StateDir, bins.Herdr, grace, fastPath, managerExtra)
	for i, f := range fleets {
		port := f.Port
		if port == 0 {
			port = ports[1+i]
		}
		e.Ports[f.Name] = port
		proj := filepath.Join(dir, "proj-"+f.Name)
		if err := os.MkdirAll(proj, 0o755); err != nil {
			t.Fatal(err)
		}
		argv := append([]string{bins.Fleetd, "--config", "{{.ConfigPath}}"}, f.Args...)
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "\n[fleets.%s]\nproject = %q\ncommand = [%s]\nport = %d\n%s\n", f.Name, proj, strings.Join(q, ", "), port, f.Extra)
	}
	if err := os.WriteFile(e.ConfigPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// HOME is the Env's own: pane shells are login shells, and the host
	// user's dotfiles (a pyenv rehash waiting 60 s on a lock a killed shell
	// left behind, say) must not decide the tests' timing.
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HERDR_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	e.Environ = append(env, "XDG_CONFIG_HOME="+e.XDG, "HOME="+home)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := e.CommandContext(ctx, bins.Fleetmgr, "--config", e.ConfigPath, "stop", "--all", "--yes")
		_ = cmd.Run()
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return e
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs fleetmgr with args (plus --config) and waits up to 60 s.
func (e *Env) Run(args ...string) Result {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := e.CommandContext(ctx, e.Bins.Fleetmgr, append([]string{"--config", e.ConfigPath}, args...)...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := Result{Stdout: so.String(), Stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		e.T.Fatalf("fleetmgr %v: %v", args, err)
	}
	return r
}

// MustRun is Run that fails the test on a non-zero exit.
func (e *Env) MustRun(args ...string) Result {
	e.T.Helper()
	r := e.Run(args...)
	if r.Code != 0 {
		e.T.Fatalf("fleetmgr %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// Serve is a running `fleetmgr serve`.
type Serve struct {
	Cmd *exec.Cmd
	log syncbuf.Buffer
}

// Log returns what the daemon logged so far.
func (s *Serve) Log() string { return s.log.String() }

// StartServe runs `fleetmgr serve` and waits until its /healthz answers.
func (e *Env) StartServe(extra ...string) *Serve {
	e.T.Helper()
	s := &Serve{}
	s.Cmd = e.Command(e.Bins.Fleetmgr, append([]string{"--config", e.ConfigPath, "serve"}, extra...)...)
	s.Cmd.Stdout, s.Cmd.Stderr = &s.log, &s.log
	s.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.Cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = s.Cmd.Wait(); close(exited) }()
	e.T.Cleanup(func() {
		_ = s.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = s.Cmd.Process.Kill()
			<-exited
		}
		if e.T.Failed() {
			e.T.Logf("fleetmgr serve log:\n%s", s.Log())
		}
	})
	early := false
	wait.For(e.T, 20*time.Second, "fleetmgr serve to answer /healthz", func() (bool, string) {
		select {
		case <-exited:
			early = true
			return true, ""
		default:
		}
		resp, err := e.HTTPClient().Get("http://" + e.Listen + "/healthz")
		if err != nil {
			return false, fmt.Sprintf("%v; log:\n%s", err, s.Log())
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Sprintf("status %d; log:\n%s", resp.StatusCode, s.Log())
	})
	if early {
		e.T.Fatalf("fleetmgr serve exited early:\n%s", s.Log())
	}
	return s
}

// Command returns a command running name with args as this Env's
// processes run: inside Netns when set, with Environ as its environment
// (replace cmd.Env for another).
func (e *Env) Command(name string, args ...string) *exec.Cmd {
	return e.CommandContext(context.Background(), name, args...)
}

// CommandContext is Command with a context that kills the process.
func (e *Env) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if e.Netns != nil {
		cmd = e.Netns.CommandContext(ctx, name, args...)
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Env = e.Environ
	return cmd
}

// HTTPClient returns a client that reaches this Env's listeners:
// http.DefaultClient, or one dialling inside Netns (without keep-alives,
// so it holds no connection between requests).
func (e *Env) HTTPClient() *http.Client {
	if e.Netns != nil {
		return e.Netns.HTTPClient()
	}
	return http.DefaultClient
}

// DialContext connects as this Env's processes would: inside Netns when
// set (address an IP literal and port).
func (e *Env) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if e.Netns != nil {
		return e.Netns.DialContext(ctx, network, addr)
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// RunProbe is the package's RunProbe run as this Env's processes run
// (inside Netns when set), with the test's environment (not Environ): a
// plain process outside every pane.
func (e *Env) RunProbe(url string, args ...string) string {
	e.T.Helper()
	cmd := e.Command(e.Bins.Probe, append([]string{"-url", url}, args...)...)
	cmd.Env = nil
	out, err := cmd.Output()
	if err != nil {
		e.T.Fatalf("mcpprobe: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// URL is the manager's MCP endpoint.
func (e *Env) URL() string { return "http://" + e.Listen + "/mcp" }

// HerdrSocket is the API socket of herdr session name in this Env.
func (e *Env) HerdrSocket(session string) string {
	return filepath.Join(e.XDG, "herdr", "sessions", session, "herdr.sock")
}

// WaitFile waits up to d for path to exist and returns its content.
func WaitFile(t testing.TB, path string, d time.Duration) string {
	t.Helper()
	var content string
	wait.For(t, d, path+" to appear", wait.Bool(func() bool {
		b, err := os.ReadFile(path)
		content = string(b)
		return err == nil
	}))
	return content
}

// RunProbe runs the mcpprobe binary against url from this (non-pane)
// process and returns its verdict line.
func RunProbe(t testing.TB, bins *Bins, url string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bins.Probe, append([]string{"-url", url}, args...)...).Output()
	if err != nil {
		t.Fatalf("mcpprobe: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// StartHerdr runs a stand-in herdr server for session name under this Env's
// XDG_CONFIG_HOME (a session fleetmgr did not start, as an operator's own
// would be) and waits for its socket. It is stopped at cleanup.
func (e *Env) StartHerdr(name string) string {
	e.T.Helper()
	return e.StartHerdrAt(e.XDG, name)
}

// StartHerdrAt is StartHerdr under another XDG_CONFIG_HOME (and HOME): a
// herdr session neither fleetmgr's config nor `herdr session list` under
// this Env can see. It returns the session's socket.
func (e *Env) StartHerdrAt(xdg, name string) string {
	e.T.Helper()
	env := []string{"XDG_CONFIG_HOME=" + xdg}
	if xdg != e.XDG {
		env = append(env, "HOME="+xdg)
	}
	for _, kv := range e.Environ {
		if strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || (xdg != e.XDG && strings.HasPrefix(kv, "HOME=")) {
			continue
		}
		env = append(env, kv)
	}
	cmd := e.Command(e.Bins.Herdr, "--session", name, "server")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.T.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	sock := filepath.Join(xdg, "herdr", "sessions", name, "herdr.sock")
	wait.For(e.T, 10*time.Second, "herdr session "+name+" to come up", func() (bool, string) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return sock
}
