package herdrd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func (h *harness) pane(id string) herdr.PaneInfo {
	h.t.Helper()
	var r struct {
		Pane herdr.PaneInfo `json:"pane"`
	}
	h.call("pane.get", fmt.Sprintf(`{"pane_id":%q}`, id), &r)
	return r.Pane
}

func (h *harness) read(params string) herdr.PaneReadResult {
	h.t.Helper()
	var r struct {
		Type string               `json:"type"`
		Read herdr.PaneReadResult `json:"read"`
	}
	h.call("pane.read", params, &r)
	if r.Type != "pane_read" {
		h.t.Fatalf("pane.read type %q", r.Type)
	}
	return r.Read
}

func (h *harness) procInfo(id string) herdr.ProcessInfo {
	h.t.Helper()
	var r struct {
		ProcessInfo herdr.ProcessInfo `json:"process_info"`
	}
	h.call("pane.process_info", fmt.Sprintf(`{"pane_id":%q}`, id), &r)
	return r.ProcessInfo
}

// run types a command line into a pane as `herdr pane run` does.
func (h *harness) run(paneID, cmd string) {
	h.t.Helper()
	b, _ := json.Marshal(map[string]any{"pane_id": paneID, "text": cmd, "keys": []string{"Enter"}})
	h.call("pane.send_input", string(b), nil)
}

// waitOutput polls pane.read recent_unwrapped until some line equals want.
func (h *harness) waitOutput(paneID, want string) {
	h.t.Helper()
	wait.For(h.t, 10*time.Second, "output line "+want, func() (bool, string) {
		r := h.read(fmt.Sprintf(`{"pane_id":%q,"source":"recent_unwrapped"}`, paneID))
		return slices.Contains(strings.Split(r.Text, "\n"), want), r.Text
	})
}

// sessionGone polls until no live process has session id sid.
func sessionGone(t *testing.T, sid int) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("session %d to be empty", sid), func() (bool, string) {
		m := sessionMembers(sid)
		return len(m) == 0, fmt.Sprint(m)
	})
}

