package e2e

import (
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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Supervision with real processes (docs/ARCHITECTURE.md "Supervision").

// svRow is the part of `fleetmgr list --json` these tests read.
type svRow struct {
	Name              string `json:"name"`
	State             string `json:"state"`
	PID               int    `json:"pid"`
	Restarts          int    `json:"restarts"`
	LastRestartReason string `json:"last_restart_reason"`
	LastExit          string `json:"last_exit"`
	CrashLoop         bool   `json:"crash_loop"`
	LastError         string `json:"last_error"`
}

func svList(t *testing.T, e *harness.Env) map[string]svRow {
	t.Helper()
	r := e.MustRun("list", "--json")
	var rows []svRow
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.Stdout)
	}
	out := map[string]svRow{}
	for _, row := range rows {
		out[row.Name] = row
	}
	return out
}

// svHealth returns the name /healthz on port answers with, or "".
func svHealth(port int) string {
	c := &http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var h struct{ Name string }
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&h) != nil {
		return ""
	}
	return h.Name
}

// svWait polls cond for up to d and reports whether it held.
func svWait(d time.Duration, cond func() bool) bool {
	return wait.Until(context.Background(), d, wait.Bool(cond)) == nil
}

// killFleetdAwaitRestart sends SIGKILL to fleet name's fleetd and waits up to d for
// its record to show a new fleetd running for which also holds (nil:
// nothing more), failing the test with the record and logs() otherwise.
// It returns that record.
func killFleetdAwaitRestart(t *testing.T, e *harness.Env, name string, d time.Duration, logs func() string, also func(lifecycle.State) bool) lifecycle.State {
	t.Helper()
	pid0 := readState(t, e, name).Fleetd.PID
	if err := syscall.Kill(pid0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st lifecycle.State
	if !svWait(d, func() bool {
		st = readState(t, e, name)
		return st.Phase == lifecycle.PhaseRunning && st.Fleetd != nil && st.Fleetd.PID != pid0 && (also == nil || also(st))
	}) {
		t.Fatalf("%s not restarted after kill -9 of its fleetd (pid %d): %+v\n%s", name, pid0, st, logs())
	}
	return st
}

// svReaped reports whether pid, a child of this test process (a serve the
// harness waits for), is gone from /proc. A multi-threaded process's
// leader reads as a zombie while its other threads still exit holding its
// files (serve.lock among them); reaped, it holds nothing.
func svReaped(pid int) bool {
	_, err := procfs.ReadStat(pid)
	return err != nil
}

func svAlive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// TestSuperviseRestartsKilledFleetd: kill -9 of fleetd → healthy again on
// the same port within 3 s (default backoff 1 s), restart count and reason
// in `fleetmgr list --json`; a fleetd that stops answering /healthz is
// restarted too; `fleetmgr restart` gives a new fleetd in the same herdr
// session.
func TestSuperviseRestartsKilledFleetd(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: "health_interval = \"300ms\"\nhealth_failures = 2\nrestart_reset_after = \"2s\""})
	serve := e.StartServe()
	out := e.MustRun("start", "kb") // through the daemon: its supervisor owns fleetd
	if !strings.Contains(out.Stdout, "kb: running") {
		t.Fatalf("start output:\n%s", out.Stdout)
	}
	st := readState(t, e, "kb")
	port, pid0, herdr0 := st.Port, st.Fleetd.PID, st.Herdr.PID
	if pst, _ := procfs.ReadStat(pid0); pst == nil || pst.PPID != serve.Cmd.Process.Pid {
		t.Errorf("fleetd %d is not serve's child (stat %+v): the CLI did not go through the daemon", pid0, pst)
	}

	t0 := time.Now()
	if err := syscall.Kill(pid0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var pid1 int
	ok := svWait(3*time.Second, func() bool {
		if svHealth(port) != "kb" {
			return false
		}
		s := readState(t, e, "kb")
		if s.Fleetd != nil && s.Fleetd.PID != pid0 && s.Phase == lifecycle.PhaseRunning {
			pid1 = s.Fleetd.PID
			return true
		}
		return false
	})
	took := time.Since(t0)
	if !ok {
		t.Fatalf("kb not healthy with a new fleetd on port %d within 3s of kill -9; state %+v\nserve log:\n%s", port, readState(t, e, "kb"), serve.Log())
	}
	t.Logf("kill -9 fleetd → healthy again in %s (new pid %d)", took.Round(time.Millisecond), pid1)
	row := svList(t, e)["kb"]
	if row.Restarts != 1 || !strings.Contains(row.LastRestartReason, "fleetd exited") || !strings.Contains(row.LastExit, "killed") || row.State != "running" {
		t.Errorf("list --json after one restart: %+v", row)
	}
	if s := readState(t, e, "kb"); s.Herdr == nil || s.Herdr.PID != herdr0 {
		t.Errorf("herdr session was restarted (%+v, was %d); only fleetd died", s.Herdr, herdr0)
	}
	if !regexp.MustCompile(`restarting fleetd.*fleet=kb|fleet=kb.*restarting fleetd`).MatchString(serve.Log()) {
		t.Errorf("serve log has no restart line with fleet=kb:\n%s", serve.Log())
	}
	// After restart_reset_after of good health the backoff starts over.
	if s := readState(t, e, "kb"); s.BackoffStep != 1 {
		t.Errorf("backoff step after one restart: %d", s.BackoffStep)
	}
	if !svWait(5*time.Second, func() bool { return readState(t, e, "kb").BackoffStep == 0 }) {
		t.Errorf("backoff not reset after restart_reset_after; state %+v", readState(t, e, "kb").Supervision)
	}

	// A hung fleetd (SIGSTOP: alive, /healthz silent) is restarted after
	// health_failures probes.
	if err := syscall.Kill(pid1, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var pid2 int
	if !svWait(10*time.Second, func() bool {
		s := readState(t, e, "kb")
		if s.Fleetd != nil && s.Fleetd.PID != pid1 && s.Phase == lifecycle.PhaseRunning && svHealth(port) == "kb" {
			pid2 = s.Fleetd.PID
			return true
		}
		return false
	}) {
		t.Fatalf("hung fleetd not replaced; state %+v\n%s", readState(t, e, "kb"), serve.Log())
	}
	if svAlive(pid1) {
		t.Errorf("hung fleetd %d still exists after its restart", pid1)
	}
	if row := svList(t, e)["kb"]; row.Restarts != 2 || !strings.Contains(row.LastRestartReason, "health") {
		t.Errorf("after health restart: %+v", row)
	}

	// fleetmgr restart: new fleetd, same herdr session, not counted as a crash.
	out = e.MustRun("restart", "kb")
	s := readState(t, e, "kb")
	if s.Fleetd == nil || s.Fleetd.PID == pid2 || s.Herdr.PID != herdr0 || svHealth(port) != "kb" || s.Restarts != 2 {
		t.Errorf("after fleetmgr restart: %+v (output %s)", s, out.Stdout)
	}
}

// TestSuperviseCrashLoop: a fleetd that exits at once is restarted after
// growing delays, then marked failed; `fleetmgr start` clears it.
func TestSuperviseCrashLoop(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"100ms\"\nrestart_backoff_max = \"5s\"\ncrash_loop_restarts = 3\ncrash_loop_window = \"1m\"")
	flag := filepath.Join(e.Dir, "crash")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(e.Dir, "proj-crash")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	script := fmt.Sprintf("if [ -e %s ]; then echo crashing; exit 3; fi; exec %s --config \"$1\"", flag, bins.Fleetd)
	f, err := os.OpenFile(e.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n[fleets.crash]\nproject = %q\ncommand = [\"sh\", \"-c\", %q, \"sh\", \"{{.ConfigPath}}\"]\nport = %d\n", proj, script, port)
	f.Close()

	serve := e.StartServe()
	if r := e.Run("start", "crash"); r.Code == 0 || !strings.Contains(r.Stderr+r.Stdout, "exit status 3") {
		t.Fatalf("start of a crashing fleet: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if !svWait(15*time.Second, func() bool { return svList(t, e)["crash"].CrashLoop }) {
		t.Fatalf("no crash loop; list %+v\nserve log:\n%s", svList(t, e)["crash"], serve.Log())
	}
	row := svList(t, e)["crash"]
	if row.State != "failed" || row.Restarts != 3 || !strings.Contains(row.LastError, "crash loop") || !strings.Contains(row.LastError, "fleetmgr start crash") {
		t.Errorf("crash-looped fleet: %+v", row)
	}
	st := readState(t, e, "crash")
	if len(st.RestartTimes) != 3 {
		t.Fatalf("restart_times %v", st.RestartTimes)
	}
	gaps := []time.Duration{st.RestartTimes[1].Sub(st.RestartTimes[0]), st.RestartTimes[2].Sub(st.RestartTimes[1])}
	t.Logf("gaps between restarts: %v (delays 100ms, 200ms, 400ms + start attempts)", gaps)
	// Each gap is the delay plus one start attempt (whose length varies with
	// load), so only the delays themselves are compared exactly (below).
	if gaps[0] < 100*time.Millisecond || gaps[1] < 200*time.Millisecond {
		t.Errorf("restarts came sooner than their backoff: gaps %v", gaps)
	}
	var delays []string
	for _, m := range regexp.MustCompile(`restarting fleetd.*fleet=crash.*delay=(\S+)|fleet=crash.*restarting fleetd.*delay=(\S+)`).FindAllStringSubmatch(serve.Log(), -1) {
		delays = append(delays, m[1]+m[2])
	}
	if !slices.Equal(delays, []string{"100ms", "200ms", "400ms"}) {
		t.Errorf("logged delays %v, want [100ms 200ms 400ms]\n%s", delays, serve.Log())
	}
	if len(st.LogTail) == 0 || !strings.Contains(strings.Join(st.LogTail, "\n"), "crashing") {
		b, _ := os.ReadFile(filepath.Join(e.StateDir, "fleets", "crash", "fleetd.log"))
		t.Errorf("log tail not recorded: %q; fleetd.log now:\n%s", st.LogTail, b)
	}
	// Failed means no more restarts.
	wait.Never(t, time.Second, "a restart after the crash loop", func() (bool, string) {
		row := svList(t, e)["crash"]
		return row.Restarts != 3 || row.State != "failed", fmt.Sprintf("%+v", row)
	})
	// fleetmgr status (through the daemon) says so: in its JSON, valid for
	// the documented schema, and in one compact table detail.
	if f := fleetRow(t, statusJSON(t, e, statusSchema(t), "crash"), "crash"); !f.CrashLoop ||
		!strings.Contains(f.LastRestartReason, "exit status 3") || !f.NextRestartAt.IsZero() || f.Restarts != 3 {
		t.Errorf("status of the crash-looped fleet: %+v", f)
	}
	if out := e.MustRun("status", "crash").Stdout; !strings.Contains(out, "crash loop: 3 restarts within 1m0s") || strings.Contains(out, "last error") {
		t.Errorf("status table of the crash-looped fleet:\n%s", out)
	}
	// One sentence (issue 24 item 8): the wide detail says "crash loop" and
	// "fleetd exited" once each, and how to get out.
	if out := strings.ToLower(e.MustRun("status", "--wide", "crash").Stdout); strings.Count(out, "crash loop") != 1 || strings.Count(out, "fleetd exited") != 1 ||
		!strings.Contains(out, "the last after a failed start, fleetd exited during start (exit status 3); not restarting until `fleetmgr start crash`") {
		t.Errorf("the crash loop is not told in one sentence:\n%s", out)
	}

	// fleetmgr start clears it.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	e.MustRun("start", "crash")
	row = svList(t, e)["crash"]
	if row.State != "running" || row.CrashLoop || svHealth(port) != "crash" {
		t.Errorf("after start: %+v", row)
	}
	if st := readState(t, e, "crash"); len(st.RestartTimes) != 0 || st.BackoffStep != 0 {
		t.Errorf("start did not reset the crash-loop record: %+v", st.Supervision)
	}
}

// TestSuperviseAdoption: kill -9 of serve leaves both fleets answering; a
// new serve adopts them (same pids, no restart), cleans a stale record
// without signalling the process that now has its pid, and restarts an
// adopted fleetd after it is killed.
func TestSuperviseAdoption(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	serve1 := e.StartServe()
	e.MustRun("start", "kb", "docs")
	kb0, docs0 := readState(t, e, "kb"), readState(t, e, "docs")

	killServe(t, serve1)
	for _, s := range []lifecycle.State{kb0, docs0} {
		if svHealth(s.Port) != s.Name || !svAlive(s.Fleetd.PID) {
			t.Fatalf("fleet %s stopped answering after kill -9 of serve", s.Name)
		}
	}

	// docs' fleetd dies while no serve runs, and its pid comes to name
	// another process (simulated: the record is pointed at a live
	// stranger whose start time differs).
	if err := syscall.Kill(docs0.Fleetd.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stranger := exec.Command("sleep", "60")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	key, err := procfs.KeyOf(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	svEditState(t, e, "docs", func(m map[string]any) {
		m["fleetd"] = map[string]any{"pid": key.PID, "start_time": key.StartTime + 1}
	})

	serve2 := e.StartServe()
	if !svWait(5*time.Second, func() bool {
		s := readState(t, e, "docs")
		return s.Fleetd != nil && s.Fleetd.PID != key.PID && s.Phase == lifecycle.PhaseRunning && svHealth(s.Port) == "docs"
	}) {
		t.Fatalf("docs not restarted after its stale record; state %+v\n%s", readState(t, e, "docs"), serve2.Log())
	}
	if !svAlive(key.PID) {
		t.Errorf("the process that took the stale pid %d was signalled", key.PID)
	}
	if !regexp.MustCompile(`stale state entry.*fleet=docs|fleet=docs.*stale state entry`).MatchString(serve2.Log()) {
		t.Errorf("stale record not reported:\n%s", serve2.Log())
	}
	adopted := regexp.MustCompile(fmt.Sprintf(`adopted fleet.*fleet=kb.*pid=%d|fleet=kb.*adopted fleet.*pid=%d`, kb0.Fleetd.PID, kb0.Fleetd.PID))
	wait.For(t, 10*time.Second, "the adoption line for kb", func() (bool, string) {
		return adopted.MatchString(serve2.Log()), serve2.Log()
	})
	// Then, for more than one health interval, kb stays as it was.
	wait.Never(t, 2500*time.Millisecond, "kb changed after its adoption", func() (bool, string) {
		kb1 := readState(t, e, "kb")
		return kb1.Fleetd == nil || kb1.Herdr == nil || kb1.Fleetd.PID != kb0.Fleetd.PID || kb1.Herdr.PID != kb0.Herdr.PID || kb1.Restarts != 0,
			fmt.Sprintf("before %+v after %+v", kb0.Fleetd, kb1)
	})

	// The adopted fleetd is not serve2's child; it is supervised all the same.
	t0 := time.Now()
	if err := syscall.Kill(kb0.Fleetd.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !svWait(3*time.Second, func() bool {
		s := readState(t, e, "kb")
		return s.Fleetd != nil && s.Fleetd.PID != kb0.Fleetd.PID && svHealth(s.Port) == "kb"
	}) {
		t.Fatalf("adopted kb not restarted within 3s: %+v\n%s", readState(t, e, "kb"), serve2.Log())
	}
	t.Logf("adopted fleetd killed → healthy again in %s", time.Since(t0).Round(time.Millisecond))
	if row := svList(t, e)["kb"]; row.Restarts != 1 || !strings.Contains(row.LastExit, "not started by this fleetmgr") {
		t.Errorf("kb after restart of an adopted fleetd: %+v", row)
	}

	// serve exiting on SIGTERM leaves the fleets running too.
	if err := serve2.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !svWait(10*time.Second, func() bool { return svReaped(serve2.Cmd.Process.Pid) }) {
		t.Fatal("serve did not exit on SIGTERM")
	}
	wait.Never(t, 300*time.Millisecond, "a fleet ending after serve's SIGTERM", func() (bool, string) {
		for _, n := range []string{"kb", "docs"} {
			if s := readState(t, e, n); svHealth(s.Port) != n || s.Fleetd == nil || !svAlive(s.Fleetd.PID) {
				return true, fmt.Sprintf("fleet %s: %+v", n, s)
			}
		}
		return false, ""
	})
}

// svEditState rewrites a fleet's state.json through a generic map.
func svEditState(t *testing.T, e *harness.Env, name string, fn func(map[string]any)) {
	t.Helper()
	p := filepath.Join(e.StateDir, "fleets", name, "state.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStopKillsForkedSIGTERMIgnoringChildren: stop leaves no process of
// the fleet, including children fleetd forked that ignore SIGTERM and the
// log copier.
func TestStopKillsForkedSIGTERMIgnoringChildren(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Args: []string{"--fork-children", "2", "--ignore-term"}})
	e.MustRun("start", "kb")
	st := readState(t, e, "kb")
	logPath := filepath.Join(e.StateDir, "fleets", "kb", "fleetd.log")
	var children []int
	svWait(5*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		children = children[:0]
		for _, m := range regexp.MustCompile(`forked child pid=(\d+)`).FindAllStringSubmatch(string(b), -1) {
			n, _ := strconv.Atoi(m[1])
			children = append(children, n)
		}
		return len(children) == 2
	})
	if len(children) != 2 {
		t.Fatalf("fleetd log does not name 2 forked children:\n%s", harness.WaitFile(t, logPath, time.Second))
	}
	_, shell := newPane(t, st.HerdrSocket, "member")
	sids := []int{st.Fleetd.PID, st.Herdr.PID, shell}
	var all []int
	for _, sid := range sids {
		all = append(all, sessionProcs(sid)...)
	}
	for _, c := range children {
		if cs, err := procfs.ReadStat(c); err != nil || cs.Session != st.Fleetd.PID {
			t.Fatalf("child %d is not in fleetd's session: %+v %v", c, cs, err)
		}
	}
	// fleetd, 2 children, the log copier; herdr server + its copier; the pane shell.
	if len(all) < 6 {
		t.Fatalf("expected at least 6 processes in the fleet's sessions, found %v", all)
	}
	// The log copier runs in fleetd's own session (so it outlives serve and
	// the CLI, and dies with the fleet).
	copiers := 0
	for _, pid := range sessionProcs(st.Fleetd.PID) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "logpipe\x00--file\x00"+logPath) {
			copiers++
		}
	}
	if copiers != 1 {
		t.Errorf("want one log copier in fleetd's session, found %d", copiers)
	}
	t0 := time.Now()
	e.MustRun("stop", "kb", "--yes") // the pane opened above lives: confirmed (issue 24 item 3)
	t.Logf("stop with SIGTERM-ignoring children took %s (stop_grace 3s)", time.Since(t0).Round(time.Millisecond))
	for _, pid := range all {
		if svAlive(pid) {
			st, _ := procfs.ReadStat(pid)
			t.Errorf("pid %d survived stop: %+v", pid, st)
		}
	}
	for _, sid := range sids {
		if left := sessionProcs(sid); len(left) > 0 {
			t.Errorf("session %d still has %v", sid, left)
		}
	}
}

// TestLeadLaunchOptIn: by default nobody opens a lead tab (fleetmgr passes
// FLEET_LEAD_LAUNCH=0 and the stand-in fleetd would otherwise launch one);
// with --lead exactly one lead tab runs lead_command in the project dir,
// and the start waits for herdr to push the lead's agent (its "lead ready"
// step).
func TestLeadLaunchOptIn(t *testing.T) {
	// The lead announces an agent (the stand-in's status escape), so the launch's readiness
	// wait ends at once.
	lead := `lead_command = ["sh", "-c", "printf '\\033]777;herdr-status;idle\\007'; echo LEAD-$((40+2)); exec sleep 600"]`
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: lead}, harness.Fleet{Name: "ld", Extra: lead})
	e.MustRun("start", "kb")
	kbStarted := time.Now()
	if r := e.MustRun("start", "ld", "--lead"); !strings.Contains(r.Stdout, "agent standin ready (idle)") || !strings.Contains(r.Stdout, "pushed by herdr") {
		t.Errorf("start --lead did not report the lead's agent pushed by herdr:\n%s", r.Stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Control: the same stand-in without FLEET_LEAD_LAUNCH=0, in a session
	// of its own, does launch a lead; how long it takes bounds how long the
	// default start must be watched for one.
	ctlSock := e.StartHerdr("ctl")
	ctl := exec.Command(bins.Fleetd)
	ctl.Env = append(append([]string{}, e.Environ...), "FLEET_NAME=ctl", fmt.Sprintf("FLEET_PORT=%d", harness.FreePort(t)),
		"FLEET_HERDR_SOCKET="+ctlSock, "FLEET_PROJECT_DIR="+e.Dir, "FLEET_WORKTREE_ROOT="+filepath.Join(e.Dir, "ctl-wt"))
	ctl.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ctl0 := time.Now()
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-ctl.Process.Pid, syscall.SIGKILL); _ = ctl.Wait() })
	if !svWait(15*time.Second, func() bool {
		tabs, err := herdr.New(ctlSock).TabList(ctx, "")
		return err == nil && slices.ContainsFunc(tabs, func(x herdr.TabInfo) bool { return x.Label == "lead" })
	}) {
		t.Fatal("control: the stand-in fleetd with FLEET_LEAD_LAUNCH unset did not launch a lead; the default-start check would prove nothing")
	}
	d := time.Since(ctl0)
	watch := max(1500*time.Millisecond, 3*d)
	t.Logf("control: stand-in without FLEET_LEAD_LAUNCH=0 opened a lead tab after %s; watching kb for %s", d.Round(time.Millisecond), watch)
	wait.Never(t, time.Until(kbStarted.Add(watch)), "a lead tab in kb's default start", func() (bool, string) {
		tabs, err := herdr.New(e.HerdrSocket("kb")).TabList(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(tabs, func(x herdr.TabInfo) bool { return x.Label == "lead" }), fmt.Sprintf("%+v", tabs)
	})
	kbTabs, err := herdr.New(e.HerdrSocket("kb")).TabList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range kbTabs {
		if tab.Label == "lead" {
			t.Errorf("default start created a lead tab: %+v", tab)
		}
	}

	hc := herdr.New(e.HerdrSocket("ld"))
	tabs, err := hc.TabList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var leadTabs []string
	for _, tab := range tabs {
		if tab.Label == "lead" {
			leadTabs = append(leadTabs, tab.TabID)
		}
	}
	if len(leadTabs) != 1 {
		t.Fatalf("want exactly one lead tab, got %v (tabs %+v)", leadTabs, tabs)
	}
	panes, err := hc.PaneList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var pane string
	for _, p := range panes {
		if p.TabID == leadTabs[0] {
			pane = p.PaneID
			if p.Cwd != filepath.Join(e.Dir, "proj-ld") {
				t.Errorf("lead pane cwd %q, want the project dir", p.Cwd)
			}
		}
	}
	var text string
	if !svWait(10*time.Second, func() bool {
		r, err := hc.PaneRead(ctx, herdr.PaneReadParams{PaneID: pane, Source: "recent", Lines: 50, StripANSI: true})
		if err != nil {
			return false
		}
		text = r.Text
		return strings.Contains(text, "LEAD-42")
	}) {
		t.Fatalf("lead pane does not show lead_command's output:\n%s", text)
	}
	pi, err := hc.PaneProcessInfo(ctx, pane)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pi.ForegroundProcesses, func(p herdr.ForegroundProcess) bool { return p.Name == "sleep" }) {
		t.Errorf("lead pane's foreground is not lead_command's sleep: %+v", pi.ForegroundProcesses)
	}
	// A second start --lead does not open another.
	e.MustRun("start", "ld", "--lead")
	tabs, _ = hc.TabList(ctx, "")
	n := 0
	for _, tab := range tabs {
		if tab.Label == "lead" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("after a second start --lead: %d lead tabs", n)
	}
}

