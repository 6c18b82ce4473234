package fleetd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// running is a Daemon served by a test.
type running struct {
	d    *Daemon
	url  string
	logs *syncbuf.Buffer
	stop func() error // cancels and waits for Run; idempotent
}

// startDaemon runs a Daemon on an ephemeral loopback port until the test
// ends.
func startDaemon(t *testing.T, cfg Config) *running {
	t.Helper()
	logs := &syncbuf.Buffer{}
	d, err := New(cfg, logs)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(10 * time.Second):
				runErr = fmt.Errorf("Run did not return")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	r := &running{d: d, url: "http://" + d.Addr().String(), logs: logs, stop: stop}
	wait.LogLine(t, 10*time.Second, logs.String, "listening on "+d.Addr().String())
	return r
}

// connect opens an MCP client session to url/mcp.
func connect(t *testing.T, url string, opts *mcp.ClientOptions, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "fleetd-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + MCPPath, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and decodes its structured content into out (if non-nil).
// It checks that the text content carries the same JSON object.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError || out == nil {
		return res
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items", name, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T", name, res.Content[0])
	}
	var a, b any
	if err := json.Unmarshal(sc, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(text.Text), &b); err != nil {
		t.Fatalf("%s: text content is not JSON: %q", name, text.Text)
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("%s: text %s differs from structured %s", name, text.Text, sc)
	}
	if m, ok := a.(map[string]any); !ok || m["fleet"] == nil {
		t.Fatalf("%s: result lacks \"fleet\": %s", name, sc)
	}
	if err := json.Unmarshal(sc, out); err != nil {
		t.Fatal(err)
	}
	return res
}

func errText(res *mcp.CallToolResult) string {
	if !res.IsError {
		return ""
	}
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// noHerdr is a config whose herdr socket does not exist.
func noHerdr(t *testing.T) Config {
	dir := t.TempDir()
	return Config{Name: "kb", HerdrSocket: filepath.Join(dir, "absent.sock"), LeadLaunch: true,
		EventsFile: filepath.Join(dir, "events")}
}

func TestHealthz(t *testing.T) {
	r := startDaemon(t, noHerdr(t))
	resp, err := http.Get(r.url + HealthPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var h struct{ Status, Name string }
	if err := json.Unmarshal(body, &h); err != nil || resp.StatusCode != 200 || h.Status != "ok" || h.Name != "kb" {
		t.Fatalf("healthz %d %s (%v)", resp.StatusCode, body, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	// Boot logged its herdr failures instead of dying.
	if !strings.Contains(r.logs.String(), "lead auto-launch failed") {
		t.Fatalf("no lead-launch failure logged:\n%s", r.logs)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if !strings.Contains(r.logs.String(), "stopped") {
		t.Fatal("no stop logged")
	}
	if _, err := http.Get(r.url + HealthPath); err == nil {
		t.Fatal("still serving after stop")
	}
}

func TestToolsAndPrimaryWithoutHerdr(t *testing.T) {
	r := startDaemon(t, noHerdr(t))
	cs := connect(t, r.url, nil, nil)
	init := cs.InitializeResult()
	if init == nil || init.Capabilities.Tools == nil || !init.Capabilities.Tools.ListChanged {
		t.Fatalf("tools listChanged not advertised: %+v", init)
	}
	ctx := context.Background()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"fleet_whoami", "fleet_list", "fleet_spawn", "fleet_status", "fleet_send", "fleet_stop", "fleet_slow", "fleet_add_tool"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}

	var who WhoamiResult
	call(t, cs, "fleet_whoami", nil, &who)
	if who.Role != RolePrimary || who.Fleet != "kb" || who.CallerPID != os.Getpid() || who.PaneID != "" {
		t.Fatalf("whoami %+v, want primary with caller_pid %d", who, os.Getpid())
	}

	var list ListResult
	call(t, cs, "fleet_list", nil, &list)
	if list.Fleet != "kb" || list.Members == nil || len(list.Members) != 0 {
		t.Fatalf("list %+v", list)
	}
	if e := errText(call(t, cs, "fleet_status", map[string]any{"id": "m9"}, nil)); !strings.HasPrefix(e, ErrAgentNotFound) {
		t.Fatalf("status of unknown member: %q", e)
	}
	if e := errText(call(t, cs, "fleet_send", map[string]any{"id": "m9", "text": "hi"}, nil)); !strings.HasPrefix(e, ErrAgentNotFound) {
		t.Fatalf("send to unknown member: %q", e)
	}
	if e := errText(call(t, cs, "fleet_stop", map[string]any{"id": "m9"}, nil)); !strings.HasPrefix(e, ErrAgentNotFound) {
		t.Fatalf("stop of unknown member by primary: %q", e)
	}
	if e := errText(call(t, cs, "fleet_spawn", nil, nil)); !strings.Contains(e, "worktree root") {
		t.Fatalf("spawn without worktree root: %q", e)
	}
}

// TestPeerHeadersCannotBeForged: a client that sends the daemon's internal
// peer headers still gets its real pid.
func TestPeerHeadersCannotBeForged(t *testing.T) {
	r := startDaemon(t, noHerdr(t))
	hc := &http.Client{Transport: forgeTransport{}}
	cs := connect(t, r.url, nil, hc)
	var who WhoamiResult
	call(t, cs, "fleet_whoami", nil, &who)
	if who.CallerPID != os.Getpid() {
		t.Fatalf("forged header accepted: %+v", who)
	}
}

type forgeTransport struct{}

func (forgeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(headerPeerPID, "1")
	return http.DefaultTransport.RoundTrip(r)
}

func TestAddToolNotifiesListChanged(t *testing.T) {
	r := startDaemon(t, noHerdr(t))
	changed := make(chan struct{}, 8)
	cs := connect(t, r.url, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}}, nil)
	var ack AckResult
	call(t, cs, "fleet_add_tool", map[string]any{"name": "extra_probe"}, &ack)
	if !ack.OK || ack.Tool != "extra_probe" {
		t.Fatalf("add_tool %+v", ack)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed")
	}
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "extra_probe" }) {
		t.Fatal("added tool not listed")
	}
	var got AckResult
	call(t, cs, "extra_probe", nil, &got)
	if got.Tool != "extra_probe" || got.Fleet != "kb" {
		t.Fatalf("added tool result %+v", got)
	}
	for _, bad := range []string{"extra_probe", "fleet_list", "bad name", ""} {
		if e := errText(call(t, cs, "fleet_add_tool", map[string]any{"name": bad}, nil)); !strings.HasPrefix(e, ErrInvalid) {
			t.Errorf("add_tool %q: %q", bad, e)
		}
	}
}

