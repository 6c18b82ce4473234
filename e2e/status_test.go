package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// distinctPorts returns n loopback ports that were free at once.
func distinctPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// statusSchema compiles docs/status-schema.json.
func statusSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join(root, "docs", "status-schema.json"))
	if err != nil {
		t.Fatalf("compile docs/status-schema.json: %v", err)
	}
	return sch
}

// statusJSON runs `fleetmgr status --json args…`, checks the output against
// the documented schema and decodes it.
func statusJSON(t *testing.T, e *harness.Env, sch *jsonschema.Schema, args ...string) *status.Report {
	t.Helper()
	r := e.MustRun(append([]string{"status", "--json"}, args...)...)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(r.Stdout))
	if err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, r.Stdout)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("status --json violates docs/status-schema.json: %v\n%s", err, r.Stdout)
	}
	if r.Stderr != "" {
		t.Logf("fleetmgr status stderr: %s", r.Stderr)
	}
	var rep status.Report
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

func fleetRow(t *testing.T, rep *status.Report, name string) status.Fleet {
	t.Helper()
	for _, f := range rep.Fleets {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no fleet %s in report", name)
	return status.Fleet{}
}

func memberRow(t *testing.T, f status.Fleet, id string) status.Member {
	t.Helper()
	for _, m := range f.Members {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no member %s in fleet %s: %+v", id, f.Name, f.Members)
	return status.Member{}
}

// callTool calls a tool and decodes its structured result into out.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, textOf(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusVerdicts: the status verdicts on the stand-ins: real fleetd
// and herdr stand-ins, real shells in real PTYs, members that write files,
// print, claim work and do nothing, or block; a stopped fleet with its last
// exit; a remote fleet; through the daemon (watcher) and without it (walk).
func TestStatusVerdicts(t *testing.T) {
	ports := distinctPorts(t, 3) // harness.FreePort may hand out one port twice
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"2s\"\n",
		harness.Fleet{Name: "sa", Port: ports[0]},
		harness.Fleet{Name: "sb", Port: ports[1], Args: []string{"--exit-after", "1s", "--exit-code", "3"}},
		harness.Fleet{Name: "sr", Port: ports[2], Extra: `host = "far-away.example"`},
	)
	sch := statusSchema(t)
	e.StartServe()
	e.MustRun("start", "sa")

	// Members, spawned through sa's fleetd as primary (this test process is
	// in no pane). The herdr stand-in's test hook turns printf'd
	// ESC]777;herdr-status;STATE BEL into the pane's agent_status, which
	// fleetd reports as liveStatus.
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["sa"]))
	const claim = `printf '\033]777;herdr-status;working\007'; `
	members := map[string]string{
		"files":  claim + "while true; do date >> f.txt; sleep 0.3; done",
		"output": claim + "while true; do date; sleep 0.3; done",
		"stall":  claim + "sleep 600",
		"block":  `printf '\033]777;herdr-status;blocked\007'; sleep 600`,
		"idle":   "true",
	}
	for _, id := range []string{"files", "output", "stall", "block", "idle"} {
		callTool(t, fd, "fleet_spawn", map[string]any{"id": id, "command": members[id]}, nil)
	}
	want := map[string]string{"files": "working", "output": "working", "stall": "working", "block": "blocked", "idle": "unknown"}
	var list struct {
		Members []struct {
			ID         string `json:"id"`
			LiveStatus string `json:"liveStatus"`
		} `json:"members"`
	}
	if wait.Until(context.Background(), 15*time.Second, wait.Bool(func() bool {
		callTool(t, fd, "fleet_list", map[string]any{}, &list)
		ok := len(list.Members) == len(want)
		for _, m := range list.Members {
			ok = ok && want[m.ID] == m.LiveStatus
		}
		return ok
	})) != nil {
		{
			hc := herdr.New(e.HerdrSocket("sa"))
			ps, _ := hc.PaneList(context.Background(), "")
			for _, p := range ps {
				r, err := hc.PaneRead(context.Background(), herdr.PaneReadParams{PaneID: p.PaneID, Source: "recent", StripANSI: true})
				if err == nil {
					t.Logf("pane %s (%s): %q", p.PaneID, p.AgentStatus, r.Text)
				}
			}
			t.Fatalf("members did not reach their live statuses: %+v", list.Members)
		}
	}

	// sb: started by the daemon (so its exit status is known), exits with
	// status 3, then stopped.
	mgr := connect(t, e.URL())
	callTool(t, mgr, "fleetmgr_start", map[string]any{"fleet": "sb"}, nil)
	wait.For(t, 20*time.Second, "sb to record a last exit", wait.Bool(func() bool { return readState(t, e, "sb").LastExit != "" }))
	e.MustRun("stop", "sb")
	lastExit := readState(t, e, "sb").LastExit

	check := func(rep *status.Report, via string) {
		t.Helper()
		if rep.Via != via {
			t.Errorf("via = %s, want %s", rep.Via, via)
		}
		// One status costs about one interval, not one per member.
		if rep.ElapsedMS > 2000+1500 {
			t.Errorf("status took %d ms with a 2 s interval", rep.ElapsedMS)
		}
		sa := fleetRow(t, rep, "sa")
		if sa.State != "running" || sa.PID == 0 || sa.MemberCount != 5 || sa.Health == nil || !sa.Health.OK ||
			sa.Herdr == nil || !sa.Herdr.Alive || sa.Broker == nil || sa.Broker.Configured || sa.Verdict != "" {
			t.Errorf("fleet sa: %+v", sa)
		}
		files := memberRow(t, sa, "files")
		if files.Verdict != status.Working || strings.Join(files.Evidence, ",") != "files" {
			t.Errorf("files member: %+v", files)
		}
		output := memberRow(t, sa, "output")
		if output.Verdict != status.Working || strings.Join(output.Evidence, ",") != "output" {
			t.Errorf("output member: %+v", output)
		}
		stall := memberRow(t, sa, "stall")
		if stall.Verdict != status.Stalled || stall.LastChangeAgeS == nil || *stall.LastChangeAgeS < 1 || stall.Reason == "" {
			t.Errorf("stall member: %+v", stall)
		}
		if b := memberRow(t, sa, "block"); b.Verdict != status.Blocked || b.AgentStatus != "blocked" {
			t.Errorf("block member: %+v", b)
		}
		if i := memberRow(t, sa, "idle"); i.Verdict != status.Idle {
			t.Errorf("idle member: %+v", i)
		}
		sb := fleetRow(t, rep, "sb")
		if sb.State != "stopped" || sb.LastExit == "" || sb.LastExit != lastExit || !strings.Contains(sb.LastExit, "3") {
			t.Errorf("fleet sb: state %s last_exit %q, want stopped with %q", sb.State, sb.LastExit, lastExit)
		}
		if sb.LastRestartReason != "fleetd exited: "+lastExit || !sb.NextRestartAt.IsZero() || sb.CrashLoop {
			t.Errorf("fleet sb: last_restart_reason %q next_restart_at %v crash_loop %v, want the exit, no pending restart, no crash loop",
				sb.LastRestartReason, sb.NextRestartAt, sb.CrashLoop)
		}
		if sr := fleetRow(t, rep, "sr"); sr.Verdict != status.Remote || sr.State != "remote" || sr.Health != nil {
			t.Errorf("fleet sr: %+v", sr)
		}
	}
	// The stalled member's last change ages to 1 s or more.
	var rep *status.Report
	wait.For(t, 20*time.Second, "the stalled member's last change 1 s old", func() (bool, string) {
		rep = statusJSON(t, e, sch)
		stall := memberRow(t, fleetRow(t, rep, "sa"), "stall")
		return stall.LastChangeAgeS != nil && *stall.LastChangeAgeS >= 1, fmt.Sprintf("%+v", stall)
	})
	check(rep, "daemon")
	if f := memberRow(t, fleetRow(t, rep, "sa"), "files"); f.Files == nil || f.Files.Source != status.SourceWatch {
		t.Errorf("daemon file evidence not from the watcher: %+v", f.Files)
	}
	local := statusJSON(t, e, sch, "--local")
	check(local, "cli")
	if f := memberRow(t, fleetRow(t, local, "sa"), "files"); f.Files == nil || f.Files.Source != status.SourceWalk {
		t.Errorf("cli file evidence not from a walk: %+v", f.Files)
	}

	// The table, piped: plain text, fleets and indented members.
	r := e.MustRun("status", "--wide", "--interval", "1s", "sa", "sb", "sr")
	for _, want := range []string{"WORKING (files)", "WORKING (output)", "STALLED", "BLOCKED", "IDLE", "REMOTE",
		"\n  stall ", "last restart: fleetd exited: " + lastExit} { // the reason names the exit, so no "last exit" too
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "\x1b[") {
		t.Errorf("piped table has escape sequences:\n%s", r.Stdout)
	}

	// --watch refreshes until interrupted; piped, reports follow each other.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	watch := exec.CommandContext(wctx, bins.Fleetmgr, "--config", e.ConfigPath, "status", "--watch", "--interval", "300ms", "sb", "sr")
	watch.Env = e.Environ
	watch.Cancel = func() error { return watch.Process.Signal(os.Interrupt) }
	var wout syncbuf.Buffer
	watch.Stdout = &wout
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	// Three reports within 1.5 s at 300ms, then interrupted.
	_ = wait.Until(context.Background(), 1500*time.Millisecond, wait.Bool(func() bool { return strings.Count(wout.String(), "FLEET / MEMBER") >= 3 }))
	_ = watch.Process.Signal(os.Interrupt)
	if err := watch.Wait(); err != nil {
		t.Errorf("status --watch after SIGINT: %v", err)
	}
	if n := strings.Count(wout.String(), "FLEET / MEMBER"); n < 3 || strings.Contains(wout.String(), "\x1b[") {
		t.Errorf("status --watch for 1.5 s at 300ms printed %d reports:\n%s", n, wout.String())
	}

	// On a terminal the verdicts are coloured.
	tty := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "status", "sr")
	tty.Env = e.Environ
	ptmx, err := pty.Start(tty)
	if err != nil {
		t.Fatal(err)
	}
	ttyOut, _ := io.ReadAll(ptmx) // until the command exits (EIO)
	_ = tty.Wait()
	ptmx.Close()
	if !strings.Contains(string(ttyOut), "\x1b[36mREMOTE\x1b[39m") {
		t.Errorf("status on a terminal is not coloured: %q", ttyOut)
	}
	// --watch on a terminal redraws in place: home + clear before each report.
	tw := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "status", "--watch", "--interval", "300ms", "sr")
	tw.Env = e.Environ
	ptw, err := pty.Start(tw)
	if err != nil {
		t.Fatal(err)
	}
	var twBuf syncbuf.Buffer
	read := make(chan struct{})
	go func() { defer close(read); _, _ = io.Copy(&twBuf, ptw) }() // until the command exits (EIO)
	// Two redraws within 1.2 s at 300ms, then interrupted.
	_ = wait.Until(context.Background(), 1200*time.Millisecond, wait.Bool(func() bool { return strings.Count(twBuf.String(), "\x1b[H\x1b[2J") >= 2 }))
	_ = tw.Process.Signal(os.Interrupt)
	<-read
	twOut := twBuf.String()
	_ = tw.Wait()
	ptw.Close()
	if n := strings.Count(string(twOut), "\x1b[H\x1b[2J"); n < 2 {
		t.Errorf("status --watch on a terminal cleared the screen %d times: %q", n, twOut)
	}

	// A pane that goes away reads UNKNOWN, not "ready".
	pane := memberRow(t, fleetRow(t, local, "sa"), "stall").PaneID
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if err := herdr.New(e.HerdrSocket("sa")).PaneClose(hctx, pane); err != nil {
		t.Fatal(err)
	}
	// serve learns it from herdr's pane_closed event (delivered on herdr's 100 ms tick), so
	// the status right after the close may precede it by that much.
	var gone status.Member
	wait.For(t, 5*time.Second, "the closed member's pane reading UNKNOWN: gone", func() (bool, string) {
		rep = statusJSON(t, e, sch, "--interval", "1s", "sa")
		gone = memberRow(t, fleetRow(t, rep, "sa"), "stall")
		return gone.Verdict == status.Unknown && strings.Contains(gone.Reason, "gone"), fmt.Sprintf("%+v", gone)
	})
	if testing.Verbose() {
		var b bytes.Buffer
		_ = status.Render(&b, rep, false)
		t.Logf("\n%s", b.String())
	}
}

