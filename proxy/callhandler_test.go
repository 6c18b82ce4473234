package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/catalogues"
)

// TestCallHandlerServesOnlyLocalFleetTools: a peer's call reaches only a
// tool the merged catalogue offers for one of this host's own fleets: an
// unknown fleet, a remote one (NAME@HOST), a manager tool (fleetmgr_stop)
// and a tool the fleet does not offer are invalid-params errors naming
// the fleet, never forwarded; a stopped fleet's tool is fleetmgr's tool
// error saying so, as for a local caller. The catalogue served is the
// fleet's catalogue.json, with the hash presence announces
// (Proxy.CatalogueHash); a fleet never listed has none.
func TestCallHandlerServesOnlyLocalFleetTools(t *testing.T) {
	m := kbOnPort(t, 1025)
	tools := []*mcp.Tool{{Name: "fleet_whoami", InputSchema: map[string]any{"type": "object"}}}
	b, _ := json.Marshal(tools)
	if err := os.MkdirAll(m.FleetDir("kb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.FleetDir("kb")+"/catalogue.json", b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Manager: m, Version: "test"})
	ctx := context.Background()
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	h := p.CallHandler()
	for _, c := range []struct{ fleet, tool, want string }{
		{"nope", "fleet_whoami", `has no fleet "nope"`},
		{"kb@beta", "fleet_whoami", `has no fleet "kb@beta"`},
		{"kb", "fleetmgr_stop", `fleet kb on host this host offers no tool "fleetmgr_stop"`},
		{"kb", "fleet_other", `offers no tool "fleet_other"`},
	} {
		_, err := h.Call(ctx, "beta", c.fleet, c.tool, json.RawMessage(`{}`), nil, nil)
		var re *federation.RPCError
		if !errors.As(err, &re) || re.Code != int(jsonrpc.CodeInvalidParams) || !strings.Contains(re.Message, c.want) {
			t.Errorf("%s on %s: %v, want invalid params with %q", c.tool, c.fleet, err, c.want)
		}
	}
	res, err := h.Call(ctx, "beta", "kb", "fleet_whoami", json.RawMessage(`{}`), json.RawMessage(`{"k":"v"}`), nil)
	var r mcp.CallToolResult
	if err != nil || json.Unmarshal(res, &r) != nil || !r.IsError || !strings.Contains(textOfResult(&r), "fleet kb is stopped") {
		t.Fatalf("a stopped fleet's tool: %s %v", res, err)
	}

	got, hash, err := h.Catalogue(ctx, "beta", "kb")
	if err != nil || string(got) != string(b) || hash != p.CatalogueHash("kb") || hash != catalogues.Sum(b) {
		t.Fatalf("catalogue %s %s %v; want the cached one with hash %s", got, hash, err, p.CatalogueHash("kb"))
	}
	if _, _, err := h.Catalogue(ctx, "beta", "nope"); err == nil || !strings.Contains(err.Error(), `has no fleet "nope"`) {
		t.Fatalf("catalogue of an unknown fleet: %v", err)
	}
}

func textOfResult(r *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}
