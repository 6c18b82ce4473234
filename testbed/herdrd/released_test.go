package herdrd

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Behaviour of herdr as released that the stand-in must follow (herdr 0.8.2's source; 0.9.x
// from its release notes): every answer is still validated against the protocol 20 schema by
// harness.raw.

// TestStandInProtocols: ping and session.snapshot report the configured protocol and version;
// from 22 on an invalid_request keeps a readable id and panes get TERM_PROGRAM=herdr.
func TestStandInProtocols(t *testing.T) {
	v := loadValidators(t)
	for _, c := range []struct {
		protocol int
		version  string
	}{{19, "0.8.0-standin"}, {20, "0.8.2-standin"}, {22, "0.9.3-standin"}, {23, "0.0.0-standin"}} {
		t.Run(fmt.Sprint(c.protocol), func(t *testing.T) {
			h := startHarnessWith(t, v, func(cfg *Config) { cfg.Protocol = c.protocol })
			var pong struct {
				herdr.Pong
			}
			h.call("ping", `{}`, &pong)
			if pong.Protocol != c.protocol || pong.Version != c.version {
				t.Fatalf("ping = %+v, want protocol %d version %s", pong, c.protocol, c.version)
			}
			var snap struct {
				Snapshot herdr.Snapshot `json:"snapshot"`
			}
			h.call("session.snapshot", `{}`, &snap)
			if snap.Snapshot.Protocol != c.protocol || snap.Snapshot.Version != c.version {
				t.Fatalf("snapshot reports %s/%d", snap.Snapshot.Version, snap.Snapshot.Protocol)
			}
			wantID := ""
			if c.protocol >= 22 {
				wantID = "keep-me"
			}
			for _, bad := range []string{
				`{"id":"keep-me","method":"pane.nope","params":{}}`,
				`{"id":"keep-me","method":"ping"}`,
				`{"id":"keep-me","method":"pane.read","params":{"pane_id":"w1:p1","source":"everything"}}`,
			} {
				if code, id := h.callErr(bad); code != "invalid_request" || id != wantID {
					t.Errorf("%s: %s id %q, want invalid_request id %q", bad, code, id, wantID)
				}
			}
			if code, id := h.callErr(`{"id":5,"method":"ping","params":{}}`); code != "invalid_request" || id != "" {
				t.Errorf("numeric id: %s %q", code, id)
			}
			var wc herdr.WorkspaceCreated
			h.call("workspace.create", `{}`, &wc)
			h.run(wc.RootPane.PaneID, `echo "tp:${TERM_PROGRAM-unset}"`)
			want := "tp:unset"
			if c.protocol >= 22 {
				want = "tp:herdr"
			}
			h.waitOutput(wc.RootPane.PaneID, want)
		})
	}
	if _, err := Listen(Config{Socket: t.TempDir() + "/x.sock", Protocol: -1}); err == nil {
		t.Error("Listen accepted protocol -1")
	}
}

// TestPaneReadRevisionIsZero: pane.read answers revision 0 always (herdr issue #2804), while
// PaneInfo.revision still rises on a status change.
func TestPaneReadRevisionIsZero(t *testing.T) {
	h := startHarness(t, loadValidators(t))
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", `{}`, &wc)
	p := wc.RootPane.PaneID
	h.run(p, `printf '\033]0;title-1\007'; printf '\033]777;herdr-status;working\007'; echo done-1`)
	h.waitOutput(p, "done-1")
	wait.For(t, 5*time.Second, "the pane's revision to rise", func() (bool, string) {
		pi := h.pane(p)
		return pi.Revision >= 2, fmt.Sprint(pi.Revision)
	})
	for _, src := range []string{"visible", "recent", "recent_unwrapped", "detection"} {
		if r := h.read(fmt.Sprintf(`{"pane_id":%q,"source":%q}`, p, src)); r.Revision != 0 {
			t.Errorf("pane.read %s: revision %d, want 0", src, r.Revision)
		}
	}
}

// TestServerStopSemantics: server.stop is answered ok with the stopping state already set:
// the very next request but ping gets server_unavailable, and a repeated server.stop is
// answered ok too (herdr 0.8.2, the fix of herdr issue #2612). A pane ignoring HUP and TERM
// keeps the shutdown (and so the socket) going for about 500 ms, long enough to ask.
func TestServerStopSemantics(t *testing.T) {
	h := startHarness(t, loadValidators(t))
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", `{}`, &wc)
	h.run(wc.RootPane.PaneID, `trap '' HUP TERM; echo trapped; sleep 30`)
	h.waitOutput(wc.RootPane.PaneID, "trapped")
	h.call("server.stop", `{}`, nil)
	if code, id := h.callErr(`{"id":"after","method":"pane.list","params":{}}`); code != "server_unavailable" || id != "after" {
		t.Fatalf("pane.list after server.stop: %s id %q", code, id)
	}
	var pong herdr.Pong
	h.call("ping", `{}`, &pong)
	h.call("server.stop", `{}`, nil) // repeated: ok, not server_unavailable
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", h.sock); err == nil {
		c.Close()
		t.Fatal("socket still answers after the shutdown")
	}
}