// TestStatusHungFleet: a fleet whose fleetd hangs (SIGSTOP: its port still
// accepts, nothing answers) reports UNKNOWN: timeout at its deadline, and
// the other fleet's verdicts arrive as usual.
func TestStatusHungFleet(t *testing.T) {
	ports := distinctPorts(t, 2) // harness.FreePort may hand out one port twice
	// health_failures: the supervisor must not restart the hung fleetd
	// while this test looks at it.
	e := harness.NewEnv(t, bins, "health_failures = 100\n\n[status]\ninterval = \"1s\"\nfleet_timeout = \"1s\"\n",
		harness.Fleet{Name: "ok", Port: ports[0]}, harness.Fleet{Name: "hung", Port: ports[1]})
	sch := statusSchema(t)
	e.StartServe()
	e.MustRun("start", "ok", "hung")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["ok"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "w",
		"command": `printf '\033]777;herdr-status;working\007'; while true; do date; sleep 0.2; done`}, nil)
	wait.For(t, 15*time.Second, "member w to claim working", wait.Bool(func() bool {
		var row struct {
			LiveStatus string `json:"liveStatus"`
		}
		callTool(t, fd, "fleet_status", map[string]any{"id": "w"}, &row)
		return row.LiveStatus == "working"
	}))
	pid := readState(t, e, "hung").Fleetd.PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	// Through the daemon (its upstream sessions) and walking.
	for _, args := range [][]string{nil, {"--local"}} {
		t0 := time.Now()
		rep := statusJSON(t, e, sch, args...)
		took := time.Since(t0)
		hung := fleetRow(t, rep, "hung")
		if hung.Verdict != status.Unknown || hung.Error != "timeout" || hung.State != "running" || hung.PID != pid {
			t.Errorf("%v: hung fleet (status took %s, elapsed_ms %d): %+v", args, took, rep.ElapsedMS, hung)
		}
		ok := fleetRow(t, rep, "ok")
		if m := memberRow(t, ok, "w"); ok.Verdict != "" || m.Verdict != status.Working {
			t.Errorf("%v: healthy fleet held up or misjudged: %+v", args, ok)
		}
		// Deadline: interval 1 s + fleet_timeout 1 s (+ 0.5 s grace), plus
		// process start.
		if took > 3500*time.Millisecond {
			t.Errorf("%v: status took %s with a 2 s per-fleet deadline", args, took)
		}
	}
}
