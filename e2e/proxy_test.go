package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// watcher is a Go SDK client that records tools/list_changed and progress
// notifications it receives.
type watcher struct {
	cs       *mcp.ClientSession
	changed  chan struct{}
	mu       sync.Mutex
	progress map[any][]*mcp.ProgressNotificationParams
}

func connectWatcher(t *testing.T, url string) *watcher {
	t.Helper()
	w := &watcher{changed: make(chan struct{}, 64), progress: map[any][]*mcp.ProgressNotificationParams{}}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-watcher", Version: "test"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case w.changed <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.progress[r.Params.ProgressToken] = append(w.progress[r.Params.ProgressToken], r.Params)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	w.cs = cs
	return w
}

func (w *watcher) drain() {
	for {
		select {
		case <-w.changed:
		default:
			return
		}
	}
}

func (w *watcher) progressFor(tok any) []*mcp.ProgressNotificationParams {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.progress[tok])
}

// waitTool waits (up to d, receiving tools/list_changed on the way when
// wantNotify) until tools/list shows tool name offered by exactly fleets.
func (w *watcher) waitTool(t *testing.T, name string, fleets []string, wantNotify bool, d time.Duration) {
	t.Helper()
	t0 := time.Now()
	if wantNotify {
		select {
		case <-w.changed:
		case <-time.After(d):
			t.Fatalf("no notifications/tools/list_changed within %s (waiting for %s on %v)", d, name, fleets)
		}
	}
	wait.For(t, max(d-time.Since(t0), 0), fmt.Sprintf("tool %s offered by %v", name, fleets), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := w.cs.ListTools(ctx, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var last []string
		for _, tool := range res.Tools {
			if tool.Name == name {
				if last = fleetEnum(t, tool); slices.Equal(last, fleets) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("fleet enum %v", last)
	})
}

func fleetEnum(t *testing.T, tool *mcp.Tool) []string {
	t.Helper()
	b, _ := json.Marshal(tool.InputSchema)
	var s struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.Properties["fleet"].Enum
}

// waitCancelled waits up to 5 s for the stand-in's event log to record one
// more "cancelled fleet_slow" than before, else fails with msg.
func waitCancelled(t *testing.T, events string, before int, msg string) {
	t.Helper()
	wait.For(t, 5*time.Second, msg+" (waiting for it)", wait.Bool(func() bool { return countEvent(events, "cancelled fleet_slow") > before }))
}

// proxyMetric is the value of one series (name{labels}) on e's /metrics,
// 0 when it is absent.
func proxyMetric(t *testing.T, e *harness.Env, series string) float64 {
	t.Helper()
	for l := range strings.Lines(remoteMetricsText(t, e)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %q: %v", l, err)
			}
			return f
		}
	}
	return 0
}

// waitMetricStep waits for series on e's /metrics to be exactly before+1:
// one call counted once.
func waitMetricStep(t *testing.T, e *harness.Env, series string, before float64) {
	t.Helper()
	wait.For(t, 5*time.Second, series+" one more than before", func() (bool, string) {
		v := proxyMetric(t, e, series)
		return v == before+1, fmt.Sprintf("%v, was %v", v, before)
	})
}

