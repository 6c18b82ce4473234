package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestDriftDescribedPerFleet(t *testing.T) {
	cat := Merge(map[string][]*mcp.Tool{
		"kb":   {tool("spawn", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"]}`), tool("same", `{"type":"object"}`)},
		"docs": {tool("spawn", `{"type":"object","properties":{"a":{"type":"integer"},"c":{"type":"integer"}},"required":["a"]}`), tool("same", `{"type":"object"}`)},
		"ops":  {tool("same", `{"type":"object"}`)},
	}, nil)
	rep := cat.DriftReport()
	if len(rep) != 1 || rep[0].Tool != "spawn" || !slices.Equal(rep[0].Fleets, []string{"docs", "kb"}) {
		t.Fatalf("report = %+v", rep)
	}
	kb := rep[0].PerFleet["kb"]
	for _, want := range []string{"lacks properties c (offered by docs)", "also requires b", "defines a differently"} {
		if !strings.Contains(kb, want) {
			t.Errorf("kb: %q lacks %q", kb, want)
		}
	}
	docs := rep[0].PerFleet["docs"]
	if !strings.Contains(docs, "lacks properties b (offered by kb)") || strings.Contains(docs, "requires") {
		t.Errorf("docs: %q", docs)
	}
	if got := cat.FleetDrift("kb"); len(got) != 1 || !strings.HasPrefix(got[0], "spawn: ") {
		t.Errorf("FleetDrift(kb) = %q", got)
	}
	if got := cat.FleetDrift("ops"); len(got) != 0 {
		t.Errorf("FleetDrift(ops) = %q, want none", got)
	}
}
