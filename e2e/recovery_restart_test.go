package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// Restarts counted once across serves, and reported honestly while they
// are pending; records naming a process that is not the fleet's are never
// signalled (docs/ARCHITECTURE.md "Lifecycle of one fleet", "Supervision").

// killServe kills serve with SIGKILL and waits until it is reaped. A
// zombie is not enough: the thread group leader shows 'Z' while its other
// threads still exit and hold its listening sockets (a new serve then met
// "address already in use"); it is reaped only after the last one.
func killServe(t *testing.T, s *harness.Serve) {
	t.Helper()
	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if !svWait(5*time.Second, func() bool { return svReaped(s.Cmd.Process.Pid) }) {
		t.Fatal("serve was not reaped within 5s of SIGKILL")
	}
}

// TestRestartCountedOnceAcrossServes: a fleetd crash seen by a serve that
// is killed during the backoff is made by the next serve at the due time
// the first one recorded, as the same restart: one count and one backoff
// step per crash. With crash_loop_restarts = 3, two such crashes counted
// twice each would mark the fleet failed. A call while the restart is
// pending says the fleet is restarting, when, and why.
func TestRestartCountedOnceAcrossServes(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"4s\"\nrestart_backoff_max = \"4s\"\ncrash_loop_restarts = 3\ncrash_loop_window = \"10m\"",
		harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	for crash := 1; crash <= 2; crash++ {
		st0 := readState(t, e, "kb")
		if err := syscall.Kill(st0.Fleetd.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var rec lifecycle.State
		if !svWait(5*time.Second, func() bool {
			rec = readState(t, e, "kb")
			return rec.Phase == lifecycle.PhaseRestarting && rec.Restarts == crash && !rec.NextRestartAt.IsZero()
		}) {
			t.Fatalf("crash %d: restart not recorded: %+v\n%s", crash, rec, serve.Log())
		}
		due := rec.NextRestartAt
		killServe(t, serve) // during the backoff
		if time.Now().After(due) {
			t.Fatalf("crash %d: serve killed only after the restart was due (%s); the machine is too slow for a 4s backoff", crash, due)
		}
		serve = e.StartServe()

		if crash == 1 {
			// While the new serve waits for the due time, a call through it
			// says so, and fleetmgr_list gives the time.
			cs := connect(t, e.URL())
			res := svCall(t, cs, "fleet_whoami", map[string]any{"fleet": "kb"})
			before := time.Now().Before(due)
			text := textOf(res)
			if !res.IsError || !strings.Contains(text, "fleet kb is restarting") || !strings.Contains(text, "(reason: fleetd exited") ||
				strings.Contains(text, "no fleetmgr serve") || strings.Contains(text, "failed") {
				t.Errorf("call during a pending restart: %s", text)
			}
			if before && !strings.Contains(text, "restarting in ") {
				t.Errorf("call answered before the due time does not say when: %s", text)
			}
			lres := svCall(t, cs, "fleetmgr_list", map[string]any{})
			var list struct {
				Fleets []struct {
					Name          string    `json:"name"`
					State         string    `json:"state"`
					NextRestartAt time.Time `json:"next_restart_at"`
					Restart       string    `json:"restart"`
				} `json:"fleets"`
			}
			b, _ := json.Marshal(lres.StructuredContent)
			if err := json.Unmarshal(b, &list); err != nil || len(list.Fleets) != 1 {
				t.Fatalf("fleetmgr_list: %v %s", err, b)
			}
			row := list.Fleets[0]
			if time.Now().Before(due) && (row.State != "restarting" || !row.NextRestartAt.Equal(due) || !strings.Contains(row.Restart, "restarting in ")) {
				t.Errorf("fleetmgr_list during a pending restart: %+v (due %s)", row, due)
			}
			// fleetmgr status, through the daemon (fleetmgr_status's data).
			out := e.MustRun("status", "kb", "--interval", "100ms", "--wide").Stdout // the whole detail (the default table cuts it to 120 columns)
			if time.Now().Before(due) && !regexp.MustCompile(`restart(ing in \S+|ing now| overdue by \S+) \(reason: fleetd exited: signal: killed\)`).MatchString(out) {
				t.Errorf("status during a pending restart:\n%s", out)
			}
		}

		var st lifecycle.State
		if !svWait(time.Until(due)+20*time.Second, func() bool {
			st = readState(t, e, "kb")
			return st.Phase == lifecycle.PhaseRunning && st.Fleetd != nil && st.Fleetd.PID != st0.Fleetd.PID && svHealth(st.Port) == "kb"
		}) {
			t.Fatalf("crash %d: not restarted by the next serve: %+v\n%s", crash, st, serve.Log())
		}
		if st.Restarts != crash || len(st.RestartTimes) != crash || st.BackoffStep != crash || st.CrashLoop {
			t.Errorf("crash %d counted more than once: restarts %d, restart_times %v, backoff_step %d, crash_loop %v",
				crash, st.Restarts, st.RestartTimes, st.BackoffStep, st.CrashLoop)
		}
		if st.StartedAt.Before(due) {
			t.Errorf("crash %d: restarted at %s, before its due time %s", crash, st.StartedAt, due)
		}
		if !regexp.MustCompile(`resuming a pending restart.*fleet=kb|fleet=kb.*resuming a pending restart`).MatchString(serve.Log()) {
			t.Errorf("crash %d: the new serve does not say it resumed the restart:\n%s", crash, serve.Log())
		}
	}
	if row := svList(t, e)["kb"]; row.State != "running" || row.CrashLoop || row.Restarts != 2 {
		t.Errorf("after two crashes each seen by two serves: %+v", row)
	}
}

// TestInterruptedStartHerdrRecordedByNextServe: a start that serve's death
// interrupted after it spawned the herdr server (and before it recorded
// it) leaves the server running; the next serve records it from
// herdr.spawned.json, so the server's death is seen by pid at once — with
// health_interval 5s and health_failures 3 the ping path would need 10 s.
func TestInterruptedStartHerdrRecordedByNextServe(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"200ms\"\nhealth_interval = \"5s\"\nhealth_failures = 3", harness.Fleet{Name: "kb"})
	slowCommand(t, e, 3*time.Second)
	serve := e.StartServe()
	cli := startCLI(t, e, "kb") // through the daemon: serve spawns herdr and fleetd
	fpid := spawnedPID(t, e, "kb", "fleetd", 15*time.Second)
	hpid := spawnedPID(t, e, "kb", "herdr", time.Second)
	if pst, _ := procfs.ReadStat(hpid); pst == nil || pst.PPID != serve.Cmd.Process.Pid {
		t.Fatalf("herdr %d is not serve's child (%+v): the start did not go through the daemon", hpid, pst)
	}
	killServe(t, serve)
	_ = cli.Wait()
	// The start never brought fleetd up, and had not recorded the server
	// yet (it records it once the socket answers: this is the window before).
	_ = syscall.Kill(-fpid, syscall.SIGKILL)
	waitDead(t, fpid, 5*time.Second)
	svEditState(t, e, "kb", func(m map[string]any) {
		delete(m, "herdr")
		delete(m, "fleetd")
		m["herdr_owned"] = false
	})
	if !svAlive(hpid) {
		t.Fatal("the herdr server died with serve")
	}

	serve = e.StartServe()
	var st lifecycle.State
	if !svWait(20*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Phase == lifecycle.PhaseRunning && st.Fleetd != nil && svHealth(st.Port) == "kb"
	}) {
		t.Fatalf("the next serve did not bring kb up: %+v\n%s", st, serve.Log())
	}
	if st.Herdr == nil || st.Herdr.PID != hpid || !st.HerdrOwned {
		t.Fatalf("the herdr server %d the interrupted start spawned is not recorded: herdr %+v owned %v", hpid, st.Herdr, st.HerdrOwned)
	}
	restarts := st.Restarts
	t0 := time.Now()
	if err := syscall.Kill(hpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !svWait(8*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Restarts > restarts
	}) {
		t.Fatalf("herdr's death not seen within 8s (the ping path takes 10s): %+v\n%s", st, serve.Log())
	}
	if want := fmt.Sprintf("herdr session died (server pid %d)", hpid); st.LastRestartReason != want {
		t.Errorf("restart reason %q, want %q (seen by pid, not by ping)", st.LastRestartReason, want)
	}
	t.Logf("herdr server killed → restart decided after %s", time.Since(t0).Round(time.Millisecond))
	if !svWait(20*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Phase == lifecycle.PhaseRunning && st.Herdr != nil && st.Herdr.PID != hpid && svHealth(st.Port) == "kb"
	}) {
		t.Fatalf("kb not back with a new herdr session: %+v\n%s", st, serve.Log())
	}
}

