package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/service"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Issue 18's acceptance: from nothing to a supervised manager mounted in
// the operator's client.

// bare is a fleetmgr installation with nothing in it: an empty HOME, its
// own XDG directories, the stand-ins for fleetd and herdr first on PATH
// (fleets.toml names them as "fleetd" and "herdr", as an operator's does).
type bare struct {
	dir, home, xdg string
	env            []string
}

func newBare(t *testing.T) *bare {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	b := &bare{dir: dir, home: filepath.Join(dir, "home"), xdg: filepath.Join(dir, "xdg")}
	if err := os.MkdirAll(b.home, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "HOME" || k == "PATH" || strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "HERDR_") {
			continue
		}
		b.env = append(b.env, kv)
	}
	b.env = append(b.env, "HOME="+b.home, "XDG_CONFIG_HOME="+b.xdg, "XDG_STATE_HOME="+filepath.Join(dir, "state"),
		"PATH="+bins.Dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Cleanup(func() {
		b.run(t, "stop", "--all")
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	return b
}

// run runs fleetmgr (no --config: the default places) in b.dir.
func (b *bare) run(t *testing.T, args ...string) harness.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Fleetmgr, args...)
	cmd.Env, cmd.Dir = b.env, b.dir
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := harness.Result{Stdout: so.String(), Stderr: se.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("fleetmgr %v: %v", args, err)
	}
	return r
}

