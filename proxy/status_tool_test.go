package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

// TestStatusToolReportsDrift: two fleets whose catalogues publish one tool
// name with different input schemas (stopped, so the proxy's catalogue
// comes from their caches) are named in fleetmgr_status's result, in its
// structured content and in its text, each with how its own schema
// differs; a fleet without drift has none.
func TestStatusToolReportsDrift(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n", filepath.Join(dir, "state"))
	for i, n := range []string{"docs", "kb", "ops"} {
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", n, dir, 20001+i)
	}
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
	for name, cat := range map[string]string{
		"kb":   `[{"name":"fleet_status","inputSchema":{"type":"object","properties":{"id":{"type":"string"},"depth":{"type":"integer"}},"required":["id","depth"]}},{"name":"fleet_list","inputSchema":{"type":"object"}}]`,
		"docs": `[{"name":"fleet_status","inputSchema":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}},{"name":"fleet_list","inputSchema":{"type":"object"}}]`,
		"ops": `[{"name":"fleet_list","inputSchema":{"type":"object"}},` +
			`{"name":"own_fleet","inputSchema":{"type":"object","properties":{"fleet":{"type":"string"}}}},` +
			`{"name":"remote_args","inputSchema":{"type":"object","allOf":[{"$ref":"https://example.com/args.json"}]}}]`,
	} {
		if err := os.MkdirAll(m.FleetDir(name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.FleetDir(name), "catalogue.json"), []byte(cat), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := New(Options{Manager: m, Version: "test"})
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	cs := inMemoryClient(t, ctx, p)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: StatusTool, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_status: %v %+v", err, res)
	}

	js, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	drift := map[string][]string{}
	for _, f := range rep.Fleets {
		drift[f.Name] = f.SchemaDrift
	}
	kb, docs := drift["kb"], drift["docs"]
	if len(kb) != 1 || !strings.HasPrefix(kb[0], "fleet_status: ") || !strings.Contains(kb[0], "also requires depth") {
		t.Errorf("kb's schema_drift = %q", kb)
	}
	if len(docs) != 1 || !strings.HasPrefix(docs[0], "fleet_status: ") || !strings.Contains(docs[0], "lacks properties depth (offered by kb)") {
		t.Errorf("docs's schema_drift = %q", docs)
	}
	if ops, ok := drift["ops"]; !ok || ops != nil {
		t.Errorf("ops: schema_drift %q (present in report: %v), want none", ops, ok)
	}
	// ops's tool with its own fleet property is named as not exposed, the
	// one whose schema refers to another document as relaxed; the other
	// fleets have neither.
	for _, f := range rep.Fleets {
		ex, rel := f.ExcludedTools, f.RelaxedTools
		if f.Name != "ops" {
			if ex != nil || rel != nil {
				t.Errorf("%s: excluded %+v relaxed %+v, want none", f.Name, ex, rel)
			}
			continue
		}
		if len(ex) != 1 || ex[0].Tool != "own_fleet" || !strings.Contains(ex[0].Reason, `already has a "fleet" property`) {
			t.Errorf("ops: excluded_tools = %+v", ex)
		}
		if len(rel) != 1 || rel[0].Tool != "remote_args" || !strings.Contains(rel[0].Reason, "not a local reference") {
			t.Errorf("ops: relaxed_tools = %+v", rel)
		}
	}
	if _, ok := p.Catalogue().Tools["own_fleet"]; ok {
		t.Errorf("own_fleet is exposed")
	}
	if _, ok := p.Catalogue().Tools["remote_args"]; !ok {
		t.Errorf("remote_args is not exposed")
	}

	var text string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	for _, want := range slices.Concat(kb, docs) {
		wj, _ := json.Marshal(want)
		if !strings.Contains(text, string(wj)) {
			t.Errorf("text content lacks %s:\n%s", wj, text)
		}
	}
}
