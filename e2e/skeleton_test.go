package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func readState(t *testing.T, e *harness.Env, name string) lifecycle.State {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.StateDir, "fleets", name, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st lifecycle.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "test"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sessionProcs lists live pids whose session id is sid.
func sessionProcs(sid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Session == sid && st.State != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// waitPaneShell creates a tab in session's herdr and returns its pane id and
// shell pid once the shell is up.
func newPane(t *testing.T, sock, label string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := herdr.New(sock)
	var paneID string
	tabs, err := hc.TabList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(tabs) == 0 {
		w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "test"})
		if err != nil {
			t.Fatal(err)
		}
		paneID = w.RootPane.PaneID
	} else {
		tc, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: tabs[0].WorkspaceID, Label: label})
		if err != nil {
			t.Fatal(err)
		}
		paneID = tc.RootPane.PaneID
	}
	var shell int
	if wait.Until(ctx, time.Minute, wait.Bool(func() bool {
		pi, err := hc.PaneProcessInfo(ctx, paneID)
		if err != nil {
			return false
		}
		shell = pi.ShellPID
		return shell > 0
	})) != nil {
		t.Fatal("pane shell did not start")
	}
	return paneID, shell
}

func runInPane(t *testing.T, sock, pane, line string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := herdr.New(sock).PaneSendInput(ctx, pane, line, []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
}

// TestTwoFleetsEndToEnd: two fleets on the
// stand-ins, one merged tool set, pane members refused, stop leaves nothing.
func TestTwoFleetsEndToEnd(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})

	r := e.MustRun("start", "kb")
	if !strings.Contains(r.Stdout, "kb: running") {
		t.Fatalf("start kb output:\n%s", r.Stdout)
	}
	e.MustRun("start", "docs")
	kb, docs := readState(t, e, "kb"), readState(t, e, "docs")
	if kb.Fleetd == nil || docs.Fleetd == nil || kb.Fleetd.PID == docs.Fleetd.PID {
		t.Fatalf("want two distinct fleetd pids: kb=%+v docs=%+v", kb.Fleetd, docs.Fleetd)
	}
	if kb.HerdrSocket == docs.HerdrSocket || kb.HerdrSocket != e.HerdrSocket("kb") || docs.HerdrSocket != e.HerdrSocket("docs") {
		t.Fatalf("herdr sockets: kb=%s docs=%s", kb.HerdrSocket, docs.HerdrSocket)
	}
	for _, s := range []string{kb.HerdrSocket, docs.HerdrSocket} {
		if _, err := herdr.New(s).Ping(context.Background()); err != nil {
			t.Fatalf("herdr session at %s: %v", s, err)
		}
	}

	serve := e.StartServe()
	cs := connect(t, e.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The merged catalogue: each fleetd tool once, fleet required, enum [docs kb].
	var tools *mcp.ListToolsResult
	_ = wait.Until(ctx, time.Minute, wait.Bool(func() bool { // the checks below say what is missing
		var err error
		if tools, err = cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(tools.Tools, func(x *mcp.Tool) bool { return x.Name == "fleet_whoami" })
	}))
	seen := map[string]int{}
	for _, tool := range tools.Tools {
		seen[tool.Name]++
		if strings.HasPrefix(tool.Name, "fleetmgr_") {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Required   []string `json:"required"`
			Properties map[string]struct {
				Type any      `json:"type"`
				Enum []string `json:"enum"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(s.Required, "fleet") {
			t.Errorf("%s: fleet not required: %s", tool.Name, b)
		}
		if f := s.Properties["fleet"]; f.Type != "string" || !slices.Equal(f.Enum, []string{"docs", "kb"}) {
			t.Errorf("%s: fleet property %+v, want string enum [docs kb]", tool.Name, f)
		}
	}
	for _, want := range []string{"fleet_whoami", "fleet_list", "fleet_spawn", "fleet_status", "fleet_send", "fleet_stop", "fleetmgr_list", "fleetmgr_start", "fleetmgr_stop"} {
		if seen[want] != 1 {
			t.Errorf("tool %s listed %d times, want once (tools: %v)", want, seen[want], seen)
		}
	}

	// fleet_whoami through fleetmgr: primary, and from the right fleetd.
	for _, fleet := range []string{"kb", "docs"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": fleet}})
		if err != nil {
			t.Fatal(err)
		}
		txt := textOf(res)
		if res.IsError || !strings.Contains(txt, `"role":"primary"`) || !strings.Contains(txt, fmt.Sprintf(`"fleet":%q`, fleet)) {
			t.Fatalf("fleet_whoami fleet=%s: %s", fleet, txt)
		}
	}
	// An unknown fleet is an invalid-params error naming the valid ones.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": "nope"}}); err == nil || !strings.Contains(err.Error(), "docs, kb") {
		t.Fatalf("unknown fleet: %v", err)
	}

	// Members inside kb's herdr session are refused: a pane's child and its grandchild.
	pane, shell := newPane(t, kb.HerdrSocket, "members")
	child := filepath.Join(e.Dir, "child.out")
	grand := filepath.Join(e.Dir, "grand.out")
	runInPane(t, kb.HerdrSocket, pane, fmt.Sprintf("%s -url %s -out %s", bins.Probe, e.URL(), child))
	runInPane(t, kb.HerdrSocket, pane, fmt.Sprintf("sh -c '%s -url %s -out %s; true'", bins.Probe, e.URL(), grand))
	for _, f := range []string{child, grand} {
		v := harness.WaitFile(t, f, 20*time.Second)
		if !strings.HasPrefix(v, "REFUSED") || !strings.Contains(v, "Forbidden") {
			t.Errorf("%s: in-pane client was not refused: %s", filepath.Base(f), v)
		}
	}
	refusals := regexp.MustCompile(`guard refused a caller.*pid=\d+.*pane=` + regexp.QuoteMeta(pane))
	_ = wait.Until(context.Background(), 5*time.Second, wait.Bool(func() bool { return len(refusals.FindAllString(serve.Log(), -1)) >= 2 })) // a shortfall is reported next
	if n := len(refusals.FindAllString(serve.Log(), -1)); n < 2 {
		t.Errorf("want 2 refusal log lines naming pid and pane %s, got %d:\n%s", pane, n, serve.Log())
	}
	// A process outside every pane is served (the test itself was, above;
	// the probe binary too).
	if v := harness.RunProbe(t, bins, e.URL()); !strings.HasPrefix(v, "OK") {
		t.Errorf("probe outside panes: %s", v)
	}

	// Stop kb: no process of kb remains (fleetd, herdr server, pane shells).
	pids := []int{kb.Fleetd.PID, kb.Herdr.PID, shell}
	// The pane this test opened lives in kb's session: the stop ends it,
	// and says so first (issue 24 item 3), so it is confirmed.
	e.MustRun("stop", "kb", "--yes")
	for _, sid := range pids {
		if left := sessionProcs(sid); len(left) > 0 {
			t.Errorf("after stop kb, session %d still has %v", sid, left)
		}
	}
	if st := readState(t, e, "kb"); st.Phase != lifecycle.PhaseStopped {
		t.Errorf("kb phase after stop: %s", st.Phase)
	}
	// docs is untouched.
	if _, err := herdr.New(docs.HerdrSocket).Ping(context.Background()); err != nil {
		t.Errorf("docs herdr after stopping kb: %v", err)
	}
}

// TestBadConfigNamesLine: a broken fleets.toml exits non-zero with the line.
func TestBadConfigNamesLine(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	base, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, add string
		want      *regexp.Regexp
	}{
		{"duplicate port", fmt.Sprintf("\n[fleets.docs]\nproject = %q\ncommand = [\"x\"]\nport = %d\n", e.Dir, e.Ports["kb"]),
			regexp.MustCompile(`fleets\.toml:\d+.*port`)},
		{"unknown key", "\n[fleets.docs]\nproject = \"/tmp\"\ncommand = [\"x\"]\nbogus_key = 1\n", regexp.MustCompile(`fleets\.toml:\d+.*bogus_key`)},
		{"wrong type", "\n[fleets.docs]\nproject = \"/tmp\"\ncommand = [\"x\"]\nport = \"eighty\"\n", regexp.MustCompile(`fleets\.toml:\d+.*port`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(e.ConfigPath, append(append([]byte{}, base...), c.add...), 0o644); err != nil {
				t.Fatal(err)
			}
			r := e.Run("list")
			if r.Code == 0 {
				t.Fatalf("want non-zero exit, got 0:\n%s", r.Stdout)
			}
			if !c.want.MatchString(r.Stderr) {
				t.Fatalf("stderr does not match %s:\n%s", c.want, r.Stderr)
			}
		})
	}
}