func (b *bare) mustRun(t *testing.T, args ...string) harness.Result {
	t.Helper()
	r := b.run(t, args...)
	if r.Code != 0 {
		t.Fatalf("fleetmgr %v: exit %d\n%s%s", args, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

func (b *bare) mkdir(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(b.dir, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFromNothing: init --project P → add docs --project Q → check passes,
// list shows both, the file keeps init's comments, completion lists the
// fleets, and both fleets start on the stand-ins.
func TestFromNothing(t *testing.T) {
	b := newBare(t)
	p, q := b.mkdir(t, "kb"), b.mkdir(t, "docs")
	r := b.mustRun(t, "init", "--project", p) // port allocated from [manager] port_range
	cfg := filepath.Join(b.xdg, "fleetmgr", "fleets.toml")
	if !strings.Contains(r.Stdout, "wrote "+cfg) || !strings.Contains(r.Stdout, "fleet kb: project "+p) {
		t.Fatalf("init said:\n%s", r.Stdout)
	}
	initText, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.run(t, "init"); r.Code == 0 || !strings.Contains(r.Stderr, cfg+" exists already") {
		t.Fatalf("second init: exit %d %s", r.Code, r.Stderr)
	}
	b.mustRun(t, "add", "docs", "--project", q)
	after, _ := os.ReadFile(cfg)
	if !bytes.HasPrefix(after, initText) || !bytes.Contains(after, []byte("# [manager]: fleetmgr itself.")) {
		t.Fatalf("add did not keep the file:\n%s", after)
	}
	if r := b.run(t, "check"); r.Code != 0 {
		t.Fatalf("check: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var rows []struct {
		Name, State string
		Port        int
	}
	if err := json.Unmarshal([]byte(b.mustRun(t, "list", "--json").Stdout), &rows); err != nil || len(rows) != 2 || rows[0].Name != "docs" || rows[1].Name != "kb" {
		t.Fatalf("list --json: %v %+v", err, rows)
	}
	ports := []int{rows[1].Port, rows[0].Port}
	if out := b.mustRun(t, "__complete", "start", "").Stdout; !strings.HasPrefix(out, "docs\nkb\n:4\n") {
		t.Fatalf("__complete start '':\n%s", out)
	}
	b.mustRun(t, "start", "kb", "docs")
	for i, n := range []string{"kb", "docs"} {
		if svHealth(ports[i]) != n {
			t.Errorf("%s does not answer /healthz on %d", n, ports[i])
		}
	}
	// remove refuses a running fleet; stopped, it goes with its state dir.
	if r := b.run(t, "remove", "docs"); r.Code == 0 || !strings.Contains(r.Stderr, "stop it first") {
		t.Fatalf("remove of a running fleet: exit %d %s", r.Code, r.Stderr)
	}
	b.mustRun(t, "stop", "docs")
	b.mustRun(t, "remove", "docs", "--purge")
	if now, _ := os.ReadFile(cfg); !bytes.Equal(now, initText) {
		t.Fatalf("after remove the file is not init's again:\n%s", now)
	}
	if _, err := os.Stat(filepath.Join(b.dir, "state", "fleetmgr", "fleets", "docs")); err == nil {
		t.Error("docs' state dir is still there after --purge")
	}
}

// descendants lists the live descendants of pid (what a control group
// started from it holds: membership is inherited and setsid does not
// leave it).
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(p); err == nil && st.State != 'Z' {
			children[st.PPID] = append(children[st.PPID], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// unitServe is a `fleetmgr serve` started as the systemd unit starts it.
type unitServe struct {
	cmd  *exec.Cmd
	log  syncbuf.Buffer
	done chan struct{}
}

// startAsUnit runs the unit's ExecStart with the environment systemd's
// user manager gives it (HOME, USER, LOGNAME, then Environment=, then the
// EnvironmentFile's variables over them), in a session of its own.
func startAsUnit(t *testing.T, u *service.UnitView, e *harness.Env) *unitServe {
	t.Helper()
	env := []string{"HOME=" + filepath.Join(e.Dir, "home"), "USER=" + os.Getenv("USER"), "LOGNAME=" + os.Getenv("USER")}
	env = append(env, u.Environment...)
	if b, err := os.ReadFile(u.EnvironmentFile); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				env = append(env, l)
			}
		}
	} else {
		t.Fatalf("EnvironmentFile: %v", err)
	}
	s := &unitServe{cmd: exec.Command(u.ExecStart[0], u.ExecStart[1:]...), done: make(chan struct{})}
	s.cmd.Env, s.cmd.Dir = env, "/"
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("serve (as the unit) log:\n%s", s.log.String())
		}
	})
	if !svWait(20*time.Second, func() bool {
		resp, err := http.Get("http://" + e.Listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatalf("serve started as the unit does not answer:\n%s", s.log.String())
	}
	return s
}

// stopAsSystemd stops s as systemd stops the unit: by its KillMode, SIGTERM
// to the main process only (process), to it and then SIGKILL to the rest
// of the control group (mixed), or SIGTERM to the whole group
// (control-group); cgroup is what the group held when the stop began.
func stopAsSystemd(t *testing.T, s *unitServe, killMode string, cgroup []int) {
	t.Helper()
	main := s.cmd.Process.Pid
	scope := service.StopSignals(killMode)
	t.Logf("stopping as systemd does with KillMode=%q: %s", killMode, scope)
	switch scope {
	case service.SignalsAll:
		for _, p := range append([]int{main}, cgroup...) {
			_ = syscall.Kill(p, syscall.SIGTERM)
		}
	case service.SignalsMainThenKillsRest, service.SignalsMainOnly:
		_ = syscall.Kill(main, syscall.SIGTERM)
	}
	select {
	case <-s.done:
	case <-time.After(60 * time.Second): // TimeoutStopSec
		_ = syscall.Kill(main, syscall.SIGKILL)
		<-s.done
	}
	if scope == service.SignalsMainThenKillsRest || scope == service.SignalsAll {
		for _, p := range cgroup {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// TestServiceStopLeavesFleets: the unit `fleetmgr service install --print`
// writes passes systemd-analyze verify; serve started as that unit starts
// it runs two fleets (as its descendants, so in its control group); stopped
// as systemd stops that unit, it leaves every fleet running; a new serve
// started the same way adopts them without a restart.
func TestServiceStopLeavesFleets(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	r := e.MustRun("service", "install", "--print")
	unitText := []byte(r.Stdout)
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		p := filepath.Join(t.TempDir(), service.UnitName)
		if err := os.WriteFile(p, unitText, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s\n%s", err, out, unitText)
		}
	} else if os.Getenv("CI") != "" {
		t.Fatal("CI is set but systemd-analyze is missing")
	}
	u, err := service.ReadSystemdUnit(unitText)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{bins.Fleetmgr, "serve", "--config", e.ConfigPath}; !slices.Equal(u.ExecStart, want) {
		t.Fatalf("ExecStart %q, want %q", u.ExecStart, want)
	}
	// --print installs nothing, the environment file included.
	if _, err := os.Stat(u.EnvironmentFile); err == nil {
		t.Fatalf("--print created %s", u.EnvironmentFile)
	}
	if err := os.MkdirAll(filepath.Dir(u.EnvironmentFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(u.EnvironmentFile, []byte("# secrets\nFLEETMGR_TEST_SECRET=from-the-env-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s1 := startAsUnit(t, u, e)
	if env, err := procfs.Environ(s1.cmd.Process.Pid); err != nil || !slices.Contains(env, "FLEETMGR_TEST_SECRET=from-the-env-file") {
		t.Fatalf("serve's environment lacks the EnvironmentFile's variable (%v)", err)
	}
	e.MustRun("start", "kb", "docs") // through the daemon: serve starts them
	before := map[string][2]int{}
	cgroup := descendants(s1.cmd.Process.Pid)
	for _, n := range []string{"kb", "docs"} {
		st := readState(t, e, n)
		if st.Fleetd == nil || st.Herdr == nil {
			t.Fatalf("%s: %+v", n, st)
		}
		before[n] = [2]int{st.Fleetd.PID, st.Herdr.PID}
		// The property needs teeth: fleets started by serve are in its
		// control group, so a stop that signals the group would end them.
		if !slices.Contains(cgroup, st.Fleetd.PID) {
			t.Fatalf("%s's fleetd %d is not a descendant of serve %d: the test would prove nothing", n, st.Fleetd.PID, s1.cmd.Process.Pid)
		}
	}

	stopAsSystemd(t, s1, u.KillMode, cgroup)
	wait.Never(t, 300*time.Millisecond, "a fleet ending with the service's stop", func() (bool, string) {
		for _, n := range []string{"kb", "docs"} {
			if !svAlive(before[n][0]) || !svAlive(before[n][1]) || svHealth(e.Ports[n]) != n {
				return true, fmt.Sprintf("fleet %s: fleetd %d alive %v, herdr %d alive %v",
					n, before[n][0], svAlive(before[n][0]), before[n][1], svAlive(before[n][1]))
			}
		}
		return false, ""
	})

	s2 := startAsUnit(t, u, e)
	if !svWait(10*time.Second, func() bool {
		return regexp.MustCompile(`adopted fleet.*fleet=kb|fleet=kb.*adopted fleet`).MatchString(s2.log.String()) &&
			regexp.MustCompile(`adopted fleet.*fleet=docs|fleet=docs.*adopted fleet`).MatchString(s2.log.String())
	}) {
		t.Fatalf("the new serve did not adopt both fleets:\n%s", s2.log.String())
	}
	for _, n := range []string{"kb", "docs"} {
		st := readState(t, e, n)
		if st.Fleetd.PID != before[n][0] || st.Herdr.PID != before[n][1] || st.Restarts != 0 {
			t.Errorf("%s after adoption: %+v, want fleetd %d herdr %d, no restart", n, st, before[n][0], before[n][1])
		}
	}
}

// TestVersionNamesRevision: fleetmgr built by the README's Install command
// in a fresh clone of HEAD, with GOFLAGS=-buildvcs=false in the
// environment (as on machines that set it), names HEAD's revision in
// `--version` and `version --json` (module, version, revision, time,
// modified, go_version); so does the harness's build when this checkout is
// itself a clone (in a git worktree, whose .git is a file, the go command
// stamps nothing, so only the fresh clone is checked there).
func TestVersionNamesRevision(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse HEAD: %v): no revision to name", err)
	}
	head := strings.TrimSpace(string(out))

	// The README's `go build … ./cmd/fleetmgr` line, its -o pointed here.
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, l := range strings.Split(string(readme), "\n") {
		l, _, _ = strings.Cut(l, "#")
		if f := strings.Fields(l); len(f) > 2 && f[0] == "go" && f[1] == "build" && slices.Contains(f, "./cmd/fleetmgr") {
			argv = f
			break
		}
	}
	o := slices.Index(argv, "-o")
	if o < 0 || o+1 >= len(argv) {
		t.Fatalf("README.md has no `go build -o FILE ./cmd/fleetmgr` line (found %q)", argv)
	}
	clone := filepath.Join(t.TempDir(), "fleetmgr")
	bin := filepath.Join(t.TempDir(), "fleetmgr")
	argv[o+1] = bin
	for _, c := range [][]string{{"clone", "-q", "--no-checkout", root, clone}, {"-C", clone, "-c", "advice.detachedHead=false", "checkout", "-q", head}} {
		if out, err := exec.Command("git", c...).CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v\n%s", c, err, out)
		}
	}
	build := exec.Command(argv[0], argv[1:]...)
	build.Dir, build.Env = clone, append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%q in a fresh clone: %v\n%s", argv, err, out)
	}
	checkVersion(t, bin, head)

	if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
		checkVersion(t, bins.Fleetmgr, head)
	} else {
		t.Logf("%s is a git worktree: the harness's build carries no revision, only the fresh clone's was checked", root)
	}
}

// checkVersion runs bin's `version --json` and `--version` and fails t
// unless both name revision head of a clean tree, with its time, the
// module path and the Go version.
func checkVersion(t *testing.T, bin, head string) {
	t.Helper()
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Module, Version, Revision, Time string
		Modified                        *bool
		GoVersion                       string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if v.Module != "github.com/fleetmgr/fleetmgr" || v.Version == "" || v.Revision != head || v.Time == "unknown" ||
		v.Modified == nil || *v.Modified || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("%s version --json: %s; HEAD is %s", bin, out, head)
	}
	line, _ := exec.Command(bin, "--version").Output()
	if !strings.Contains(string(line), "revision "+v.Revision) {
		t.Fatalf("%s --version: %s", bin, line)
	}
}
