package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// toolsReport runs `fleetmgr tools [fleet] --json`.
func toolsReport(t *testing.T, e *harness.Env, fleet string) *proxy.ToolsReport {
	t.Helper()
	args := []string{"tools", "--json"}
	if fleet != "" {
		args = []string{"tools", fleet, "--json"}
	}
	r := e.MustRun(args...)
	var rep proxy.ToolsReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("fleetmgr tools --json: %v\n%s", err, r.Stdout)
	}
	return &rep
}

// toolState finds fleet's tool in rep.
func toolState(rep *proxy.ToolsReport, fleet, tool string) (proxy.ToolState, bool) {
	for _, f := range rep.Fleets {
		if f.Fleet != fleet {
			continue
		}
		for _, s := range f.Tools {
			if s.Name == tool {
				return s, true
			}
		}
	}
	return proxy.ToolState{}, false
}

// callErr calls tool and returns the JSON-RPC error's text ("" when the
// call succeeded).
func callErr(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err.Error()
	}
	if res.IsError {
		return "tool error: " + textOf(res)
	}
	return ""
}

// listed reports whether tools/list holds tool.
func listed(t *testing.T, cs *mcp.ClientSession, tool string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(res.Tools, func(x *mcp.Tool) bool { return x.Name == tool })
}