// serveInPane runs `fleetmgr serve ARGS` in pane (of the herdr session at
// sock), its output and exit status in e.Dir/NAME, and returns them once
// it exits (fails the test after 20 s).
func serveInPane(t *testing.T, e *harness.Env, sock, pane, name, args string) string {
	t.Helper()
	out := filepath.Join(e.Dir, name)
	runInPane(t, sock, pane, fmt.Sprintf("timeout 15 %s --config %s serve %s >%s 2>&1; echo exit=$? >>%s", bins.Fleetmgr, e.ConfigPath, args, out, out))
	var got string
	if !svWait(20*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		got = string(b)
		return strings.Contains(got, "exit=")
	}) {
		t.Fatalf("serve %s in a pane did not finish: %q", args, got)
	}
	return got
}

// TestServeInPaneForeignAllowedUIDs: with [guard] allowed_uids not listing
// the operator's uid, serve started in a pane still refuses (its self-check
// must not stop at the uid rule).
func TestServeInPaneForeignAllowedUIDs(t *testing.T) {
	e := harness.NewEnv(t, bins, "\n[guard]\nallowed_uids = [65534]\n", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	sock := readState(t, e, "kb").HerdrSocket
	pane, _ := newPane(t, sock, "operator")
	svPrompt(t, sock, pane)
	got := serveInPane(t, e, sock, pane, "serve.out", "")
	if !strings.Contains(got, "exit=3") || !strings.Contains(got, "refusing to serve from inside a herdr pane") {
		t.Fatalf("serve in a pane with allowed_uids = [65534] did not refuse:\n%s", got)
	}
}

// TestServeInPane: serve refuses to run inside a herdr pane; with --detach
// it becomes a daemon outside every pane and serves.
func TestServeInPane(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	sock := readState(t, e, "kb").HerdrSocket
	pane, shell := newPane(t, sock, "operator")
	svPrompt(t, sock, pane)

	got := serveInPane(t, e, sock, pane, "serve1.out", "")
	if !strings.Contains(got, "exit=3") || !strings.Contains(got, "refusing to serve from inside a herdr pane") || !strings.Contains(got, "fleetmgr serve --detach") {
		t.Errorf("serve in a pane did not refuse clearly:\n%s", got)
	}

	got = serveInPane(t, e, sock, pane, "serve2.out", "--detach")
	m := regexp.MustCompile(`fleetmgr serve running \(pid (\d+)\).*log: (\S+)`).FindStringSubmatch(got)
	if !strings.Contains(got, "exit=0") || m == nil {
		t.Fatalf("serve --detach from a pane:\n%s", got)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		svWait(10*time.Second, func() bool { return !svAlive(pid) })
	})
	ds, err := procfs.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	anc, err := procfs.Ancestors(pid)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(anc, shell) || ds.Session == shell || ds.Pgrp == shell || ds.Session != pid {
		t.Errorf("detached serve %d is tied to pane shell %d: stat %+v ancestors %v", pid, shell, ds, anc)
	}
	env, err := procfs.Environ(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "HERDR_") {
			t.Errorf("detached serve kept %s", kv)
		}
	}
	resp, err := http.Get("http://" + e.Listen + "/healthz")
	if err != nil {
		t.Fatalf("detached serve does not answer: %v", err)
	}
	var h struct{ PID int }
	_ = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.PID != pid {
		t.Errorf("/healthz answered by pid %d, want %d", h.PID, pid)
	}
	// And it serves MCP to a caller outside the panes.
	if v := harness.RunProbe(t, bins, e.URL()); !strings.HasPrefix(v, "OK") {
		t.Errorf("probe against the detached serve: %s", v)
	}
}