// TestProcessInfoAsReleased: the details of pane.process_info on Linux that herdr 0.8.2 has
// (src/platform/linux.rs): empty argv parts dropped, zombies kept (without argv, cmdline and
// cwd), tty never sent, and foreground_process_group_id omitted, with the process list, when
// the foreground group has no member reachable from the shell or the group leader.
func TestProcessInfoAsReleased(t *testing.T) {
	h := startHarness(t, loadValidators(t))
	var wc herdr.WorkspaceCreated
	h.call("workspace.create", `{}`, &wc)
	p := wc.RootPane.PaneID
	rawInfo := func() (herdr.ProcessInfo, string) {
		line := h.raw(fmt.Sprintf(`{"id":"pi","method":"pane.process_info","params":{"pane_id":%q}}`, p))
		var r struct {
			Result struct {
				ProcessInfo herdr.ProcessInfo `json:"process_info"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		return r.Result.ProcessInfo, string(line)
	}
	// interrupt types C-c until the shell is back in the foreground: one
	// typed in the instant the job is being handed the terminal can reach
	// the shell instead (seen once in CI: the job ran on, and the next
	// command waited behind it).
	interrupt := func() {
		t.Helper()
		last := time.Time{}
		wait.For(t, 10*time.Second, "the shell back in the foreground after C-c", func() (bool, string) {
			pi, line := rawInfo()
			if pi.ForegroundProcessGroupID == pi.ShellPID {
				return true, line
			}
			if time.Since(last) > time.Second {
				h.call("pane.send_input", fmt.Sprintf(`{"pane_id":%q,"keys":["C-c"]}`, p), nil)
				last = time.Now()
			}
			return false, line
		})
	}

	// Empty argv parts are dropped.
	h.run(p, `sh -c 'sleep 30; true' '' x ''`)
	wait.For(t, 10*time.Second, "sh -c with empty arguments in the foreground", func() (bool, string) {
		pi, line := rawInfo()
		i := slices.IndexFunc(pi.ForegroundProcesses, func(f herdr.ForegroundProcess) bool { return f.Name == "sh" })
		return i >= 0 && slices.Equal(pi.ForegroundProcesses[i].Argv, []string{"sh", "-c", "sleep 30; true", "x"}) &&
			pi.ForegroundProcesses[i].Cmdline == "sh -c sleep 30; true x" && !strings.Contains(line, `"tty"`), line
	})
	interrupt()

	// A zombie of the foreground group is listed, without argv, cmdline or cwd.
	h.run(p, `sh -c 'sleep 0 & exec sleep 30'`)
	wait.For(t, 10*time.Second, "a zombie in the foreground group", func() (bool, string) {
		pi, line := rawInfo()
		for _, f := range pi.ForegroundProcesses {
			if st, err := readStat(f.PID); err == nil && st.state == 'Z' {
				return f.Name == "sleep" && f.Argv == nil && f.Cmdline == "" && f.Cwd == "" && pi.ForegroundProcessGroupID > 0, line
			}
		}
		return false, line
	})
	interrupt()

	// The terminal handed to a group whose only member was orphaned (reparented away from the
	// shell): no member is reachable, so herdr reports no foreground job at all.
	h.run(p, `perl -MPOSIX -e 'my $c = fork; if (!$c) { setpgid(0, 0); if (!fork) { sleep 30; exit } exit } setpgid($c, $c); waitpid($c, 0); open(my $t, "+<", "/dev/tty") or die; tcsetpgrp(fileno($t), $c) or die "tcsetpgrp: $!"; print STDERR "orphan-group\n"; sleep 30'`)
	h.waitOutput(p, "orphan-group")
	wait.For(t, 10*time.Second, "process_info without a foreground job", func() (bool, string) {
		pi, line := rawInfo()
		st, err := readStat(pi.ShellPID)
		if err != nil || st.tpgid <= 0 || st.tpgid == pi.ShellPID {
			return false, line
		}
		live := false
		for _, s := range allStats() {
			live = live || s.pgrp == st.tpgid && s.state != 'Z'
		}
		return live && pi.ShellPID > 0 && !strings.Contains(line, "foreground_process_group_id") && !strings.Contains(line, "foreground_processes"), line
	})
}
