package proxy

import (
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

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// TestReloadToolAndReloadOnMiss: fleetmgr_reload exists only with a Reload
// function; a manager tool naming a fleet the config in force does not
// define makes the proxy reload first (ifChanged), so a fleet just added to
// the file is served, not "unknown"; after fleetmgr_reload the fleet enums
// already include the new fleet; a name the file does not define either is
// still an unknown-fleet error naming the file's fleets.
func TestReloadToolAndReloadOnMiss(t *testing.T) {
	m := kbOnPort(t, 1025)
	path := m.Config().Path
	var mu sync.Mutex
	var calls []bool // ifChanged of each Reload call
	reload := func(ctx context.Context, ifChanged bool) (*lifecycle.ReloadReport, error) {
		mu.Lock()
		calls = append(calls, ifChanged)
		mu.Unlock()
		cfg, err := registry.Load(path)
		if err != nil {
			return nil, err
		}
		return m.Reload(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	connect := func(p *Proxy) *mcp.ClientSession { return inMemoryClient(t, ctx, p) }
	tools := func(cs *mcp.ClientSession) map[string]*mcp.Tool {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			out[tl.Name] = tl
		}
		return out
	}
	if _, ok := tools(connect(New(Options{Manager: m, Version: "test"})))[ReloadTool]; ok {
		t.Fatal("fleetmgr_reload offered without a Reload function")
	}
	p := New(Options{Manager: m, Version: "test", Reload: reload})
	cs := connect(p)
	if _, ok := tools(cs)[ReloadTool]; !ok {
		t.Fatal("no fleetmgr_reload")
	}

	// Add fleet "fresh" (with a cached catalogue, as a fleet that ran
	// once has) to the file, without reloading.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	b = fmt.Appendf(b, "[fleets.fresh]\nproject = %q\ncommand = [\"fleetd\"]\nport = 1026\n", dir)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.FleetDir("fresh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.FleetDir("fresh"), "catalogue.json"), []byte(`[{"name":"fleet_list","inputSchema":{"type":"object"}}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ManagerToolPrefix + "logs", Arguments: map[string]any{"fleet": "fresh"}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_logs of a fleet just added to the file: %v %+v", err, res)
	}
	mu.Lock()
	if !slices.Equal(calls, []bool{true}) {
		t.Errorf("Reload calls (ifChanged) = %v, want one with ifChanged", calls)
	}
	mu.Unlock()
	if !m.InConfig("fresh") {
		t.Fatal("fresh not in the config after the reload on miss")
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: ReloadTool, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_reload: %v %+v", err, res)
	}
	var rep lifecycle.ReloadReport
	js, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(js, &rep); err != nil || !slices.Equal(rep.Fleets, []string{"fresh", "kb"}) {
		t.Fatalf("fleetmgr_reload result %s: %v", js, err)
	}
	if tl := tools(cs)["fleet_list"]; tl == nil || !slices.Contains(enumOf(t, tl), "fresh") {
		t.Fatalf("fleet_list after fleetmgr_reload: %+v", tl)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: ManagerToolPrefix + "stop", Arguments: map[string]any{"fleet": "nope"}})
	if err != nil || !res.IsError {
		t.Fatalf("fleetmgr_stop of an unknown fleet: %v %+v", err, res)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, `unknown fleet "nope"`) || !strings.Contains(text, "defines fresh, kb") {
		t.Fatalf("unknown fleet error: %s", text)
	}
}

func enumOf(t *testing.T, tl *mcp.Tool) []string {
	t.Helper()
	b, _ := json.Marshal(tl.InputSchema)
	var s struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.Properties[FleetArg].Enum
}

// inMemoryClient connects a go-sdk client to p's MCP server over in-memory
// transports; both sessions close when the test ends.
func inMemoryClient(t *testing.T, ctx context.Context, p *Proxy) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := p.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