// startStranger starts `sleep 60` in a session of its own with extra
// environment entries: an unrelated process a forged record can name with
// its true start time. It is killed at cleanup.
func startStranger(t *testing.T, env ...string) lifecycle.Proc {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	k, err := procfs.KeyOf(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.Proc{PID: k.PID, StartTime: k.StartTime}
}

// forgeState writes fleet name's state.json under the fleet's lock (so no
// fleetmgr process writes it meanwhile), changed by fn from what it holds.
func forgeState(t *testing.T, e *harness.Env, name string, fn func(*lifecycle.State)) {
	t.Helper()
	dir := filepath.Join(e.StateDir, "fleets", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	st := lifecycle.State{Name: name}
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
	}
	fn(&st)
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func bootID(t *testing.T) string {
	t.Helper()
	id, err := procfs.BootID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStopNeverSignalsAStranger: a forged state.json naming unrelated live
// processes with their true start times (and this boot's id) as fleetd and
// herdr server: `fleetmgr stop` leaves them alive and says the record was
// stale. A record of a process that does carry the fleet's identity but
// was made under another boot is not signalled either; the same record
// with this boot's id is (so it is the boot id that refused it).
func TestStopNeverSignalsAStranger(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	fd, hd := startStranger(t), startStranger(t)
	forgeState(t, e, "kb", func(st *lifecycle.State) {
		st.Desired, st.Phase, st.Port = lifecycle.DesiredRunning, lifecycle.PhaseRunning, e.Ports["kb"]
		st.HerdrSocket, st.HerdrOwned = e.HerdrSocket("kb"), true
		fd.BootID = bootID(t)
		st.Fleetd, st.Herdr = &fd, &hd // the herdr record as an older fleetmgr wrote it: no boot id
	})
	out := e.MustRun("stop", "kb").Stdout
	for _, p := range []lifecycle.Proc{fd, hd} {
		if !svAlive(p.PID) {
			t.Errorf("stop signalled pid %d, which a forged record named", p.PID)
		}
	}
	if strings.Count(out, "record was stale; nothing signalled") != 2 || strings.Contains(out, fmt.Sprintf("stopped (pid %d)", fd.PID)) ||
		strings.Contains(out, "its processes were signalled") {
		t.Errorf("stop's output over a forged record:\n%s", out)
	}
	if !strings.Contains(out, "FLEET_NAME=kb") || !strings.Contains(out, "not the herdr server of session kb") {
		t.Errorf("stop does not say why the records were stale:\n%s", out)
	}

	// Right identity, another boot.
	same := startStranger(t, "FLEET_NAME=kb")
	forgeState(t, e, "kb", func(st *lifecycle.State) {
		same.BootID = "00000000-0000-4000-8000-000000000000"
		st.Desired, st.Phase, st.Fleetd, st.Herdr = lifecycle.DesiredRunning, lifecycle.PhaseRunning, &same, nil
	})
	out = e.MustRun("stop", "kb").Stdout
	if !svAlive(same.PID) || !strings.Contains(out, "record was stale; nothing signalled") || !strings.Contains(out, "recorded under another boot") {
		t.Fatalf("a record from another boot: alive %v, output:\n%s", svAlive(same.PID), out)
	}
	forgeState(t, e, "kb", func(st *lifecycle.State) {
		same.BootID = bootID(t)
		st.Desired, st.Phase, st.Fleetd = lifecycle.DesiredRunning, lifecycle.PhaseRunning, &same
	})
	out = e.MustRun("stop", "kb").Stdout
	waitDead(t, same.PID, 5*time.Second)
	if !strings.Contains(out, fmt.Sprintf("stopped (pid %d)", same.PID)) {
		t.Errorf("stop of the fleet's own process:\n%s", out)
	}
}

// TestSuperviseNeverSignalsAStranger: serve finds a forged record naming
// a live stranger as fleetd: it signals nothing, logs and counts the stale
// record, and starts the fleet. Later the fleet's herdr record is forged
// the same way and the real server dies: serve's health restart (by ping)
// leaves the stranger alive too.
func TestSuperviseNeverSignalsAStranger(t *testing.T) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"200ms\"\nhealth_interval = \"300ms\"\nhealth_failures = 2", harness.Fleet{Name: "kb"})
	fd := startStranger(t)
	forgeState(t, e, "kb", func(st *lifecycle.State) {
		fd.BootID = bootID(t)
		st.Desired, st.Phase, st.Port, st.HerdrSocket, st.Fleetd = lifecycle.DesiredRunning, lifecycle.PhaseRunning, e.Ports["kb"], e.HerdrSocket("kb"), &fd
	})
	serve := e.StartServe()
	var st lifecycle.State
	if !svWait(20*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Phase == lifecycle.PhaseRunning && st.Fleetd != nil && st.Fleetd.PID != fd.PID && svHealth(st.Port) == "kb"
	}) {
		t.Fatalf("kb not started past a forged record: %+v\n%s", st, serve.Log())
	}
	if !svAlive(fd.PID) {
		t.Fatalf("serve signalled pid %d, which a forged record named", fd.PID)
	}
	stale := regexp.MustCompile(`record was stale; nothing signalled.*fleet=kb.*reason=identity`)
	if !stale.MatchString(serve.Log()) || !strings.Contains(st.LastRestartReason, "stale state entry") {
		t.Errorf("stale record not reported (reason %q):\n%s", st.LastRestartReason, serve.Log())
	}
	if m := metrics(t, e); !strings.Contains(m, `fleetmgr_stale_records_total{fleet="kb",reason="identity"} 1`) {
		t.Errorf("/metrics does not count the refusal:\n%s", grepLines(m, "stale"))
	}

	// The herdr record forged, then the real server killed: found by ping.
	hd := startStranger(t)
	real := st.Herdr.PID
	forgeState(t, e, "kb", func(st *lifecycle.State) { st.Herdr, st.HerdrOwned = &hd, true })
	restarts := st.Restarts
	if err := syscall.Kill(real, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !svWait(20*time.Second, func() bool {
		st = readState(t, e, "kb")
		return st.Restarts > restarts && st.Phase == lifecycle.PhaseRunning && st.Herdr != nil && st.Herdr.PID != hd.PID && svHealth(st.Port) == "kb"
	}) {
		t.Fatalf("kb not restarted after its herdr server died: %+v\n%s", st, serve.Log())
	}
	if !strings.Contains(st.LastRestartReason, "herdr session not answering") {
		t.Errorf("restart reason %q", st.LastRestartReason)
	}
	if !svAlive(hd.PID) {
		t.Fatalf("serve's health restart signalled pid %d, which a forged herdr record named", hd.PID)
	}
	if n := len(regexp.MustCompile(fmt.Sprintf(`record was stale; nothing signalled.*fleet=kb.*pid=%d`, hd.PID)).FindAllString(serve.Log(), -1)); n != 1 {
		t.Errorf("the refused herdr record is logged %d times:\n%s", n, serve.Log())
	}
}

// metrics returns serve's /metrics page.
func metrics(t *testing.T, e *harness.Env) string {
	t.Helper()
	resp, err := http.Get("http://" + e.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