// TestStandInAPI drives every method and several error cases against a live stand-in with real
// PTY shells, validating every raw response line against the herdr schema.
func TestStandInAPI(t *testing.T) {
	h := startHarness(t, loadValidators(t))
	work := t.TempDir()

	// ping
	var pong struct {
		Type string `json:"type"`
		herdr.Pong
	}
	h.call("ping", `{}`, &pong)
	if pong.Type != "pong" || pong.Protocol != 20 || pong.Version != "0.8.2-standin" || pong.Capabilities == nil || pong.Capabilities.LiveHandoff {
		t.Fatalf("pong = %+v", pong)
	}
	if want := detached(); pong.Capabilities.DetachedServerDaemon != want {
		t.Fatalf("detached_server_daemon = %v, want %v", pong.Capabilities.DetachedServerDaemon, want)
	}

	// Errors before any workspace exists.
	if code, id := h.callErr(`{"id":"e1","method":"tab.create","params":{}}`); code != "workspace_not_found" || id != "e1" {
		t.Fatalf("tab.create without workspace: %s id %q", code, id)
	}
	if code, _ := h.callErr(`{"id":"e2","method":"pane.process_info","params":{}}`); code != "pane_not_found" {
		t.Fatalf("process_info without panes: %s", code)
	}
	var empty struct {
		Snapshot herdr.Snapshot `json:"snapshot"`
	}
	h.call("session.snapshot", `{}`, &empty)
	if len(empty.Snapshot.Workspaces) != 0 || empty.Snapshot.FocusedPaneID != "" {
		t.Fatalf("empty snapshot = %+v", empty.Snapshot)
	}

	// workspace.create
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", fmt.Sprintf(`{"cwd":%q,"label":"fleet-a","focus":false,"env":{"FLEET_TASK":"t1","HERDR_PANE_ID":"spoof"}}`, work), &wc)
	if wc.Workspace.WorkspaceID != "w1" || wc.Workspace.Label != "fleet-a" || !wc.Workspace.Focused || wc.Workspace.ActiveTabID != "w1:t1" ||
		wc.Tab.TabID != "w1:t1" || wc.Tab.Label != "1" || wc.RootPane.PaneID != "w1:p1" || !wc.RootPane.Focused ||
		!strings.HasPrefix(wc.RootPane.TerminalID, "term_") || wc.RootPane.AgentStatus != "unknown" || wc.RootPane.Cwd != work {
		t.Fatalf("workspace.create = %+v", wc)
	}
	if code, _ := h.callErr(`{"id":"e3","method":"workspace.create","params":{"env":{"A=B":"x"}}}`); code != "invalid_env" {
		t.Fatalf("bad env: %s", code)
	}
	if code, _ := h.callErr(`{"id":"e4","method":"workspace.create","params":{"cwd":"/nonexistent/dir"}}`); code != "workspace_create_failed" {
		t.Fatalf("bad cwd: %s", code)
	}

	// tab.create
	var tc herdr.TabCreated
	h.call("tab.create", `{"workspace_id":"w1","label":"agents","focus":false,"env":{"FLEET_ROLE":"worker"}}`, &tc)
	if tc.Tab.TabID != "w1:t2" || tc.Tab.Number != 2 || tc.Tab.Label != "agents" || tc.Tab.Focused ||
		tc.RootPane.PaneID != "w1:p2" || tc.RootPane.Focused || tc.RootPane.Cwd != work || tc.RootPane.TerminalID == wc.RootPane.TerminalID {
		t.Fatalf("tab.create = %+v", tc)
	}
	if code, _ := h.callErr(`{"id":"e5","method":"tab.create","params":{"workspace_id":"w9"}}`); code != "workspace_not_found" {
		t.Fatalf("tab.create w9: %s", code)
	}

	// tab.list / pane.list
	var tl struct {
		Tabs []herdr.TabInfo `json:"tabs"`
	}
	h.call("tab.list", `{"workspace_id":"w1"}`, &tl)
	if len(tl.Tabs) != 2 || tl.Tabs[0].Label != "1" || tl.Tabs[1].Label != "agents" || !tl.Tabs[0].Focused || tl.Tabs[1].Focused {
		t.Fatalf("tab.list = %+v", tl.Tabs)
	}
	var pl struct {
		Panes []herdr.PaneInfo `json:"panes"`
	}
	h.call("pane.list", `{}`, &pl)
	if len(pl.Panes) != 2 || pl.Panes[0].PaneID != "w1:p1" || pl.Panes[1].PaneID != "w1:p2" {
		t.Fatalf("pane.list = %+v", pl.Panes)
	}
	if code, _ := h.callErr(`{"id":"e6","method":"pane.list","params":{"workspace_id":"w9"}}`); code != "workspace_not_found" {
		t.Fatalf("pane.list w9: %s", code)
	}
	if code, _ := h.callErr(`{"id":"e7","method":"tab.list","params":{"workspace_id":"w9"}}`); code != "workspace_not_found" {
		t.Fatalf("tab.list w9: %s", code)
	}

	// pane.get
	if p := h.pane("w1:p2"); p.TabID != "w1:t2" || p.WorkspaceID != "w1" || p.TerminalID != tc.RootPane.TerminalID {
		t.Fatalf("pane.get = %+v", p)
	}
	if code, id := h.callErr(`{"id":"6","method":"pane.get","params":{"pane_id":"w9:p9"}}`); code != "pane_not_found" || id != "6" {
		t.Fatalf("pane.get w9:p9: %s %q", code, id)
	}

	// pane.send_input runs a command; the pane env follows herdr src/pane.rs.
	h.run("w1:p2", `echo "env:$HERDR_PANE_ID:$HERDR_TAB_ID:$HERDR_WORKSPACE_ID:$FLEET_ROLE:$HERDR_ENV:$TERM:${CODEX_THREAD_ID-unset}:$(basename "$HERDR_SOCKET_PATH")"`)
	h.waitOutput("w1:p2", "env:w1:p2:w1:t2:w1:worker:1:xterm-256color:unset:herdr.sock")
	h.run("w1:p1", `echo "env:$HERDR_PANE_ID:$FLEET_TASK"`)
	h.waitOutput("w1:p1", "env:w1:p1:t1")

	// pane.send_text writes raw bytes without Enter; the "enter" key then submits the line.
	h.call("pane.send_text", `{"pane_id":"w1:p2","text":"echo sent-$((6*7))"}`, nil)
	h.call("pane.send_input", `{"pane_id":"w1:p2","keys":["enter"]}`, nil)
	h.waitOutput("w1:p2", "sent-42")
	if code, _ := h.callErr(`{"id":"e8","method":"pane.send_input","params":{"pane_id":"w1:p2","keys":["NoSuchKey"]}}`); code != "invalid_key" {
		t.Fatalf("bad key: %s", code)
	}
	if code, _ := h.callErr(`{"id":"e9","method":"pane.send_text","params":{"pane_id":"w1:p2"}}`); code != "invalid_request" {
		t.Fatalf("send_text without text: %s", code)
	}

	// pane.process_info at the prompt: the shell leads its own session and is the foreground.
	pi := h.procInfo("w1:p2")
	if pi.ShellPID <= 0 || pi.ForegroundProcessGroupID != pi.ShellPID || len(pi.ForegroundProcesses) != 1 ||
		pi.ForegroundProcesses[0].PID != pi.ShellPID || pi.ForegroundProcesses[0].Cwd != work {
		t.Fatalf("idle process_info = %+v", pi)
	}
	if sid, err := unix.Getsid(pi.ShellPID); err != nil || sid != pi.ShellPID {
		t.Fatalf("getsid(shell) = %d, %v; want %d", sid, err, pi.ShellPID)
	}
	var focused struct {
		ProcessInfo herdr.ProcessInfo `json:"process_info"`
	}
	h.call("pane.process_info", `{}`, &focused)
	if focused.ProcessInfo.PaneID != "w1:p1" {
		t.Fatalf("default process_info pane = %q", focused.ProcessInfo.PaneID)
	}

	// A foreground job gets its own group (job control); C-c ends it.
	h.run("w1:p2", "sleep 30")
	wait.For(t, 10*time.Second, "sleep in the foreground", func() (bool, string) {
		pi := h.procInfo("w1:p2")
		ok := pi.ForegroundProcessGroupID != pi.ShellPID && len(pi.ForegroundProcesses) == 1 &&
			pi.ForegroundProcesses[0].Name == "sleep" && slices.Equal(pi.ForegroundProcesses[0].Argv, []string{"sleep", "30"}) &&
			pi.ForegroundProcesses[0].Cmdline == "sleep 30" && pi.ForegroundProcesses[0].PID == pi.ForegroundProcessGroupID
		return ok, fmt.Sprintf("%+v", pi)
	})
	h.call("pane.send_input", `{"pane_id":"w1:p2","keys":["C-c"]}`, nil)
	wait.For(t, 10*time.Second, "shell back in the foreground", func() (bool, string) {
		pi := h.procInfo("w1:p2")
		return pi.ForegroundProcessGroupID == pi.ShellPID, fmt.Sprintf("%+v", pi)
	})

	// Agent-status hook; revision moves on status change, not on output.
	rev0 := h.pane("w1:p2").Revision
	h.run("w1:p2", "echo plain-output")
	h.waitOutput("w1:p2", "plain-output")
	if r := h.pane("w1:p2").Revision; r != rev0 {
		t.Fatalf("revision moved on output: %d -> %d", rev0, r)
	}
	h.run("w1:p2", `printf '\033]777;herdr-status;blocked\007'`)
	wait.For(t, 10*time.Second, "agent_status blocked", func() (bool, string) {
		p := h.pane("w1:p2")
		return p.AgentStatus == "blocked" && p.Agent == "standin" && p.Revision > rev0, fmt.Sprintf("%+v", p)
	})
	h.call("tab.list", `{}`, &tl)
	if tl.Tabs[1].AgentStatus != "blocked" || tl.Tabs[0].AgentStatus != "unknown" {
		t.Fatalf("tab agent_status = %+v", tl.Tabs)
	}

	// pane.read sources and options.
	h.run("w1:p2", `for i in 1 2 3; do echo "line-$i"; done; printf '\033[31mred\033[0m\n'`)
	h.waitOutput("w1:p2", "red")
	r := h.read(`{"pane_id":"w1:p2","source":"recent","lines":1}`)
	if !r.Truncated || strings.Contains(r.Text, "\n") || r.PaneID != "w1:p2" || r.TabID != "w1:t2" || r.WorkspaceID != "w1" || r.Format != "text" || r.Revision != 0 || h.pane("w1:p2").Revision == 0 {
		t.Fatalf("recent lines=1: %+v", r)
	}
	r = h.read(`{"pane_id":"w1:p2","source":"visible"}`)
	if !strings.Contains(r.Text, "line-3\nred") || strings.Contains(r.Text, "\x1b") || r.Source != "visible" {
		t.Fatalf("visible: %+v", r)
	}
	r = h.read(`{"pane_id":"w1:p2","source":"recent","strip_ansi":false}`)
	if !strings.Contains(r.Text, "\x1b[31mred") || r.Format != "ansi" {
		t.Fatalf("raw read: %+v", r)
	}
	if code, id := h.callErr(`{"id":"e10","method":"pane.read","params":{"pane_id":"w1:p2","source":"everything"}}`); code != "invalid_request" || id != "" {
		t.Fatalf("bad source: %s %q", code, id)
	}
	if code, _ := h.callErr(`{"id":"e11","method":"pane.read","params":{"pane_id":"w9:p1","source":"recent"}}`); code != "pane_not_found" {
		t.Fatalf("read unknown pane: %s", code)
	}

	// session.snapshot
	var snap struct {
		Snapshot herdr.Snapshot `json:"snapshot"`
	}
	h.call("session.snapshot", `{}`, &snap)
	s := snap.Snapshot
	if s.Protocol != 20 || s.FocusedWorkspaceID != "w1" || s.FocusedTabID != "w1:t1" || s.FocusedPaneID != "w1:p1" ||
		len(s.Workspaces) != 1 || len(s.Tabs) != 2 || len(s.Panes) != 2 || len(s.Layouts) != 2 || len(s.Agents) != 1 {
		t.Fatalf("snapshot = %+v", s)
	}

	// Unparseable requests: invalid_request with id "".
	for _, bad := range []string{
		`{"id":7,"method":"ping","params":{}}`,
		`{"id":"x","method":"ping"}`,
		`{"id":"x","method":"pane.nope","params":{}}`,
		`{"id":"x","method":"pane.get","params":{}}`,
		`{"id":"x","method":"pane.get","params":{"pane_id":5}}`,
		`{"id":"x","method":"ping","params":null}`,
		`not json`,
	} {
		if code, id := h.callErr(bad); code != "invalid_request" || id != "" {
			t.Errorf("%s: code %s id %q", bad, code, id)
		}
	}

	// pane.close: the pane's session is killed, an emptied tab goes away.
	p2 := h.procInfo("w1:p2").ShellPID
	h.run("w1:p2", "sleep 60 & sleep 61")
	wait.For(t, 10*time.Second, "background and foreground jobs", func() (bool, string) {
		m := sessionMembers(p2)
		return len(m) >= 3, fmt.Sprint(m)
	})
	h.call("pane.close", `{"pane_id":"w1:p2"}`, nil)
	sessionGone(t, p2)
	if code, _ := h.callErr(`{"id":"e12","method":"pane.get","params":{"pane_id":"w1:p2"}}`); code != "pane_not_found" {
		t.Fatalf("closed pane: %s", code)
	}
	if code, _ := h.callErr(`{"id":"e13","method":"pane.close","params":{"pane_id":"w1:p2"}}`); code != "pane_not_found" {
		t.Fatalf("close twice: %s", code)
	}
	h.call("tab.list", `{"workspace_id":"w1"}`, &tl)
	if len(tl.Tabs) != 1 {
		t.Fatalf("tabs after pane.close = %+v", tl.Tabs)
	}

	// tab.close
	h.call("tab.create", `{"focus":true}`, &tc)
	if tc.Tab.TabID != "w1:t3" || tc.RootPane.PaneID != "w1:p3" || !tc.Tab.Focused || tc.Tab.Number != 2 {
		t.Fatalf("tab.create focus = %+v", tc)
	}
	p3 := h.procInfo("w1:p3").ShellPID
	h.call("tab.close", `{"tab_id":"w1:t3"}`, nil)
	sessionGone(t, p3)
	if code, id := h.callErr(`{"id":"e14","method":"tab.close","params":{"tab_id":"w1:t3"}}`); code != "tab_not_found" || id != "e14" {
		t.Fatalf("tab.close twice: %s", code)
	}
	if p := h.pane("w1:p1"); !p.Focused {
		t.Fatalf("w1:p1 not focused after closing the focused tab: %+v", p)
	}

	// A shell that exits removes its pane, tab and (last) workspace.
	h.call("workspace.create", `{}`, &wc)
	if wc.Workspace.WorkspaceID != "w2" || wc.Workspace.Focused || wc.RootPane.Cwd != h.home {
		t.Fatalf("second workspace = %+v", wc)
	}
	p1 := h.procInfo("w1:p1").ShellPID
	h.run("w1:p1", "exit")
	wait.For(t, 10*time.Second, "w1 to disappear", func() (bool, string) {
		h.call("session.snapshot", `{}`, &snap)
		s := snap.Snapshot
		return len(s.Workspaces) == 1 && s.Workspaces[0].WorkspaceID == "w2" && s.FocusedWorkspaceID == "w2" && len(s.Panes) == 1, fmt.Sprintf("%+v", s)
	})
	sessionGone(t, p1)

	// server.stop: answered, then every pane session is killed and the socket removed.
	pw2 := h.procInfo("w2:p1").ShellPID
	h.call("server.stop", `{}`, nil)
	if err := h.wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if len(sessionMembers(pw2)) != 0 {
		t.Fatalf("w2:p1 processes survive server.stop: %v", sessionMembers(pw2))
	}
	if _, err := os.Lstat(h.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still present after stop: %v", err)
	}
}

