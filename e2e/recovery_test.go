package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Regression tests for the lifecycle's failure paths: failed, interrupted
// and unrecorded starts leave nothing running that `fleetmgr stop` cannot
// find.

// setLine replaces the one line of e's fleets.toml that starts with
// "key =" by "key = value".
func setLine(t *testing.T, e *harness.Env, key, value string) {
	t.Helper()
	b, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` = .*$`)
	if n := len(re.FindAll(b, -1)); n != 1 {
		t.Fatalf("%d lines %q in %s", n, key, e.ConfigPath)
	}
	b = re.ReplaceAll(b, []byte(key+" = "+strings.ReplaceAll(value, "$", "$$")))
	if err := os.WriteFile(e.ConfigPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// slowCommand makes the env's only fleet run fleetd after sleeping d.
func slowCommand(t *testing.T, e *harness.Env, d time.Duration) {
	t.Helper()
	script := fmt.Sprintf("sleep %.1f; exec %s --config \"$0\"", d.Seconds(), e.Bins.Fleetd)
	setLine(t, e, "command", fmt.Sprintf("[\"/bin/sh\", \"-c\", %q, \"{{.ConfigPath}}\"]", script))
}

func pidAlive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

func waitDead(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	wait.For(t, d, fmt.Sprintf("pid %d to end", pid), wait.Bool(func() bool { return !pidAlive(pid) }))
}

func portBound(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return true
	}
	l.Close()
	return false
}

func spawnedPID(t *testing.T, e *harness.Env, name, proc string, d time.Duration) int {
	t.Helper()
	b := harness.WaitFile(t, filepath.Join(e.StateDir, "fleets", name, proc+".spawned.json"), d)
	var p struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(b), &p); err != nil || p.PID <= 0 {
		t.Fatalf("%s.spawned.json %q: %v", proc, b, err)
	}
	return p.PID
}

// startCLI starts `fleetmgr start name` in the background.
func startCLI(t *testing.T, e *harness.Env, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(e.Bins.Fleetmgr, "--config", e.ConfigPath, "start", name)
	cmd.Env = e.Environ
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// A herdr_bin that never answers ping (and ignores SIGTERM) is killed
// by the failed start's rollback, and retries leak nothing.
func TestStartRollsBackUnansweringHerdr(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "mute"})
	fake := filepath.Join(e.Dir, "fakeherdr.sh")
	pids := filepath.Join(e.Dir, "fake.pids")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntrap '' TERM\necho $$ >> "+pids+"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	setLine(t, e, "herdr_bin", strconv.Quote(fake))
	setLine(t, e, "start_timeout", `"1s"`)
	setLine(t, e, "stop_grace", `"500ms"`)
	for range 2 {
		r := e.Run("start", "mute")
		if r.Code == 0 || !strings.Contains(r.Stderr, "did not answer ping") {
			t.Fatalf("start with a mute herdr: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		waitDead(t, pid, 3*time.Second)
	}
}

// herdr killed while fleetd comes up: the CLI start fails (and rolls
// back) instead of reporting running.
func TestStartNoticesHerdrDeath(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "h"})
	slowCommand(t, e, 1500*time.Millisecond)
	cli := startCLI(t, e, "h")
	spawnedPID(t, e, "h", "fleetd", 15*time.Second)
	hpid := spawnedPID(t, e, "h", "herdr", time.Second)
	if err := syscall.Kill(hpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cli.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("start reported success with its herdr session dead")
		}
	case <-ctx.Done():
		t.Fatal("start did not finish")
	}
	if out := fmt.Sprint(cli.Stdout); !strings.Contains(out, "stopped answering") {
		t.Fatalf("start output: %s", out)
	}
	if portBound(e.Ports["h"]) {
		t.Fatal("fleetd left running after the failed start")
	}
}

// herdr killed under a running fleet with no serve to notice: `fleetmgr
// start` does not call the fleet running as it is (its members' session
// is gone); it starts the session again with a new fleetd, as restart
// does, and says why.
func TestStartRepairsDeadHerdrSession(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "h"})
	e.MustRun("start", "h")
	st := readState(t, e, "h")
	if st.Herdr == nil || st.Fleetd == nil {
		t.Fatalf("state after start: %+v", st)
	}
	oldFleetd, oldHerdr := st.Fleetd.PID, st.Herdr.PID
	if err := syscall.Kill(oldHerdr, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, oldHerdr, 5*time.Second)
	// list says so, not plainly "running".
	r := e.MustRun("list", "--json")
	var rows []struct {
		State     string `json:"state"`
		HerdrGone bool   `json:"herdr_gone"`
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil || len(rows) != 1 || rows[0].State != "running" || !rows[0].HerdrGone ||
		!strings.Contains(rows[0].LastError, fmt.Sprintf("its herdr server (pid %d) is gone", oldHerdr)) {
		t.Fatalf("list --json with the herdr server gone: %v\n%s", err, r.Stdout)
	}
	if r := e.MustRun("list"); !strings.Contains(r.Stdout, "running (herdr session gone)") || !strings.Contains(r.Stdout, "`fleetmgr start h` starts the session again") {
		t.Fatalf("list with the herdr server gone:\n%s", r.Stdout)
	}
	r = e.MustRun("start", "h")
	if strings.Contains(r.Stdout, "already running") || !strings.Contains(r.Stdout, "does not answer") {
		t.Fatalf("start with the herdr session dead:\n%s", r.Stdout)
	}
	waitDead(t, oldFleetd, 5*time.Second)
	st = readState(t, e, "h")
	if st.Phase != "running" || st.Herdr == nil || st.Herdr.PID == oldHerdr || !pidAlive(st.Herdr.PID) || st.Fleetd == nil || !pidAlive(st.Fleetd.PID) {
		t.Fatalf("state after the repairing start: %+v", st)
	}
	r = e.MustRun("status", "--json", "--interval", "100ms", "h")
	var rep struct {
		Fleets []struct {
			Herdr struct {
				Alive bool `json:"alive"`
			} `json:"herdr"`
		} `json:"fleets"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || len(rep.Fleets) != 1 || !rep.Fleets[0].Herdr.Alive {
		t.Fatalf("status after the repairing start: %v\n%s", err, r.Stdout)
	}
}

// serve stopped (SIGTERM, as systemctl stop does) while a CLI start runs
// through it: the start completes and its answer reaches the CLI before
// serve closes the session (the CLI used to get EOF and exit 1 for a
// start that succeeded).
func TestServeStopAnswersAStartInFlight(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "s"})
	slowCommand(t, e, 1500*time.Millisecond)
	serve := e.StartServe()
	cli := startCLI(t, e, "s")
	spawnedPID(t, e, "s", "fleetd", 15*time.Second) // the start is under way, in serve
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cli.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("start through a serve stopped mid-way: %v\n%s\nserve log:\n%s", err, cli.Stdout, serve.Log())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the start did not finish")
	}
	if out := fmt.Sprint(cli.Stdout); !strings.Contains(out, "s: running") {
		t.Fatalf("start output: %s", out)
	}
	if st := readState(t, e, "s"); st.Phase != "running" || st.Fleetd == nil || !pidAlive(st.Fleetd.PID) {
		t.Fatalf("state: %+v", st)
	}
	e.MustRun("stop", "s")
}