// TestLogsCommandAndMCPTools: `fleetmgr logs` prints fleetd's and herdr's
// logs; fleetmgr_logs and fleetmgr_restart work over MCP.
func TestLogsCommandAndMCPTools(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	r := e.MustRun("logs", "kb", "-n", "3")
	if n := strings.Count(strings.TrimRight(r.Stdout, "\n"), "\n") + 1; n != 3 || !strings.Contains(e.MustRun("logs", "kb", "-n", "0").Stdout, "fleet=kb") {
		t.Errorf("logs kb -n 3 gave %d lines:\n%s", n, r.Stdout)
	}
	if r := e.MustRun("logs", "kb", "--herdr"); strings.TrimSpace(r.Stdout) == "" {
		t.Errorf("herdr log empty")
	}
	if r := e.Run("logs", "nope"); r.Code != 2 {
		t.Errorf("logs of an unknown fleet: exit %d", r.Code)
	}
	// -f follows appended output until interrupted.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := exec.CommandContext(ctx, bins.Fleetmgr, "--config", e.ConfigPath, "logs", "kb", "-f", "-n", "1")
	f.Env = e.Environ
	var buf syncbuf.Buffer
	f.Stdout = &buf
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the follower has printed its one-line tail, append marks until
	// it shows one: only following can bring a line written after that.
	if !svWait(8*time.Second, func() bool { return buf.String() != "" }) {
		t.Fatal("logs -f -n 1 printed nothing")
	}
	mark := "MARK-" + strconv.Itoa(os.Getpid())
	seen := svWait(8*time.Second, func() bool {
		lf, err := os.OpenFile(filepath.Join(e.StateDir, "fleets", "kb", "fleetd.log"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(lf, mark) // again at each check, until logs -f shows one
		lf.Close()
		return strings.Contains(buf.String(), mark)
	})
	_ = f.Process.Signal(syscall.SIGINT)
	_ = f.Wait()
	if !seen {
		t.Errorf("logs -f did not show an appended line: %q", buf.String())
	}

	e.StartServe()
	cs := connect(t, e.URL())
	res := svCall(t, cs, "fleetmgr_logs", map[string]any{"fleet": "kb", "lines": 5})
	if res.IsError || !strings.Contains(textOf(res), "fleetd.log") {
		t.Errorf("fleetmgr_logs: %s", textOf(res))
	}
	pid0 := readState(t, e, "kb").Fleetd.PID
	res = svCall(t, cs, "fleetmgr_restart", map[string]any{"fleet": "kb"})
	if st := readState(t, e, "kb"); res.IsError || st.Fleetd == nil || st.Fleetd.PID == pid0 || svHealth(st.Port) != "kb" {
		t.Errorf("fleetmgr_restart: %s; state %+v", textOf(res), st)
	}
}

// svCall calls a tool with a 60 s bound and fails the test on a protocol error.
func svCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestSuperviseHerdrSessionDeath: when a fleet's herdr server dies, the
// supervisor starts the session again before fleetd (which it restarts so
// it works against the new session); the old panes are gone.
func TestSuperviseHerdrSessionDeath(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"200ms\"\nhealth_interval = \"300ms\"\nhealth_failures = 2", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	st0 := readState(t, e, "kb")
	_, shell := newPane(t, st0.HerdrSocket, "member")
	if err := syscall.Kill(st0.Herdr.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var st lifecycle.State
	if !svWait(10*time.Second, func() bool {
		st = readState(t, e, "kb")
		if st.Herdr == nil || st.Herdr.PID == st0.Herdr.PID || st.Fleetd == nil || st.Fleetd.PID == st0.Fleetd.PID || svHealth(st.Port) != "kb" {
			return false
		}
		_, err := herdr.New(st.HerdrSocket).Ping(ctx)
		return err == nil
	}) {
		t.Fatalf("herdr session and fleetd not restarted: %+v\n%s", st, serve.Log())
	}
	if !strings.Contains(st.LastRestartReason, "herdr session died") || st.Restarts != 1 {
		t.Errorf("restart record: reason %q restarts %d", st.LastRestartReason, st.Restarts)
	}
	if svAlive(st0.Fleetd.PID) || svAlive(shell) {
		t.Errorf("old fleetd %d or old pane shell %d still alive", st0.Fleetd.PID, shell)
	}
	if st.Herdr.StartTime == 0 || !st.HerdrOwned {
		t.Errorf("new herdr session not recorded as ours: %+v", st)
	}

	// A hung herdr server (alive, not answering) is found by ping, ended,
	// and the session started again before fleetd.
	st1 := st
	if err := syscall.Kill(st1.Herdr.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !svWait(15*time.Second, func() bool {
		st = readState(t, e, "kb")
		if st.Herdr == nil || st.Herdr.PID == st1.Herdr.PID || st.Fleetd == nil || st.Fleetd.PID == st1.Fleetd.PID || svHealth(st.Port) != "kb" {
			return false
		}
		_, err := herdr.New(st.HerdrSocket).Ping(ctx)
		return err == nil
	}) {
		_ = syscall.Kill(st1.Herdr.PID, syscall.SIGCONT)
		t.Fatalf("hung herdr session not replaced: %+v\n%s", st, serve.Log())
	}
	if !strings.Contains(st.LastRestartReason, "herdr session not answering") || svAlive(st1.Herdr.PID) {
		t.Errorf("after a hung herdr: reason %q, old server alive %v", st.LastRestartReason, svAlive(st1.Herdr.PID))
	}
}

// TestSuperviseHerdrPingedWhenDue (issue 26): a herdr server that answers
// is pinged every herdr_health_interval, not at every /healthz probe; a hung
// one (SIGSTOP: alive, its socket open, silent) is still found by ping,
// ended, and the session and fleetd started again, with the reason said.
func TestSuperviseHerdrPingedWhenDue(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"200ms\"\nhealth_interval = \"300ms\"\nhealth_failures = 2\nherdr_health_interval = \"3s\"\npass_env = [\"STANDIN_HERDR_LOG_CALLS\"]", harness.Fleet{Name: "kb"})
	e.Environ = append(e.Environ, "STANDIN_HERDR_LOG_CALLS=1")
	serve := e.StartServe()
	e.MustRun("start", "kb")
	st1 := readState(t, e, "kb")
	herdrLog := wait.File(filepath.Join(e.StateDir, "fleets", "kb", "herdr.log"))
	// serve's pings (the supervisor's; the status tracker pings once per
	// subscription, which the fleet holds from its start on).
	pingRE := regexp.MustCompile(fmt.Sprintf(`time=(\S+) level=INFO msg="api call" (?:\S+ )*?method=ping \S+ peer_pid=%d `, serve.Cmd.Process.Pid))
	wait.LogLine(t, 30*time.Second, serve.Log, "herdr updates: subscribed")
	from := len(herdrLog())
	var at []time.Time
	wait.For(t, 30*time.Second, "four pings from serve", func() (bool, string) {
		at = at[:0]
		for _, m := range pingRE.FindAllStringSubmatch(herdrLog()[from:], -1) {
			if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				at = append(at, ts)
			}
		}
		return len(at) >= 4, fmt.Sprint(len(at))
	})
	// herdr_health_interval 3 s, probes every 300 ms: a ping at the first
	// probe after 3 s - 150 ms. At every probe (before) they were 300 ms apart.
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 2500*time.Millisecond {
			t.Errorf("pings %s apart (herdr_health_interval 3s, health_interval 300ms): %v", gap, at)
		}
	}
	if n := strings.Count(serve.Log(), "herdr session not answering"); n != 0 {
		t.Fatalf("a restart before herdr hung:\n%s", serve.Log())
	}

	hung := time.Now()
	if err := syscall.Kill(st1.Herdr.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(st1.Herdr.PID, syscall.SIGCONT) //nolint:errcheck // gone when the test passed
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st lifecycle.State
	if !svWait(30*time.Second, func() bool {
		st = readState(t, e, "kb")
		if st.Herdr == nil || st.Herdr.PID == st1.Herdr.PID || st.Fleetd == nil || st.Fleetd.PID == st1.Fleetd.PID || svHealth(st.Port) != "kb" {
			return false
		}
		_, err := herdr.New(st.HerdrSocket).Ping(ctx)
		return err == nil
	}) {
		t.Fatalf("hung herdr session not replaced: %+v\n%s", st, serve.Log())
	}
	if !strings.Contains(st.LastRestartReason, "herdr session not answering") || svAlive(st1.Herdr.PID) {
		t.Errorf("after a hung herdr: reason %q, old server alive %v", st.LastRestartReason, svAlive(st1.Herdr.PID))
	}
	// Found within herdr_health_interval + ping timeouts (the bound
	// docs/ARCHITECTURE.md gives is about 3 s + 2 × 300 ms here); logged, not
	// asserted: a timing figure under a shared machine's load.
	t.Logf("hung herdr found and its restart decided %s after SIGSTOP", st.LastRestartAt.Sub(hung).Round(time.Millisecond))
}

// TestSuperviseAdoptsInterruptedStart: a start killed after it spawned
// fleetd but before it recorded it leaves a running, unrecorded fleetd;
// serve adopts it (same pids), and so does the CLI's next start (never a
// second fleetd).
func TestSuperviseAdoptsInterruptedStart(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	st0 := readState(t, e, "kb")
	interrupt := func() {
		svEditState(t, e, "kb", func(m map[string]any) {
			delete(m, "fleetd")
			delete(m, "herdr")
			m["herdr_owned"], m["phase"] = false, "starting"
		})
	}
	interrupt()
	serve := e.StartServe()
	var st lifecycle.State
	if !svWait(5*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Fleetd != nil && st.Phase == lifecycle.PhaseRunning
	}) {
		t.Fatalf("unrecorded fleetd not adopted: %+v\n%s", st, serve.Log())
	}
	if st.Fleetd.PID != st0.Fleetd.PID || st.Herdr == nil || st.Herdr.PID != st0.Herdr.PID || !st.HerdrOwned || st.Restarts != 0 {
		t.Errorf("adopted %+v, want fleetd %d and herdr %d without a restart", st, st0.Fleetd.PID, st0.Herdr.PID)
	}
	// The line is logged just after the record is written: waited for.
	if !svWait(5*time.Second, func() bool { return strings.Contains(serve.Log(), "adopted an unrecorded fleetd") }) {
		t.Errorf("adoption not logged:\n%s", serve.Log())
	}

	// Without a serve, the CLI's start adopts it as well.
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDead(t, serve.Cmd.Process.Pid, 10*time.Second)
	interrupt()
	r := e.MustRun("start", "kb")
	if !strings.Contains(r.Stdout, fmt.Sprintf("kb: adopted        fleetd pid %d", st0.Fleetd.PID)) {
		t.Fatalf("start with the unrecorded fleetd on the port:\n%s", r.Stdout)
	}
	st = readState(t, e, "kb")
	if st.Phase != lifecycle.PhaseRunning || st.Fleetd == nil || st.Fleetd.PID != st0.Fleetd.PID || st.Herdr == nil || st.Herdr.PID != st0.Herdr.PID || !st.HerdrOwned {
		t.Errorf("adopted by start %+v, want fleetd %d and herdr %d", st, st0.Fleetd.PID, st0.Herdr.PID)
	}
}

// TestLogRotationThroughLogpipe: a fleet's output goes through the log
// copier, which rotates fleetd.log at log_max_mb and keeps log_max_backups.
func TestLogRotationThroughLogpipe(t *testing.T) {
	e := harness.NewEnv(t, bins, "log_max_mb = 1\nlog_max_backups = 2")
	proj := filepath.Join(e.Dir, "proj-rot")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	// 3.5 MB of output before fleetd proper starts.
	script := fmt.Sprintf("yes LINE-0123456789abcdefghijklmnopqrstuvwxyz | head -c 3500000; echo; exec %s --config \"$1\"", bins.Fleetd)
	f, err := os.OpenFile(e.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n[fleets.rot]\nproject = %q\ncommand = [\"sh\", \"-c\", %q, \"sh\", \"{{.ConfigPath}}\"]\nport = %d\n", proj, script, port)
	f.Close()
	e.MustRun("start", "rot")
	dir := filepath.Join(e.StateDir, "fleets", "rot")
	var backups []string
	svWait(5*time.Second, func() bool {
		backups, _ = filepath.Glob(filepath.Join(dir, "fleetd-*.log"))
		return len(backups) == 2 // lumberjack removes the oldest asynchronously
	})
	if len(backups) != 2 {
		t.Errorf("want 2 rotated files (log_max_backups), got %v", backups)
	}
	fi, err := os.Stat(filepath.Join(dir, "fleetd.log"))
	if err != nil || fi.Size() > 1<<20 {
		t.Fatalf("current log %v %v", fi, err)
	}
	var out string
	if !svWait(5*time.Second, func() bool {
		out = e.MustRun("logs", "rot", "-n", "5").Stdout
		return strings.Contains(out, "fleet=rot listening")
	}) {
		t.Errorf("fleetd's own lines not in the current log after rotation:\n%s", out)
	}
}

// svPrompt waits up to 10 s for a pane's shell to draw something (its
// prompt), so that input typed next reaches an initialised shell.
func svPrompt(t *testing.T, sock, pane string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := herdr.New(sock)
	if !svWait(10*time.Second, func() bool {
		r, err := hc.PaneRead(ctx, herdr.PaneReadParams{PaneID: pane, Source: "visible", StripANSI: true})
		return err == nil && strings.TrimSpace(r.Text) != ""
	}) {
		t.Logf("pane %s shows no prompt after 10 s; typing anyway", pane)
	}
}

// TestStartLeadOnRunningFleet: `fleetmgr start NAME --lead` on a fleet
// already running launches its lead (once: a second run finds the tab),
// rather than answering "already running" and dropping --lead.
func TestStartLeadOnRunningFleet(t *testing.T) {
	lead := `lead_command = ["sh", "-c", "printf '\\033]777;herdr-status;idle\\007'; exec sleep 600"]`
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: lead})
	e.MustRun("start", "kb")
	pid := readState(t, e, "kb").Fleetd.PID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leadTabs := func() int {
		tabs, err := herdr.New(e.HerdrSocket("kb")).TabList(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tab := range tabs {
			if tab.Label == "lead" {
				n++
			}
		}
		return n
	}
	if n := leadTabs(); n != 0 {
		t.Fatalf("%d lead tabs before --lead", n)
	}
	r := e.MustRun("start", "kb", "--lead")
	if !strings.Contains(r.Stdout, "kb: lead ") || leadTabs() != 1 {
		t.Fatalf("start --lead on a running fleet: %d lead tabs\n%s", leadTabs(), r.Stdout)
	}
	if st := readState(t, e, "kb"); st.Fleetd.PID != pid || !st.Lead {
		t.Fatalf("state after start --lead: %+v; want fleetd %d kept and the lead recorded", st, pid)
	}
	e.MustRun("start", "kb", "--lead")
	if n := leadTabs(); n != 1 {
		t.Fatalf("%d lead tabs after a second start --lead", n)
	}
}