// TestToolsHiddenFromSession (issue 28 part 2), with a real go-sdk client
// on serve's HTTP mount:
//   - fleets.toml's tools.deny hides fleet_stop on kb: its fleet enum is
//     [docs] and a call on kb is refused with "fleet_stop is hidden on kb
//     by fleets.toml:LINE";
//   - `fleetmgr tools hide` takes a tool out at once (list_changed), a
//     tool hidden on every fleet is gone from tools/list and its call
//     still gets the reason, not "unknown tool"; an excluded tool's call
//     gets its reason the same way; `fleetmgr tools --json` says all this;
//   - the hide survives a serve restart; `tools show` shows a tool the
//     file hides; an edit of kb's rules in fleets.toml (reload) drops kb's
//     run-time overrides.
func TestToolsHiddenFromSession(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: `tools.deny = ["fleet_stop"]`}, harness.Fleet{Name: "docs"})
	src, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	denyLine := lineOfText(t, string(src), `tools.deny = ["fleet_stop"]`)
	e.MustRun("start", "kb")
	e.MustRun("start", "docs")
	serve := e.StartServe()
	top := t // the watchers live as long as the whole test
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"docs", "kb"}, false, 20*time.Second)
	w.waitTool(t, "fleet_stop", []string{"docs"}, false, 5*time.Second)

	want := fmt.Sprintf("fleet_stop is hidden on kb by fleets.toml:%d", denyLine)
	if msg := callErr(t, w.cs, "fleet_stop", map[string]any{"fleet": "kb", "id": "x"}); !strings.Contains(msg, want) {
		t.Fatalf("fleet_stop on kb: %q; want %q", msg, want)
	}
	rep := toolsReport(t, e, "kb")
	if s, _ := toolState(rep, "kb", "fleet_stop"); s.State != proxy.ToolHidden || !strings.Contains(s.Reason, fmt.Sprintf("fleets.toml:%d", denyLine)) {
		t.Errorf("tools kb: fleet_stop %+v", s)
	}
	if s, _ := toolState(rep, "kb", "fleet_whoami"); s.State != proxy.ToolShown {
		t.Errorf("tools kb: fleet_whoami %+v", s)
	}
	if _, ok := toolState(rep, "docs", "fleet_whoami"); ok {
		t.Error("tools kb reported docs")
	}

	t.Run("hide applies at once", func(t *testing.T) {
		w.drain()
		e.MustRun("tools", "hide", "kb", "fleet_whoami")
		w.waitTool(t, "fleet_whoami", []string{"docs"}, true, 10*time.Second)
		// Journalled as a control action with its origin (issue 28: "changes
		// it for the running serve (journalled …)").
		wait.For(t, 10*time.Second, "the hide in the journal", func() (bool, string) {
			var got []string
			for _, ev := range eventsJSON(t, e, "kb", "--kind", "control") {
				if ev.Detail == "tools hide fleet_whoami" && ev.Outcome == "ok" &&
					strings.Contains(ev.Origin, fmt.Sprintf("uid=%d", os.Getuid())) && strings.Contains(ev.Origin, "client fleetmgr-cli") {
					return true, ""
				}
				got = append(got, ev.Detail+" "+ev.Outcome+" by "+ev.Origin)
			}
			return false, strings.Join(got, "; ")
		})
		if msg := callErr(t, w.cs, "fleet_whoami", map[string]any{"fleet": "kb"}); !strings.Contains(msg, "fleet_whoami is hidden on kb by `fleetmgr tools hide`") {
			t.Fatalf("fleet_whoami on kb: %q", msg)
		}
		// Hidden on every fleet: gone from tools/list, and still explained.
		w.drain()
		e.MustRun("tools", "hide", "kb", "fleet_send")
		e.MustRun("tools", "hide", "docs", "fleet_send")
		wait.For(t, 10*time.Second, "fleet_send gone from tools/list", wait.Bool(func() bool { return !listed(t, w.cs, "fleet_send") }))
		msg := callErr(t, w.cs, "fleet_send", map[string]any{"fleet": "docs", "id": "x", "text": "hi"})
		if !strings.Contains(msg, "fleet_send is hidden on docs by `fleetmgr tools hide`") || strings.Contains(msg, "unknown tool") {
			t.Fatalf("fleet_send on docs: %q", msg)
		}
	})

	t.Run("excluded tool gives its reason", func(t *testing.T) {
		schema := map[string]any{"type": "object", "properties": map[string]any{"fleet": map[string]any{"type": "string"}}}
		if res := call(t, w.cs, "fleet_add_tool", map[string]any{"fleet": "kb", "name": "own_fleet_arg", "input_schema": schema}); res.IsError {
			t.Fatalf("fleet_add_tool: %s", textOf(res))
		}
		var s proxy.ToolState
		wait.For(t, 10*time.Second, "own_fleet_arg excluded", func() (bool, string) {
			s, _ = toolState(toolsReport(t, e, "kb"), "kb", "own_fleet_arg")
			return s.State == proxy.ToolExcluded, fmt.Sprintf("%+v", s)
		})
		msg := callErr(t, w.cs, "own_fleet_arg", map[string]any{"fleet": "kb"})
		if !strings.Contains(msg, "own_fleet_arg is not exposed on kb: "+s.Reason) {
			t.Fatalf("own_fleet_arg on kb: %q (reason %q)", msg, s.Reason)
		}
		if r := e.Run("tools", "show", "kb", "own_fleet_arg"); r.Code == 0 || !strings.Contains(r.Stderr, "does not expose it") {
			t.Fatalf("tools show of an excluded tool: exit %d\n%s", r.Code, r.Stderr)
		}
	})

	t.Run("hide survives a serve restart", func(t *testing.T) {
		if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !svWait(15*time.Second, func() bool { return svReaped(serve.Cmd.Process.Pid) }) {
			t.Fatal("serve did not stop")
		}
		e.StartServe()
		w2 := connectWatcher(top, e.URL())
		w2.waitTool(t, "fleet_list", []string{"docs", "kb"}, false, 20*time.Second)
		w2.waitTool(t, "fleet_whoami", []string{"docs"}, false, 5*time.Second)
		if listed(t, w2.cs, "fleet_send") {
			t.Fatal("fleet_send listed after the restart")
		}
		w = w2
	})

	t.Run("show what the file hides", func(t *testing.T) {
		w.drain()
		e.MustRun("tools", "show", "kb", "fleet_stop")
		w.waitTool(t, "fleet_stop", []string{"docs", "kb"}, true, 10*time.Second)
		s, _ := toolState(toolsReport(t, e, "kb"), "kb", "fleet_stop")
		if s.State != proxy.ToolShown || !strings.Contains(s.Reason, "fleetmgr tools show") {
			t.Fatalf("fleet_stop after show: %+v", s)
		}
	})

	t.Run("the file's new rules win", func(t *testing.T) {
		b := strings.Replace(string(src), `tools.deny = ["fleet_stop"]`, `tools.deny = ["fleet_stop", "fleet_spawn"]`, 1)
		if err := os.WriteFile(e.ConfigPath, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		w.drain()
		e.MustRun("reload")
		w.waitTool(t, "fleet_spawn", []string{"docs"}, true, 10*time.Second)
		w.waitTool(t, "fleet_whoami", []string{"docs", "kb"}, false, 10*time.Second) // kb's hide is void
		w.waitTool(t, "fleet_stop", []string{"docs"}, false, 10*time.Second)         // and so is its show
		// kb's hide of fleet_send is void too; docs' stays (docs' rules did
		// not change).
		w.waitTool(t, "fleet_send", []string{"kb"}, false, 10*time.Second)
	})
}

// lineOfText is the 1-based line of the first occurrence of marker in s.
func lineOfText(t *testing.T, s, marker string) int {
	t.Helper()
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("%q not in the text", marker)
	}
	return strings.Count(s[:i], "\n") + 1
}