func countEvent(path, line string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), line)
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// TestProxyOperatorFeatures: the proxy's own features:
// list changes reach clients, progress and cancellation cross the proxy, a
// timeout fails one call only, a restarted fleetd is re-joined on the same
// client session, and a stopped fleet stays listed with a helpful error.
func TestProxyOperatorFeatures(t *testing.T) {
	e := harness.NewEnv(t, bins, `pass_env = ["STANDIN_FLEETD_EVENTS"]`, harness.Fleet{Name: "kb", Extra: `call_timeout = "2s"`}, harness.Fleet{Name: "docs"})
	events := filepath.Join(e.Dir, "events")
	// The stand-in records "cancelled fleet_slow" in $STANDIN_FLEETD_EVENTS,
	// which [manager] pass_env hands on from fleetmgr's environment.
	e.Environ = append(e.Environ, "STANDIN_FLEETD_EVENTS="+events)
	e.MustRun("start", "kb")
	e.StartServe()
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"kb"}, false, 15*time.Second)

	t.Run("fleet start updates enums", func(t *testing.T) {
		w.drain()
		e.MustRun("start", "docs") // from another process: the refresh loop notices
		w.waitTool(t, "fleet_whoami", []string{"docs", "kb"}, true, 15*time.Second)
	})

	t.Run("upstream list_changed reaches clients", func(t *testing.T) {
		w.drain()
		res := call(t, w.cs, "fleet_add_tool", map[string]any{"fleet": "kb", "name": "probe_added"})
		if res.IsError {
			t.Fatalf("fleet_add_tool: %s", textOf(res))
		}
		w.waitTool(t, "probe_added", []string{"kb"}, true, 10*time.Second)
		res = call(t, w.cs, "probe_added", map[string]any{"fleet": "kb"})
		if res.IsError || !strings.Contains(textOf(res), `"tool":"probe_added"`) {
			t.Fatalf("probe_added: %s", textOf(res))
		}
	})

	cancelled := `fleetmgr_tool_calls_total{fleet="docs",outcome="cancelled",tool="fleet_slow"}`

	t.Run("progress is relayed with the caller's token", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": "kb", "seconds": 0.6, "steps": 3}}
		p.SetProgressToken("e2e-progress-1")
		res, err := w.cs.CallTool(ctx, p)
		if err != nil || res.IsError {
			t.Fatalf("fleet_slow: %v %v", err, res)
		}
		wait.For(t, 5*time.Second, "3 progress notifications for our token", func() (bool, string) {
			return len(w.progressFor("e2e-progress-1")) >= 3, fmt.Sprintf("%d", len(w.progressFor("e2e-progress-1")))
		})
		got := w.progressFor("e2e-progress-1")
		if len(got) != 3 {
			t.Fatalf("got %d progress notifications for our token, want 3", len(got))
		}
		for i, n := range got {
			if n.Progress != float64(i+1) || n.Total != 3 || !strings.Contains(n.Message, "step") {
				t.Errorf("progress %d: %+v", i, n)
			}
		}
	})

	t.Run("caller cancellation reaches the upstream", func(t *testing.T) {
		before, counted := countEvent(events, "cancelled fleet_slow"), proxyMetric(t, e, cancelled)
		ctx, cancel := context.WithCancel(context.Background())
		p := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": "docs", "seconds": 30, "steps": 30}}
		p.SetProgressToken("e2e-cancel")
		done := make(chan error, 1)
		go func() { _, err := w.cs.CallTool(ctx, p); done <- err }()
		wait.For(t, 10*time.Second, "the slow call's first progress", wait.Bool(func() bool { return len(w.progressFor("e2e-cancel")) > 0 }))
		cancel()
		if err := <-done; err == nil {
			t.Fatal("cancelled call returned no error")
		}
		waitCancelled(t, events, before, "the stand-in did not record the cancellation")
		waitMetricStep(t, e, cancelled, counted)
	})

	t.Run("notifications/cancelled on a separate POST cancels the call", func(t *testing.T) {
		skipWithoutFastPath(t, "the go-sdk answers the cancelled call with an error response (code 0, \"context canceled\") where MCP says none is due")
		before, counted := countEvent(events, "cancelled fleet_slow"), proxyMetric(t, e, cancelled)
		post := func(ctx context.Context, body string) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL(), strings.NewReader(body))
			req.Header.Set("Mcp-Session-Id", w.cs.ID())
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", w.cs.InitializeResult().ProtocolVersion)
			return http.DefaultClient.Do(req)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := post(ctx, `{"jsonrpc":"2.0","id":"raw-1","method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"docs","seconds":30,"steps":30},"_meta":{"progressToken":"raw-tok"}}}`)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
			t.Fatalf("tools/call with a progress token: %s %s", resp.Status, ct)
		}
		first := make([]byte, 512)
		n, err := resp.Body.Read(first) // the first progress event
		if err != nil || !strings.Contains(string(first[:n]), `"progressToken":"raw-tok"`) {
			t.Fatalf("first event: %q %v", first[:n], err)
		}
		cr, err := post(ctx, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"raw-1","reason":"test"}}`)
		if err != nil {
			t.Fatal(err)
		}
		cr.Body.Close()
		if cr.StatusCode != http.StatusAccepted {
			t.Fatalf("notifications/cancelled: %s", cr.Status)
		}
		rest, _ := io.ReadAll(resp.Body) // ends without a response
		if strings.Contains(string(rest), `"id":"raw-1"`) {
			t.Errorf("a cancelled call was answered: %s", rest)
		}
		waitCancelled(t, events, before, "the stand-in did not record the cancellation")
		waitMetricStep(t, e, cancelled, counted)
	})

	t.Run("unix socket mount: progress and cancellation", func(t *testing.T) {
		conn, err := net.Dial("unix", filepath.Join(e.StateDir, "fleetmgr.sock"))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []float64
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-socket", Version: "test"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, r.Params.Progress)
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		p := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": "docs", "seconds": 0.4, "steps": 2}}
		p.SetProgressToken("sock-1")
		res, err := cs.CallTool(ctx, p)
		if err != nil || res.IsError || !strings.Contains(textOf(res), `"completed":true`) {
			t.Fatalf("fleet_slow over the socket: %v %v", err, res)
		}
		// The Go client hands notifications to their handler
		// asynchronously, so the last one may be handled just after
		// CallTool returned.
		progress := func() []float64 {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(seen)
		}
		_ = wait.Until(ctx, 3*time.Second, wait.Bool(func() bool { return len(progress()) >= 2 })) // a shortfall is reported next
		if got := progress(); !slices.Equal(got, []float64{1, 2}) {
			t.Fatalf("progress over the socket: %v, want [1 2]", got)
		}

		before, counted := countEvent(events, "cancelled fleet_slow"), proxyMetric(t, e, cancelled)
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			// Steps of 100 ms: the first progress says the call is running upstream.
			p := &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": "docs", "seconds": 30, "steps": 300}}
			p.SetProgressToken("sock-2")
			_, err := cs.CallTool(cctx, p)
			done <- err
		}()
		wait.For(t, 10*time.Second, "the cancelled call's first progress", wait.Bool(func() bool { return len(progress()) > 2 }))
		ccancel()
		if err := <-done; err == nil {
			t.Fatal("cancelled call returned no error")
		}
		waitCancelled(t, events, before, "the stand-in did not record the cancellation sent over the socket")
		waitMetricStep(t, e, cancelled, counted)
		if res := call(t, cs, "fleet_whoami", map[string]any{"fleet": "docs"}); res.IsError {
			t.Fatalf("the socket session after a cancellation: %s", textOf(res))
		}
	})

	t.Run("a timeout fails that call only", func(t *testing.T) {
		timeouts := `fleetmgr_tool_calls_total{fleet="kb",outcome="timeout",tool="fleet_slow"}`
		before, counted := countEvent(events, "cancelled fleet_slow"), proxyMetric(t, e, timeouts)
		type out struct {
			res *mcp.CallToolResult
			err error
		}
		slow := make(chan out, 1)
		t0 := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := w.cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_slow", Arguments: map[string]any{"fleet": "kb", "seconds": 10, "steps": 10}})
			slow <- out{res, err}
		}()
		// While the slow call is pending, other kb calls keep working.
		var ok atomic.Int32
		for time.Since(t0) < 1500*time.Millisecond {
			if res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": "kb"}); !res.IsError {
				ok.Add(1)
			}
			time.Sleep(100 * time.Millisecond) // pacing: calls spread over the slow call's first 1.5 s
		}
		o := <-slow
		if o.err != nil {
			t.Fatalf("timed-out call: protocol error %v, want a tool error", o.err)
		}
		if el := time.Since(t0); el > 6*time.Second {
			t.Errorf("call_timeout 2s took %s", el)
		}
		if !o.res.IsError || !strings.Contains(textOf(o.res), "call_timeout") || !strings.Contains(textOf(o.res), "kb") {
			t.Fatalf("timed-out call: %s", textOf(o.res))
		}
		if ok.Load() == 0 {
			t.Fatal("no fleet_whoami on kb succeeded while the slow call was pending")
		}
		if res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": "kb"}); res.IsError {
			t.Fatalf("kb after the timeout: %s", textOf(res))
		}
		// The timed-out upstream call was cancelled, not left running.
		waitCancelled(t, events, before, "the timed-out call was not cancelled upstream")
		waitMetricStep(t, e, timeouts, counted)
	})

	t.Run("fleetd killed and restarted: same client session recovers", func(t *testing.T) {
		old := readState(t, e, "kb").Fleetd.PID
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Wait for the supervisor to restart it; without one
		// (or if it is slow), restart it by hand like an operator would.
		_ = wait.Until(context.Background(), 4*time.Second, wait.Bool(func() bool {
			st := readState(t, e, "kb")
			return st.Fleetd != nil && st.Fleetd.PID != old && healthy(e.Ports["kb"])
		}))
		if !healthy(e.Ports["kb"]) {
			e.MustRun("start", "kb")
		}
		if st := readState(t, e, "kb"); st.Fleetd == nil || st.Fleetd.PID == old {
			t.Fatalf("kb fleetd not restarted: %+v", st.Fleetd)
		}
		res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": "kb"})
		if res.IsError || !strings.Contains(textOf(res), `"fleet":"kb"`) {
			t.Fatalf("fleet_whoami after restart, same client session: %s", textOf(res))
		}
		// The new fleetd has only its built-in tools: the runtime-added
		// probe_added is re-listed away even though kb's phase looked
		// "running" at every poll (same phase, another process).
		wait.For(t, 10*time.Second, "probe_added gone from the list once kb's fleetd was replaced by one without it", wait.Bool(func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			tools, err := w.cs.ListTools(ctx, nil)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			return !slices.ContainsFunc(tools.Tools, func(x *mcp.Tool) bool { return x.Name == "probe_added" })
		}))
	})

	t.Run("a stopped fleet stays listed and says how to start it", func(t *testing.T) {
		down, invalid := `fleetmgr_tool_calls_total{fleet="kb",outcome="fleet_down",tool="fleet_whoami"}`, `fleetmgr_tool_calls_total{fleet="-",outcome="invalid_params",tool="fleet_whoami"}`
		downs, invalids := proxyMetric(t, e, down), proxyMetric(t, e, invalid)
		e.MustRun("stop", "kb")
		// Enums keep kb (from the cached catalogue) once the refresh ran.
		// A sleep past one RefreshEvery (2 s): a refresh that changes
		// nothing leaves no trace a test can wait for.
		time.Sleep(2500 * time.Millisecond)
		w.waitTool(t, "fleet_whoami", []string{"docs", "kb"}, false, 5*time.Second)
		res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": "kb"})
		txt := textOf(res)
		if !res.IsError || !strings.Contains(txt, "fleet kb is stopped") || !strings.Contains(txt, "fleetmgr start kb") {
			t.Fatalf("call to stopped kb: isError=%v %s", res.IsError, txt)
		}
		if res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": "docs"}); res.IsError {
			t.Fatalf("docs while kb is stopped: %s", textOf(res))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := w.cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": "nope"}})
		var je *jsonrpc.Error
		if err == nil || !strings.Contains(err.Error(), "valid fleets: docs, kb") || !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
			t.Fatalf("unknown fleet: want invalid params listing docs, kb; got %v", err)
		}
		waitMetricStep(t, e, down, downs)
		waitMetricStep(t, e, invalid, invalids)
	})

	// Each outcome counter is checked by the subtest that makes the call;
	// this one makes its own calls and reads the fleets' phases itself, so
	// it holds run alone (-run .../metrics) or after the others.
	t.Run("metrics", func(t *testing.T) {
		var want []string
		var running []string
		for _, name := range []string{"kb", "docs"} {
			st := listRow(t, e, name).State
			want = append(want, fmt.Sprintf(`fleetmgr_fleet_phase{fleet=%q,phase=%q} 1`, name, st), fmt.Sprintf(`fleetmgr_fleet_restarts{fleet=%q}`, name))
			if st == lifecycle.PhaseRunning {
				running = append(running, name)
			}
		}
		if len(running) == 0 {
			t.Fatal("neither kb nor docs runs: nothing to call")
		}
		for _, name := range running {
			ok := fmt.Sprintf(`fleetmgr_tool_calls_total{fleet=%q,outcome="ok",tool="fleet_whoami"}`, name)
			before := proxyMetric(t, e, ok)
			if res := call(t, w.cs, "fleet_whoami", map[string]any{"fleet": name}); res.IsError {
				t.Fatalf("fleet_whoami on %s: %s", name, textOf(res))
			}
			waitMetricStep(t, e, ok, before)
			want = append(want, fmt.Sprintf(`fleetmgr_tool_call_duration_seconds_bucket{fleet=%q,le="+Inf"}`, name), fmt.Sprintf(`fleetmgr_upstream_connected{fleet=%q} 1`, name))
		}
		invalid := `fleetmgr_tool_calls_total{fleet="-",outcome="invalid_params",tool="fleet_whoami"}`
		before := proxyMetric(t, e, invalid)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := w.cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": "nope"}}); err == nil {
			t.Fatal("fleet_whoami on an unknown fleet succeeded")
		}
		waitMetricStep(t, e, invalid, before)

		resp, err := http.Get("http://" + e.Listen + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		if resp.StatusCode != 200 {
			t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
		}
		for _, want := range append(want, `fleetmgr_guard_served_total`) {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", body)
		}
	})
}

func healthy(port int) bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// TestCheckReportsDrift: two fleets whose cached catalogues publish one
// tool with different schemas → `fleetmgr check` warns, per fleet, and
// fleetmgr_status (and `fleetmgr status`) name the drift of each.
func TestCheckReportsDrift(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	for name, schema := range map[string]string{
		"kb":   `{"type":"object","properties":{"id":{"type":"string"},"depth":{"type":"integer"}},"required":["id","depth"]}`,
		"docs": `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`,
	} {
		dir := filepath.Join(e.StateDir, "fleets", name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		cat := `[{"name":"fleet_status","inputSchema":` + schema + `},{"name":"fleet_list","inputSchema":{"type":"object"}}]`
		if err := os.WriteFile(filepath.Join(dir, "catalogue.json"), []byte(cat), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := e.Run("check", "--json")
	var rep struct {
		Findings []struct{ Check, Severity, Subject, Message string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("check --json: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	var got []string
	for _, f := range rep.Findings {
		if f.Check == "catalogue" {
			got = append(got, f.Severity+" "+f.Subject+": "+f.Message)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "warning tool fleet_status: fleets docs, kb") ||
		!strings.Contains(got[0], "docs lacks properties depth (offered by kb)") || !strings.Contains(got[0], "kb also requires depth") {
		t.Fatalf("catalogue findings: %q", got)
	}

	// fleetmgr_status names it too: the daemon's catalogue holds the
	// stopped fleets' cached tools.
	e.StartServe()
	cs := connect(t, e.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_status", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_status: %v %+v", err, res)
	}
	var sr struct {
		Fleets []struct {
			Name        string
			SchemaDrift []string `json:"schema_drift"`
		}
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sr); err != nil {
		t.Fatal(err)
	}
	drift := map[string]string{}
	for _, f := range sr.Fleets {
		drift[f.Name] = strings.Join(f.SchemaDrift, "\n")
	}
	if !strings.HasPrefix(drift["docs"], "fleet_status: lacks properties depth (offered by kb)") ||
		!strings.HasPrefix(drift["kb"], "fleet_status: ") || !strings.Contains(drift["kb"], "also requires depth") {
		t.Fatalf("fleetmgr_status schema_drift: %q\n%s", drift, b)
	}
	if text := textOf(res); !strings.Contains(text, "lacks properties depth (offered by kb)") {
		t.Fatalf("fleetmgr_status text does not name the drift:\n%s", text)
	}
	// And so does `fleetmgr status`, whose table names the tool, through
	// the daemon or not.
	for _, args := range [][]string{{"status"}, {"status", "--local"}} {
		if out := e.MustRun(args...).Stdout; strings.Count(out, "schema drift: fleet_status") != 2 {
			t.Fatalf("%v: the table does not name the drift for both fleets:\n%s", args, out)
		}
	}
}
