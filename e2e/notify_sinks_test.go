//lint:file-ignore SA1019 the test reads the mcp sink's notifications/message as an operator's client does (see daemon mcpNotify); MCP logging is deprecated (SEP-2577) but still served

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/sharedref"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// shownNote is one notification.show exchange the operator's herdr
// stand-in recorded (STANDIN_HERDR_NOTIFICATIONS).
type shownNote struct {
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
}

func readNotes(t *testing.T, path string) []shownNote {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []shownNote
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var n shownNote
		if err := json.Unmarshal(sc.Bytes(), &n); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		out = append(out, n)
	}
	return out
}

// TestNotifyHerdrAndMCPSinks (issue 25): the herdr sink raises
// notification.show in the operator's own herdr session ([guard]
// operator_sessions; the stand-in records each request and its answer,
// both checked against herdr's schema), and the mcp sink sends
// notifications/message to a connected go-sdk client session that asked
// for log messages (logging/setLevel), after a member is made BLOCKED (the
// herdr stand-in's status escape) and the hold passes: once firing, once
// resolved, to each. A session that set no level gets nothing (the go-sdk
// sends it none) and is not counted as delivered: with only such sessions,
// `notify test` says the mcp sink failed.
func TestNotifyHerdrAndMCPSinks(t *testing.T) {
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"500ms\"\n\n[guard]\noperator_sessions = [\"ops\"]\n", harness.Fleet{Name: "kb"})
	f, err := os.OpenFile(e.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`
[[notify]]
name = "blocked"
on = ["member.blocked"]
fleets = ["kb"]
hold = "2s"

[[notify.sinks]]
type = "herdr"

[[notify.sinks]]
type = "mcp"
`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	notes := filepath.Join(e.Dir, "ops-notifications.jsonl")
	saved := e.Environ
	e.Environ = append(slices.Clone(saved), "STANDIN_HERDR_NOTIFICATIONS="+notes)
	e.StartHerdr("ops") // the operator's own herdr session
	e.Environ = saved

	serve := e.StartServe()
	e.MustRun("start", "kb")

	var mu sync.Mutex
	var msgs []map[string]any
	cl := mcp.NewClient(&mcp.Implementation{Name: "operator", Version: "test"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			var m map[string]any
			b, _ := json.Marshal(r.Params.Data)
			_ = json.Unmarshal(b, &m)
			if r.Params.Logger == "fleetmgr.notify" && r.Params.Level == "warning" {
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.URL(), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	var quietMu sync.Mutex
	quiet := 0 // messages to a session that set no level
	qc := mcp.NewClient(&mcp.Implementation{Name: "quiet", Version: "test"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) { quietMu.Lock(); quiet++; quietMu.Unlock() },
	})
	qs, err := qc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.URL(), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qs.Close() })
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var s []string
		for _, m := range msgs {
			s = append(s, fmt.Sprint(m["state"], " ", m["member"]))
		}
		return s
	}

	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "asker", "command": `printf '\033]777;herdr-status;blocked\007'; sleep 6; printf '\033]777;herdr-status;working\007'; sleep 600`}, nil)
	t0 := time.Now()
	wait.For(t, 30*time.Second, "the firing in the herdr session and the MCP session", func() (bool, string) {
		n := readNotes(t, notes)
		return len(n) >= 1 && len(got()) >= 1, fmt.Sprintf("herdr %d, mcp %v; log:\n%s", len(n), got(), serve.Log())
	})
	if held := time.Since(t0); held < 2*time.Second {
		t.Errorf("notified %s after the member blocked, before the 2s hold", held)
	}
	wait.For(t, 30*time.Second, "the resolution in both", func() (bool, string) {
		n := readNotes(t, notes)
		return len(n) >= 2 && len(got()) >= 2, fmt.Sprintf("herdr %d, mcp %v", len(n), got())
	})
	wait.Never(t, 2*time.Second, "a third notification", func() (bool, string) {
		n := readNotes(t, notes)
		return len(n) != 2 || len(got()) != 2, fmt.Sprintf("herdr %d, mcp %v", len(n), got())
	})
	if g := got(); g[0] != "firing asker" || g[1] != "resolved asker" {
		t.Errorf("mcp notifications/message: %v", g)
	}
	quietMu.Lock()
	if quiet != 0 {
		t.Errorf("a session that set no log level got %d messages", quiet)
	}
	quietMu.Unlock()

	// herdr: what was asked and answered, against herdr's schema.
	var req, ok *jsonschema.Schema
	if path, err := sharedref.Path(".", sharedref.HerdrSchema); err != nil {
		t.Logf("herdr's schema not checked: %v", err)
	} else {
		c := jsonschema.NewCompiler()
		if req, err = c.Compile(path + "#/schemas/request"); err != nil {
			t.Fatal(err)
		}
		if ok, err = c.Compile(path + "#/schemas/success_response"); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range readNotes(t, notes) {
		for _, v := range []struct {
			sch  *jsonschema.Schema
			what string
			raw  json.RawMessage
		}{{req, "request", n.Request}, {ok, "response", n.Response}} {
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v.raw))
			if err != nil {
				t.Fatalf("note %d %s: %v", i, v.what, err)
			}
			if v.sch != nil {
				if err := v.sch.Validate(inst); err != nil {
					t.Errorf("note %d: the %s violates herdr's schema: %v\n%s", i, v.what, err, v.raw)
				}
			}
		}
		var r struct {
			Params struct{ Title, Body string } `json:"params"`
		}
		_ = json.Unmarshal(n.Request, &r)
		want := []string{"asker", "resolved"}[i]
		if !strings.Contains(r.Params.Title, "member.blocked") || !strings.Contains(r.Params.Body, want) {
			t.Errorf("note %d: title %q body %q; want the member.blocked kind and %q", i, r.Params.Title, r.Params.Body, want)
		}
	}
	// The journal has each delivery as sent: two sinks, two notifications.
	wait.For(t, 10*time.Second, "4 notify attempts sent in the journal", func() (bool, string) {
		sent := map[string]int{}
		for _, ev := range eventsJSON(t, e, "--kind", "notify") {
			if ev.Outcome == "sent" {
				sent[fmt.Sprint(ev.Data["sink"])]++
			}
		}
		return sent["herdr#0"] == 2 && sent["mcp#1"] == 2, fmt.Sprint(sent)
	})
	// Then, with the operator's session gone, only sessions that asked for no
	// log messages remain (the quiet one, and `notify test`'s own CLI
	// session): the mcp sink says it reached nobody, not "ok".
	cs.Close()
	r := e.Run("notify", "test", "blocked")
	if r.Code != 1 || !strings.Contains(r.Stdout, "blocked mcp#1: FAILED: mcp sink: no connected MCP session takes log messages") ||
		!strings.Contains(r.Stdout, "blocked herdr#0: ok") {
		t.Errorf("notify test with no session asking for log messages: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