// TestToolsRemoteNarrowOnly (issue 28 part 2, federation): the host that
// owns a fleet applies its rules; the calling host may narrow them, never
// widen. beta's [manager] tools.deny hides fleet_stop on its fleet docs:
//   - alpha's go-sdk client sees fleet_stop on kb only, and a call of it
//     on docs@beta is refused with why (beta's rules), not "unknown tool";
//   - `fleetmgr tools show docs@beta fleet_stop` on alpha is refused and
//     changes nothing;
//   - alpha can narrow: `tools hide docs@beta fleet_whoami` takes docs@beta
//     out of fleet_whoami's enum (list_changed), and `tools show` puts it
//     back;
//   - beta's own `tools show docs fleet_stop` makes it reach alpha.
func TestToolsRemoteNarrowOnly(t *testing.T) { brokertest.Each(t, testToolsRemoteNarrowOnly) }

func testToolsRemoteNarrowOnly(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}, betaManager: `tools.deny = ["fleet_stop"]`})
	docs := peerview.RemoteName("docs", p.beta.host)
	both := sortedNames(docs, "kb")
	w := connectWatcher(t, p.alpha.URL())
	w.waitTool(t, "fleet_whoami", both, false, 30*time.Second)
	w.waitTool(t, "fleet_stop", []string{"kb"}, false, 5*time.Second)

	msg := callErr(t, w.cs, "fleet_stop", map[string]any{"fleet": docs, "id": "x"})
	if !strings.Contains(msg, "fleet_stop is not offered by "+docs+": host "+p.beta.host+" hides it") {
		t.Fatalf("fleet_stop on %s: %q", docs, msg)
	}
	r := p.alpha.Run("tools", "show", docs, "fleet_stop")
	if r.Code == 0 || !strings.Contains(r.Stderr, "only host "+p.beta.host+" can show it") {
		t.Fatalf("tools show %s fleet_stop on alpha: exit %d\n%s%s", docs, r.Code, r.Stdout, r.Stderr)
	}
	w.waitTool(t, "fleet_stop", []string{"kb"}, false, 5*time.Second)

	w.drain()
	p.alpha.MustRun("tools", "hide", docs, "fleet_whoami")
	w.waitTool(t, "fleet_whoami", []string{"kb"}, true, 10*time.Second)
	if msg := callErr(t, w.cs, "fleet_whoami", map[string]any{"fleet": docs}); !strings.Contains(msg, "fleet_whoami is hidden on "+docs+" by `fleetmgr tools hide`") {
		t.Fatalf("fleet_whoami on %s: %q", docs, msg)
	}
	w.drain()
	p.alpha.MustRun("tools", "show", docs, "fleet_whoami")
	w.waitTool(t, "fleet_whoami", both, true, 10*time.Second)

	// The owner shows it: its catalogue (and hash) change, alpha fetches it.
	p.beta.MustRun("tools", "show", "docs", "fleet_stop")
	w.waitTool(t, "fleet_stop", both, false, 30*time.Second)
}

// TestToolsHideWithoutServeJournalled (issue 25): a `tools hide`
// made while no serve runs is journalled by the CLI itself (it opens the
// journal, which no serve holds), with its uid, pid and client, and the
// next serve still lists it in `events`; while another process holds the
// file (bbolt's lock) the change is recorded and the CLI says it was not
// journalled, exit 0.
func TestToolsHideWithoutServeJournalled(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	r := e.MustRun("tools", "hide", "kb", "fleet_whoami")
	if !strings.Contains(r.Stderr, "no fleetmgr serve runs, the next one applies it") || strings.Contains(r.Stderr, "not journalled") {
		t.Fatalf("tools hide without serve: %s", r.Stderr)
	}
	found := func(ev []journal.Event, detail string) bool {
		return slices.ContainsFunc(ev, func(e journal.Event) bool {
			return e.Detail == detail && e.Outcome == "ok" && e.Kind == journal.KindControl &&
				strings.Contains(e.Origin, fmt.Sprintf("cli uid=%d pid=", os.Getuid())) && strings.Contains(e.Origin, "client fleetmgr-cli")
		})
	}
	if ev := eventsJSON(t, e, "kb", "--kind", "control"); !found(ev, "tools hide fleet_whoami") {
		t.Fatalf("the hide made without serve is not in the journal: %+v", ev)
	}

	// Another process holds the journal (as a starting serve would).
	j, err := journal.Open(journal.Options{Path: filepath.Join(e.StateDir, "journal.db")})
	if err != nil {
		t.Fatal(err)
	}
	r = e.MustRun("tools", "hide", "kb", "fleet_send")
	j.Close()
	if !strings.Contains(r.Stderr, "the next one applies it (not journalled:") || !strings.Contains(r.Stderr, "held by another process") {
		t.Fatalf("tools hide while the journal is held: %s", r.Stderr)
	}

	e.StartServe()
	wait.For(t, 20*time.Second, "the hide in the new serve's events", func() (bool, string) {
		ev := eventsJSON(t, e, "kb", "--kind", "control")
		return found(ev, "tools hide fleet_whoami"), fmt.Sprintf("%+v", ev)
	})
}
