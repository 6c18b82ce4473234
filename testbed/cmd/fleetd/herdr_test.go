package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/herdrtest"
)

// startHerdr runs the herdr stand-in binary for session name under a
// throwaway XDG_CONFIG_HOME and returns a client for its socket.
func startHerdr(t *testing.T, session string) *herdr.Client {
	t.Helper()
	if herdrPath == "" {
		t.Skip(herdrSkip)
	}
	return herdrtest.Start(t, herdrPath, session)
}

func tabLabels(t *testing.T, hc *herdr.Client) map[string]herdr.TabInfo {
	t.Helper()
	tabs, err := hc.TabList(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]herdr.TabInfo{}
	for _, tb := range tabs {
		m[tb.Label] = tb
	}
	return m
}

var nonceRe = regexp.MustCompile(`nonce ([0-9a-f]{8})$`)

// TestRestartReapsOwnMembers runs the binary against the herdr stand-in:
// lead auto-launch into FLEET_LEAD_TAB with FLEET_PROJECT_DIR as cwd, a
// member spawned over MCP, then a restart of the daemon on the same session
// reaps that member (fleetd cannot tell its prior self from a co-tenant)
// and does not launch a second lead.
func TestRestartReapsOwnMembers(t *testing.T) {
	hc := startHerdr(t, "restart")
	proj := t.TempDir()
	port := freePort(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"FLEET_NAME=rs", "FLEET_PORT=" + strconv.Itoa(port), "FLEET_HERDR_SOCKET=" + hc.Socket,
		"FLEET_HERDR_SESSION=restart", "FLEET_WORKTREE_ROOT=" + filepath.Join(t.TempDir(), "wt"),
		"FLEET_PROJECT_DIR=" + proj, "FLEET_LEAD_TAB=chief",
	}
	p := start(t, env)
	p.waitListening(t, "rs")
	chief, ok := tabLabels(t, hc)["chief"]
	if !ok {
		t.Fatalf("no lead tab \"chief\":\n%s", p.log)
	}
	panes, err := hc.PaneList(context.Background(), chief.WorkspaceID)
	if err != nil {
		t.Fatal(err)
	}
	if len(panes) != 1 || panes[0].TabID != chief.TabID || panes[0].Cwd != proj {
		t.Fatalf("fleet workspace panes %+v, want only the lead's, cwd %s", panes, proj)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port) + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": "w1"}})
	if err != nil || res.IsError {
		t.Fatalf("spawn: %v %+v", err, res)
	}
	_ = cs.Close()
	m := p.log.find(nonceRe)
	if m == nil {
		t.Fatal("nonce not logged")
	}
	label := "member-" + m[1] + "-w1"
	if _, ok := tabLabels(t, hc)[label]; !ok {
		t.Fatalf("member tab %s missing", label)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, ok := tabLabels(t, hc)[label]; !ok {
		t.Fatal("stopping the daemon closed its member tab (fleets' panes outlive fleetd)")
	}

	p2 := start(t, env)
	p2.waitListening(t, "rs")
	tabs := tabLabels(t, hc)
	if _, ok := tabs[label]; ok {
		t.Fatal("restarted daemon did not reap its prior self's member")
	}
	if !strings.Contains(p2.log.String(), "reaped orphan "+label) {
		t.Fatalf("reap not logged:\n%s", p2.log)
	}
	if tabs["chief"].TabID != chief.TabID || !strings.Contains(p2.log.String(), `lead tab "chief" exists`) {
		t.Fatalf("lead relaunched or not found: %+v\n%s", tabs, p2.log)
	}
}