// TestListenRules checks socket preparation: parent dirs, mode 0600, stale socket replaced,
// live socket refused, and shutdown on context cancel.
func TestListenRules(t *testing.T) {
	v := loadValidators(t)
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a", "b", "herdr.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	h := &harness{t: t, v: v}
	srv, err := Listen(Config{Socket: sock, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatalf("Listen over stale socket: %v", err)
	}
	h.sock = srv.Socket()
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	if _, err := Listen(Config{Socket: sock}); err == nil {
		t.Fatal("second Listen on a live socket succeeded")
	} else if ar := (*AlreadyRunningError)(nil); !errors.As(err, &ar) || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Listen: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", `{}`, &wc)
	var pi struct {
		ProcessInfo herdr.ProcessInfo `json:"process_info"`
	}
	h.call("pane.process_info", `{}`, &pi)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if len(sessionMembers(pi.ProcessInfo.ShellPID)) != 0 {
		t.Fatal("pane survived shutdown")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// TestConnectionLimits checks one-request-per-connection framing.
func TestConnectionLimits(t *testing.T) {
	h := startHarness(t, loadValidators(t))
	// An over-long line is refused.
	huge := `{"id":"x","method":"ping","params":{"pad":"` + strings.Repeat("a", maxRequestLine) + `"}}`
	if code, id := h.callErr(huge); code != "invalid_request" || id != "" {
		t.Fatalf("huge line: %s %q", code, id)
	}
	// Bytes after the first line are ignored; exactly one answer line arrives, then EOF.
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("{\"id\":\"a\",\"method\":\"ping\",\"params\":{}}\n{\"id\":\"b\",\"method\":\"ping\",\"params\":{}}\n")); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(all), "\n"); n != 1 || !strings.HasPrefix(string(all), `{"id":"a"`) {
		t.Fatalf("answer = %q", all)
	}
	h.v.check(t, []byte(strings.TrimSpace(string(all))))
}