// TestAddToolWithInputSchema: a tool added with its own input schema is
// listed with it, validates its arguments against it (as the go-sdk's
// mcp.AddTool does) and echoes them; a schema the SDK cannot use is a tool
// error, and the name stays free.
func TestAddToolWithInputSchema(t *testing.T) {
	r := startDaemon(t, noHerdr(t))
	cs := connect(t, r.url, nil, nil)
	schema := map[string]any{"type": "object", "required": []any{"id"},
		"allOf": []any{map[string]any{"properties": map[string]any{"id": map[string]any{"type": "string"}}, "additionalProperties": false}}}
	var ack AckResult
	call(t, cs, "fleet_add_tool", map[string]any{"name": "strict", "input_schema": schema}, &ack)
	if !ack.OK || ack.Tool != "strict" {
		t.Fatalf("add_tool %+v", ack)
	}
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "strict" })
	if i < 0 {
		t.Fatal("added tool not listed")
	}
	if b, _ := json.Marshal(lt.Tools[i].InputSchema); !strings.Contains(string(b), `"additionalProperties":false`) {
		t.Fatalf("listed schema %s", b)
	}
	var echo EchoResult
	call(t, cs, "strict", map[string]any{"id": "m1"}, &echo)
	if echo.Tool != "strict" || echo.Args["id"] != "m1" || len(echo.Args) != 1 {
		t.Fatalf("echo %+v", echo)
	}
	for _, bad := range []map[string]any{{"id": "m1", "fleet": "kb"}, {"id": 3}, {}} {
		if e := errText(call(t, cs, "strict", bad, nil)); !strings.Contains(e, "validating") {
			t.Errorf("strict %v: %q, want a validation error", bad, e)
		}
	}
	if e := errText(call(t, cs, "fleet_add_tool", map[string]any{"name": "broken", "input_schema": map[string]any{"type": "string"}}, nil)); !strings.HasPrefix(e, ErrInvalid) {
		t.Errorf("add_tool with a non-object schema: %q", e)
	}
	call(t, cs, "fleet_add_tool", map[string]any{"name": "broken"}, &ack)
	if !ack.OK {
		t.Errorf("the name of a refused tool is not free again: %+v", ack)
	}
}

