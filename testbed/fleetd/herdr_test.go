package fleetd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/herdrtest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// herdrBin builds testbed/cmd/herdr (the herdr stand-in) once per test
// binary; tests that need it skip when it is absent or does not build.
var herdrBin = sync.OnceValues(func() (string, error) {
	src := filepath.Join("..", "cmd", "herdr")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("herdr stand-in not present: %w", err)
	}
	dir, err := os.MkdirTemp("", "fmherdr")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "herdr")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/herdr").CombinedOutput(); err != nil {
		return "", fmt.Errorf("herdr stand-in does not build: %v\n%s", err, out)
	}
	return bin, nil
})

// startHerdr runs `herdr --session NAME server` with a throwaway
// XDG_CONFIG_HOME and returns a client for its socket.
func startHerdr(t *testing.T, session string) *herdr.Client {
	t.Helper()
	bin, err := herdrBin()
	if err != nil {
		t.Skip(err)
	}
	return herdrtest.Start(t, bin, session)
}

// runInPane types a command into pane that runs this test binary as an MCP
// client calling tool with args; background appends " &" (a background job
// of the pane's shell: neither its shell_pid nor a foreground process). It
// returns the client's verdict.
func runInPane(t *testing.T, hc *herdr.Client, paneID, url, tool string, args map[string]any, background bool) clientVerdict {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "verdict.json")
	argJSON := "{}"
	if args != nil {
		b, _ := json.Marshal(args)
		argJSON = string(b)
	}
	line := fmt.Sprintf("%s=%s %s=%s %s='%s' %s=%s %s -test.run='^$'",
		envClientURL, url+MCPPath, envClientTool, tool, envClientArgs, argJSON, envClientOut, out, exe)
	if background {
		line += " &"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hc.PaneSendInput(ctx, paneID, line, []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	var v clientVerdict
	wait.For(t, 10*time.Second, "in-pane client verdict in "+paneID, wait.Bool(func() bool {
		b, err := os.ReadFile(out)
		return err == nil && json.Unmarshal(b, &v) == nil
	}))
	if v.Error != "" {
		t.Fatalf("in-pane client: %s", v.Error)
	}
	return v
}

func whoamiOf(t *testing.T, v clientVerdict) WhoamiResult {
	t.Helper()
	var w WhoamiResult
	if v.IsError || json.Unmarshal(v.Structured, &w) != nil {
		t.Fatalf("whoami verdict %+v", v)
	}
	return w
}

func tabByLabel(t *testing.T, hc *herdr.Client, label string) (herdr.TabInfo, bool) {
	t.Helper()
	tabs, err := hc.TabList(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs {
		if tb.Label == label {
			return tb, true
		}
	}
	return herdr.TabInfo{}, false
}

func paneOfTab(t *testing.T, hc *herdr.Client, tabID string) string {
	t.Helper()
	panes, err := hc.PaneList(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panes {
		if p.TabID == tabID {
			return p.PaneID
		}
	}
	t.Fatalf("no pane in tab %s", tabID)
	return ""
}

// TestRolesWithHerdr: a process in a member pane's foreground is a worker,
// one in the lead tab is the lead, the test process (outside every pane) is
// primary, and a background job of a member's shell falls through to primary
// (the gap measured in fleetd issue #160).
func TestRolesWithHerdr(t *testing.T) {
	hc := startHerdr(t, "roles")
	proj := t.TempDir()
	cfg := Config{Name: "kb", HerdrSocket: hc.Socket, HerdrSession: "roles", WorktreeRoot: filepath.Join(t.TempDir(), "wt"),
		ProjectDir: proj, LeadLaunch: true, LeadTab: "lead"}
	r := startDaemon(t, cfg)

	// Lead auto-launch: a tab labelled "lead" running the stand-in lead.
	lead, ok := tabByLabel(t, hc, "lead")
	if !ok {
		t.Fatalf("no lead tab launched; log:\n%s", r.logs)
	}
	if !strings.Contains(r.logs.String(), "launched lead") {
		t.Fatal("lead launch not logged")
	}
	leadPane := paneOfTab(t, hc, lead.TabID)
	wait.For(t, 10*time.Second, "lead banner", wait.Bool(func() bool {
		rd, err := hc.PaneRead(context.Background(), herdr.PaneReadParams{PaneID: leadPane, Source: herdr.SourceRecent, StripANSI: true})
		return err == nil && strings.Contains(rd.Text, "fleetd-standin-lead\n")
	}))

	cs := connect(t, r.url, nil, nil)
	var row MemberRow
	call(t, cs, "fleet_spawn", map[string]any{"profile": "p1"}, &row)
	if row.ID != "m1" || row.State != StateReady || row.Worktree != filepath.Join(cfg.WorktreeRoot, "m1") || row.Profile != "p1" {
		t.Fatalf("spawn row %+v", row)
	}
	if st, err := os.Stat(row.Worktree); err != nil || !st.IsDir() {
		t.Fatalf("worktree not made: %v", err)
	}
	tab, ok := tabByLabel(t, hc, "member-"+r.d.Nonce()+"-m1")
	if !ok || tab.TabID != row.TabID {
		t.Fatalf("member tab %+v %v, row %+v", tab, ok, row)
	}
	pane, err := hc.PaneGet(context.Background(), row.PaneID)
	if err != nil || pane.Cwd != row.Worktree {
		t.Fatalf("member pane %+v %v", pane, err)
	}

	// Worker: a foreground process of the member's pane.
	w := whoamiOf(t, runInPane(t, hc, row.PaneID, r.url, "fleet_whoami", nil, false))
	if w.Role != RoleWorker || w.PaneID != row.PaneID || w.Fleet != "kb" {
		t.Fatalf("in-pane whoami %+v, want worker in %s", w, row.PaneID)
	}
	// A worker may not stop members.
	v := runInPane(t, hc, row.PaneID, r.url, "fleet_stop", map[string]any{"id": "m1"}, false)
	if !v.IsError || !strings.Contains(v.Text, "forbidden: fleet_stop is lead-only") {
		t.Fatalf("worker fleet_stop: %+v", v)
	}
	// The gap: a background job of the member's shell is primary.
	w = whoamiOf(t, runInPane(t, hc, row.PaneID, r.url, "fleet_whoami", nil, true))
	if w.Role != RolePrimary || w.PaneID != "" {
		t.Fatalf("background job whoami %+v, want primary (the measured gap)", w)
	}
	// Lead: a process in the lead tab.
	w = whoamiOf(t, runInPane(t, hc, leadPane, r.url, "fleet_whoami", nil, false))
	if w.Role != RoleLead || w.PaneID != leadPane {
		t.Fatalf("lead whoami %+v", w)
	}
	// Primary: this test process.
	var who WhoamiResult
	call(t, cs, "fleet_whoami", nil, &who)
	if who.Role != RolePrimary || who.CallerPID != os.Getpid() {
		t.Fatalf("outside whoami %+v", who)
	}

	// fleet_send + the herdr status hook → liveStatus.
	var ack AckResult
	call(t, cs, "fleet_send", map[string]any{"id": "m1", "text": `printf '\033]777;herdr-status;blocked\007'`}, &ack)
	wait.For(t, 10*time.Second, "liveStatus blocked", wait.Bool(func() bool {
		var st MemberRow
		call(t, cs, "fleet_status", map[string]any{"id": "m1"}, &st)
		return st.LiveStatus == herdr.StatusBlocked
	}))

	// A second member with a command; the lead stops it.
	call(t, cs, "fleet_spawn", map[string]any{"id": "rev", "command": "echo member-rev-ran"}, &row)
	wait.For(t, 10*time.Second, "member command output", wait.Bool(func() bool {
		rd, err := hc.PaneRead(context.Background(), herdr.PaneReadParams{PaneID: row.PaneID, Source: herdr.SourceRecent, StripANSI: true})
		return err == nil && strings.Contains(rd.Text, "member-rev-ran\n")
	}))
	v = runInPane(t, hc, leadPane, r.url, "fleet_stop", map[string]any{"id": "rev"}, false)
	if v.IsError {
		t.Fatalf("lead fleet_stop: %+v", v)
	}
	if _, ok := tabByLabel(t, hc, "member-"+r.d.Nonce()+"-rev"); ok {
		t.Fatal("stopped member's tab still open")
	}
	var list ListResult
	call(t, cs, "fleet_list", nil, &list)
	if len(list.Members) != 1 || list.Members[0].ID != "m1" || list.Members[0].LiveStatus != herdr.StatusBlocked {
		t.Fatalf("list after stop %+v", list)
	}

	// Primary may stop too (loopback trust).
	call(t, cs, "fleet_spawn", map[string]any{"id": "tmp"}, &row)
	call(t, cs, "fleet_stop", map[string]any{"id": "tmp"}, &ack)
	if !ack.OK {
		t.Fatalf("primary stop %+v", ack)
	}
	if e := errText(call(t, cs, "fleet_status", map[string]any{"id": "tmp"}, nil)); !strings.HasPrefix(e, ErrAgentNotFound) {
		t.Fatalf("status after stop: %q", e)
	}
}

// TestOrphanReapWithHerdr: a second daemon on the same herdr session closes
// the first daemon's member tab at boot, and the first daemon's roster keeps
// saying "ready" (liveStatus "unknown").
func TestOrphanReapWithHerdr(t *testing.T) {
	hc := startHerdr(t, "reap")
	base := Config{Name: "a", HerdrSocket: hc.Socket, WorktreeRoot: filepath.Join(t.TempDir(), "wt"), LeadLaunch: false}
	a := startDaemon(t, base)
	csA := connect(t, a.url, nil, nil)
	var row MemberRow
	call(t, csA, "fleet_spawn", nil, &row)
	label := "member-" + a.d.Nonce() + "-m1"
	if _, ok := tabByLabel(t, hc, label); !ok {
		t.Fatal("member tab missing")
	}
	// Lead launch disabled: no lead tab.
	if _, ok := tabByLabel(t, hc, "lead"); ok {
		t.Fatal("lead launched although disabled")
	}

	bcfg := base
	bcfg.Name = "b"
	b := startDaemon(t, bcfg)
	if b.d.Nonce() == a.d.Nonce() {
		t.Fatal("nonces collide")
	}
	if _, ok := tabByLabel(t, hc, label); ok {
		t.Fatal("second daemon did not reap the first's member tab")
	}
	want := fmt.Sprintf("reaped orphan %s (pane=%s tab=%s) left by a prior daemon", label, row.PaneID, row.TabID)
	if !strings.Contains(b.logs.String(), want) {
		t.Fatalf("reap not logged as %q:\n%s", want, b.logs)
	}
	var list ListResult
	call(t, csA, "fleet_list", nil, &list)
	if len(list.Members) != 1 || list.Members[0].State != StateReady || list.Members[0].LiveStatus != LiveUnknown {
		t.Fatalf("surviving daemon's roster %+v, want m1 still ready/unknown", list)
	}
	// b's own members survive its own lifetime; a third boot reaps them.
	csB := connect(t, b.url, nil, nil)
	call(t, csB, "fleet_spawn", map[string]any{"id": "x"}, &row)
	if _, ok := tabByLabel(t, hc, "member-"+b.d.Nonce()+"-x"); !ok {
		t.Fatal("b's member tab missing")
	}
}

// TestAnyMemberID: with Config.AnyMemberID a member id holding markup,
// quotes, slashes and spaces is spawned and named as given in the roster
// and the log, its worktree and tab label in hex form under the worktree
// root; an id with a control character is still refused, and without the
// option the same id is refused.
func TestAnyMemberID(t *testing.T) {
	hc := startHerdr(t, "anyid")
	root := filepath.Join(t.TempDir(), "wt")
	id := `<img src=x onerror="alert(1)"></script> ../x`
	cfg := Config{Name: "kb", HerdrSocket: hc.Socket, HerdrSession: "anyid", WorktreeRoot: root, AnyMemberID: true}
	r := startDaemon(t, cfg)
	cs := connect(t, r.url, nil, nil)
	var row MemberRow
	call(t, cs, "fleet_spawn", map[string]any{"id": id}, &row)
	if row.ID != id || filepath.Dir(row.Worktree) != root || row.Worktree != filepath.Join(root, memberDir(id)) {
		t.Fatalf("spawn row %+v", row)
	}
	if st, err := os.Stat(row.Worktree); err != nil || !st.IsDir() {
		t.Fatalf("worktree not made: %v", err)
	}
	if _, ok := tabByLabel(t, hc, "member-"+r.d.Nonce()+"-"+memberDir(id)); !ok {
		t.Fatal("no member tab with the hex label")
	}
	var list ListResult
	call(t, cs, "fleet_list", map[string]any{}, &list)
	if len(list.Members) != 1 || list.Members[0].ID != id {
		t.Fatalf("roster %+v", list.Members)
	}
	if !strings.Contains(r.logs.String(), "spawned member "+id+" ") {
		t.Fatalf("log does not name the member as given:\n%s", r.logs)
	}
	if e := errText(call(t, cs, "fleet_spawn", map[string]any{"id": "a\x1b[31mb"}, nil)); !strings.HasPrefix(e, ErrInvalid) {
		t.Fatalf("id with a control character: %q", e)
	}
	if memberDir("m1") != "m1" || memberDir("..") == ".." {
		t.Fatal("memberDir")
	}

	strict := startDaemon(t, Config{Name: "kb2", HerdrSocket: hc.Socket, HerdrSession: "anyid", WorktreeRoot: root})
	if e := errText(call(t, connect(t, strict.url, nil, nil), "fleet_spawn", map[string]any{"id": id}, nil)); !strings.HasPrefix(e, ErrInvalid) {
		t.Fatalf("strict daemon took the id: %q", e)
	}
}
