package guard

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestReadEnv(t *testing.T) {
	opSocks := map[string]string{"/x/herdr/sessions/ops/herdr.sock": "ops"}
	opNames := map[string]bool{"ops": true}
	kb := "/x/herdr/sessions/kb/herdr.sock"
	cases := []struct {
		name    string
		env     []string
		marks   []string
		allowed bool
		foreign []string
	}{
		{"none", []string{"PATH=/bin", "HERDR_LOG=debug", "HERDR_CONFIG_PATH=/c", "XHERDR_ENV=1"}, nil, false, nil},
		{"operator socket only", []string{"HERDR_SOCKET_PATH=/x/herdr/sessions/ops//herdr.sock"}, []string{"HERDR_SOCKET_PATH"}, true, nil},
		{"operator pane", []string{"HERDR_ENV=1", "HERDR_PANE_ID=w1:p1", "HERDR_SESSION=ops", "HERDR_SOCKET_PATH=/x/herdr/sessions/ops/herdr.sock"}, []string{"HERDR_ENV", "HERDR_PANE_ID", "HERDR_SESSION", "HERDR_SOCKET_PATH"}, true, nil},
		{"setsid partial scrub", []string{"HERDR_SESSION=kb", "HERDR_SOCKET_PATH=" + kb, "HERDR_TAB_ID=w1:t2", "HERDR_WORKSPACE_ID=w1", "HERDR_BIN_PATH=/usr/bin/herdr"},
			[]string{"HERDR_BIN_PATH", "HERDR_SESSION", "HERDR_SOCKET_PATH", "HERDR_TAB_ID", "HERDR_WORKSPACE_ID"}, false, []string{"kb"}},
		{"tab-bar status command", []string{"HERDR_SOCKET_PATH=" + kb, "HERDR_BIN_PATH=/h", "HERDR_ACTIVE_PANE_ID=w1:p1", "HERDR_ACTIVE_TAB_ID=w1:t1"},
			[]string{"HERDR_ACTIVE_PANE_ID", "HERDR_ACTIVE_TAB_ID", "HERDR_BIN_PATH", "HERDR_SOCKET_PATH"}, false, []string{"kb"}},
		{"operator status command", []string{"HERDR_SOCKET_PATH=/x/herdr/sessions/ops/herdr.sock", "HERDR_ACTIVE_PANE_ID=w1:p1"}, []string{"HERDR_ACTIVE_PANE_ID", "HERDR_SOCKET_PATH"}, true, nil},
		{"session only", []string{"HERDR_SESSION=kb"}, []string{"HERDR_SESSION"}, false, []string{"kb"}},
		{"operator name, fleet socket", []string{"HERDR_SESSION=ops", "HERDR_SOCKET_PATH=" + kb}, []string{"HERDR_SESSION", "HERDR_SOCKET_PATH"}, false, []string{"kb"}},
		{"pane id names no session", []string{"HERDR_PANE_ID=w1:p1"}, []string{"HERDR_PANE_ID"}, false, nil},
		{"bin path only", []string{"HERDR_BIN_PATH=/h"}, []string{"HERDR_BIN_PATH"}, false, nil},
		{"plugin command", []string{"HERDR_PLUGIN_ID=p", "HERDR_SOCKET_PATH=/x/herdr/sessions/ops/herdr.sock"}, []string{"HERDR_PLUGIN_ID", "HERDR_SOCKET_PATH"}, true, nil},
		{"empty HERDR_ENV", []string{"HERDR_ENV="}, []string{"HERDR_ENV"}, false, nil},
		{"odd socket path", []string{"HERDR_SOCKET_PATH=/tmp/elsewhere.sock"}, []string{"HERDR_SOCKET_PATH"}, false, []string{"/tmp/elsewhere.sock"}},
		{"default session", []string{"HERDR_SOCKET_PATH=/x/herdr/herdr.sock"}, []string{"HERDR_SOCKET_PATH"}, false, []string{"default"}},
		{"operator's name under another config dir", []string{"HERDR_SOCKET_PATH=/y/herdr/sessions/ops/herdr.sock"}, []string{"HERDR_SOCKET_PATH"}, false, []string{"/y/herdr/sessions/ops/herdr.sock"}},
	}
	for _, c := range cases {
		f := readEnv(c.env, opSocks, opNames)
		if !slices.Equal(f.names, c.marks) || (len(f.vars) > 0 && f.allowed() != c.allowed) || !slices.Equal(f.foreign, c.foreign) {
			t.Errorf("%s: names %v allowed %v foreign %v; want %v %v %v", c.name, f.names, f.allowed(), f.foreign, c.marks, c.allowed, c.foreign)
		}
	}
}

// TestHerdrEnvRule: processes outside every pane judged by their environment alone: any herdr
// marker refuses (the refusal names the variables, in the decision and the log line), unless
// every session the markers name is an operator session.
func TestHerdrEnvRule(t *testing.T) {
	var logBuf bytes.Buffer
	g := New(Options{
		AllowedUIDs:      []int{os.Getuid()},
		OperatorSessions: []Session{{Name: "ops", Socket: "/x/herdr/sessions/ops/herdr.sock"}},
		Log:              slog.New(slog.NewTextHandler(&logBuf, nil)),
	})
	run := func(env ...string) Decision {
		t.Helper()
		cmd := exec.Command("sleep", "30")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		return g.Check(context.Background(), cmd.Process.Pid, os.Getuid())
	}
	if d := run(); !d.Allowed {
		t.Fatalf("clean process refused: %+v", d)
	}
	d := run("HERDR_SESSION=kb", "HERDR_SOCKET_PATH=/x/herdr/sessions/kb/herdr.sock", "HERDR_TAB_ID=w1:t2")
	if d.Allowed || d.Rule != RuleHerdrEnv || d.Session != "kb" || !slices.Equal(d.EnvVars, []string{"HERDR_SESSION", "HERDR_SOCKET_PATH", "HERDR_TAB_ID"}) ||
		!strings.Contains(d.Reason, "HERDR_SESSION=kb") {
		t.Fatalf("partial scrub: %+v", d)
	}
	if !strings.Contains(logBuf.String(), "rule=herdr-env") || !strings.Contains(logBuf.String(), "herdr_env=HERDR_SESSION,HERDR_SOCKET_PATH,HERDR_TAB_ID") {
		t.Fatalf("log line lacks the rule or the variables:\n%s", logBuf.String())
	}
	if d := run("HERDR_ACTIVE_WORKSPACE_ID=w1", "HERDR_SOCKET_PATH=/x/herdr/sessions/kb/herdr.sock"); d.Allowed || d.Rule != RuleHerdrEnv {
		t.Fatalf("status command of a fleet session: %+v", d)
	}
	if d := run("HERDR_BIN_PATH=/usr/bin/herdr"); d.Allowed || d.Rule != RuleHerdrEnv {
		t.Fatalf("HERDR_BIN_PATH alone: %+v", d)
	}
	if d := run("HERDR_SOCKET_PATH=/x/herdr/sessions/ops/herdr.sock"); !d.Allowed || d.Session != "ops" {
		t.Fatalf("operator session's socket only: %+v", d)
	}
	if d := run("HERDR_SOCKET_PATH=/x/herdr/sessions/ops/herdr.sock", "HERDR_SESSION=ops", "HERDR_ENV=1", "HERDR_PANE_ID=w1:p1"); !d.Allowed {
		t.Fatalf("operator pane environment: %+v", d)
	}
	if got := g.Refusals()[RuleHerdrEnv]; got != 3 {
		t.Fatalf("herdr-env refusals counted %d, want 3", got)
	}
}