func TestSlowProgressAndCancel(t *testing.T) {
	cfg := noHerdr(t)
	r := startDaemon(t, cfg)
	var mu sync.Mutex
	var progress []float64
	running := make(chan struct{}) // closed by the first progress of the call cancelled below
	var runningOnce sync.Once
	cs := connect(t, r.url, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		switch req.Params.ProgressToken {
		case "tok-1":
			progress = append(progress, req.Params.Progress)
		case "tok-2":
			runningOnce.Do(func() { close(running) })
		}
	}}, nil)

	params := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"seconds": 0.3, "steps": 3}}
	params.SetProgressToken("tok-1")
	start := time.Now()
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("fleet_slow: %v %v", err, errText(res))
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("fleet_slow returned after %v", el)
	}
	var sr SlowResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sr); err != nil || !sr.Completed || sr.Fleet != "kb" {
		t.Fatalf("slow result %s", b)
	}
	wait.For(t, 10*time.Second, "3 progress notifications", wait.Bool(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(progress) == 3
	}))
	mu.Lock()
	if !slices.Equal(progress, []float64{1, 2, 3}) {
		t.Fatalf("progress %v", progress)
	}
	mu.Unlock()

	// Cancellation: the handler sees its context end and records it.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		// Steps of 10 ms: the first progress says the handler is running.
		p := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"seconds": 30, "steps": 3000}}
		p.SetProgressToken("tok-2")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	select {
	case <-running:
	case err := <-errc:
		t.Fatalf("fleet_slow ended before it was cancelled: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("fleet_slow sent no progress within 10s")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call succeeded")
	}
	wait.For(t, 10*time.Second, "cancel event", wait.Bool(func() bool {
		b, _ := os.ReadFile(cfg.EventsFile)
		return string(b) == "cancelled fleet_slow\n"
	}))
	if !strings.Contains(r.logs.String(), "cancelled fleet_slow") {
		t.Fatal("cancel not logged")
	}
	if e := errText(call(t, cs, "fleet_slow", map[string]any{"steps": 0}, nil)); !strings.HasPrefix(e, ErrInvalid) {
		t.Fatalf("steps 0: %q", e)
	}
}

// TestExecutionsCountedByRequestID: a tools/call whose _meta carries
// RequestIDMetaKey is counted and written to the events file once per
// execution, before the tool runs (a cancelled call was executed too);
// a call without it, or with an id that is not one token, is not.
func TestExecutionsCountedByRequestID(t *testing.T) {
	cfg := noHerdr(t)
	r := startDaemon(t, cfg)
	cs := connect(t, r.url, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	callWith := func(ctx context.Context, name, id string, args map[string]any) error {
		p := &mcp.CallToolParams{Name: name, Arguments: args}
		if id != "" {
			p.Meta = mcp.Meta{RequestIDMetaKey: id}
		}
		_, err := cs.CallTool(ctx, p)
		return err
	}
	for _, id := range []string{"r1", "r1", "r2", "", "two words"} {
		if err := callWith(ctx, "fleet_whoami", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A cancelled fleet_slow: executed once, its cancellation names the id.
	sctx, scancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- callWith(sctx, "fleet_slow", "s1", map[string]any{"seconds": 30, "steps": 3}) }()
	wait.For(t, 10*time.Second, "fleet_slow executing", wait.Bool(func() bool { return r.d.Executions("s1") == 1 }))
	scancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call succeeded")
	}
	wait.For(t, 10*time.Second, "cancel event", wait.Bool(func() bool {
		b, _ := os.ReadFile(cfg.EventsFile)
		return strings.Contains(string(b), "cancelled fleet_slow request-id=s1\n")
	}))
	for id, want := range map[string]int{"r1": 2, "r2": 1, "s1": 1, "two words": 0, "": 0} {
		if got := r.d.Executions(id); got != want {
			t.Errorf("Executions(%q) = %d, want %d", id, got, want)
		}
	}
	b, _ := os.ReadFile(cfg.EventsFile)
	want := "executed fleet_whoami request-id=r1\nexecuted fleet_whoami request-id=r1\nexecuted fleet_whoami request-id=r2\n" +
		"executed fleet_slow request-id=s1\ncancelled fleet_slow request-id=s1\n"
	if string(b) != want {
		t.Fatalf("events:\n%s\nwant:\n%s", b, want)
	}
}
