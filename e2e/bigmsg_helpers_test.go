package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/testbed/fleetd"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Helpers for the message-size tests and the memory benchmark: an Env with
// one fleet answering as SSE (the go-sdk's default, fleet "sse") and one
// answering as plain JSON (the go-sdk's JSONResponse option, fleet "json"),
// and MCP clients on both mounts that accept messages of any size.

// sizeFleets are the two fleets of newSizeEnv.
var sizeFleets = []string{"json", "sse"}

// newSizeEnv starts fleets "sse" and "json" (call_timeout 60 s) and no
// daemon.
func newSizeEnv(tb testing.TB) *harness.Env {
	tb.Helper()
	e := harness.NewEnv(tb, bins, "",
		harness.Fleet{Name: "sse", Extra: `call_timeout = "60s"`},
		harness.Fleet{Name: "json", Extra: `call_timeout = "60s"`, Args: []string{"--json-response"}})
	e.MustRun("start", "sse")
	e.MustRun("start", "json")
	return e
}

// sizeClient is one MCP client session through fleetmgr with the progress
// notifications it received.
type sizeClient struct {
	cs       *mcp.ClientSession
	mu       sync.Mutex
	progress map[any][]*mcp.ProgressNotificationParams
}

// progressOf returns the progress notifications received for tok.
func (c *sizeClient) progressOf(tok any) []*mcp.ProgressNotificationParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.progress[tok])
}

func newSizeClient() (*sizeClient, *mcp.Client) {
	c := &sizeClient{progress: map[any][]*mcp.ProgressNotificationParams{}}
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e-sizes", Version: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.progress[r.Params.ProgressToken] = append(c.progress[r.Params.ProgressToken], r.Params)
		},
	})
	return c, mc
}

// connectSizeHTTP connects to the HTTP mount with no cap on SSE events.
func connectSizeHTTP(tb testing.TB, e *harness.Env) *sizeClient {
	tb.Helper()
	c, mc := newSizeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.URL(), MaxRetries: -1, MaxEventSize: -1}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	c.cs = cs
	return c
}

// connectSizeStdio connects through `fleetmgr mcp --no-start` (the stdio
// bridge to the unix socket) with no cap on a line.
func connectSizeStdio(tb testing.TB, e *harness.Env) *sizeClient {
	tb.Helper()
	c, mc := newSizeClient()
	cmd := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "mcp", "--no-start")
	cmd.Env = e.Environ
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin, MaxLineLength: -1}, nil)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cs.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c.cs = cs
	return c
}

// waitEchoTool waits up to d until fleet_echo_size is listed for both
// fleets.
func waitEchoTool(tb testing.TB, cs *mcp.ClientSession, d time.Duration) {
	tb.Helper()
	wait.For(tb, d, fmt.Sprintf("%s listed for %v", fleetd.EchoSizeTool, sizeFleets), wait.Bool(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name != fleetd.EchoSizeTool {
				continue
			}
			var schema struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			}
			b, _ := json.Marshal(tool.InputSchema)
			if json.Unmarshal(b, &schema) == nil && slices.Equal(schema.Properties["fleet"].Enum, sizeFleets) {
				return true
			}
		}
		return false
	}))
}

// echoOutcome is what one fleet_echo_size call brought back.
type echoOutcome struct {
	res      *mcp.CallToolResult
	progress []*mcp.ProgressNotificationParams // with the call's token
}

// echoSize calls fleet_echo_size on fleet for a result message of n bytes
// and, if pn > 0, one progress notification of pn bytes first (the call
// then carries progress token tok).
func (c *sizeClient) echoSize(ctx context.Context, fleet string, n, pn int, tok string) (echoOutcome, error) {
	p := &mcp.CallToolParams{Name: fleetd.EchoSizeTool, Arguments: map[string]any{"fleet": fleet, "bytes": n, "progress_bytes": pn}}
	if pn > 0 {
		p.SetProgressToken(tok)
	}
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		return echoOutcome{}, err
	}
	return echoOutcome{res: res, progress: c.progressOf(tok)}, nil
}

// checkEchoResult returns an error unless res is fleet_echo_size's intact
// result: its text is the stand-in's filler of the length and SHA-256 its
// _meta gives.
func checkEchoResult(res *mcp.CallToolResult) error {
	if res.IsError {
		return fmt.Errorf("tool error: %.300s", textOf(res))
	}
	if len(res.Content) != 1 {
		return fmt.Errorf("%d content items", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return fmt.Errorf("content is %T", res.Content[0])
	}
	var meta struct {
		Echo fleetd.EchoSizeMeta `json:"echo_size"`
	}
	b, _ := json.Marshal(res.Meta)
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("_meta %s: %v", b, err)
	}
	got := fleetd.SHA256Hex(tc.Text)
	if len(tc.Text) != meta.Echo.TextBytes || got != meta.Echo.TextSHA256 || got != fleetd.SHA256Hex(fleetd.Filler(len(tc.Text))) {
		return fmt.Errorf("text of %d bytes, sha256 %s; the stand-in sent %d bytes, sha256 %s", len(tc.Text), got, meta.Echo.TextBytes, meta.Echo.TextSHA256)
	}
	return nil
}

// checkEchoProgress returns an error unless progress is one notification
// whose message is the stand-in's filler, of a length that puts the
// upstream's notification (token upTok) at pn bytes.
func checkEchoProgress(progress []*mcp.ProgressNotificationParams, pn int) error {
	if len(progress) != 1 {
		return fmt.Errorf("%d progress notifications, want 1", len(progress))
	}
	m := progress[0].Message
	if progress[0].Progress != 1 || progress[0].Total != 2 || fleetd.SHA256Hex(m) != fleetd.SHA256Hex(fleetd.Filler(len(m))) {
		return fmt.Errorf("progress %v/%v with a message of %d bytes that is not the filler", progress[0].Progress, progress[0].Total, len(m))
	}
	// The upstream's notification: {"jsonrpc":"2.0","method":"notifications/progress",
	// "params":{"progressToken":"fleetmgr-N","message":…,"progress":1,"total":2}}.
	if over := pn - len(m); over < 110 || over > 160 {
		return fmt.Errorf("progress message of %d bytes cannot be the one of a %d-byte notification", len(m), pn)
	}
	return nil
}

// procStatus returns VmRSS and VmHWM of pid in bytes.
func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm, nil
}

// resetHWM resets pid's VmHWM to its current RSS (proc(5), clear_refs "5").
func resetHWM(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
