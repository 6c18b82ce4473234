package proxy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
)

// FleetArg is the property every re-exposed tool gains: which fleet to call.
const FleetArg = "fleet"

// toolNameRE is the rule MCP clients enforce on tool names; fleetmgr keeps
// upstream names as they are (no prefixes), so they stay within it.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// MergedTool is one entry of the merged catalogue: the tool as exposed (with
// the required fleet argument) and the fleets offering it.
type MergedTool struct {
	Tool   *mcp.Tool
	Fleets []string
	// Drift is set when fleets publish this name with different input
	// schemas: the exposed schema is then the union of properties with
	// required = the intersection, and each upstream validates its own.
	Drift bool
	// schemas holds each fleet's own input schema (decoded), for drift
	// descriptions.
	schemas map[string]map[string]any
}

// ToolNote names one fleet's tool and says something about it: why it is
// not exposed (Catalogue.Excluded) or why its exposed schema is relaxed
// (Catalogue.Relaxed).
type ToolNote struct {
	Fleet  string `json:"fleet"`
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

// Catalogue is an immutable merged tool set.
type Catalogue struct {
	Tools map[string]*MergedTool
	// Excluded are the fleets' tools that are not exposed, with why
	// (a name MCP clients refuse, a fleetmgr_ name, a schema that is not
	// an object or that has its own "fleet" argument), sorted by fleet
	// then tool.
	Excluded []ToolNote
	// Relaxed are the fleets' tools whose exposed schema could not be
	// patched exactly and accepts more than the fleet's own (see
	// exposeSchema), with why, sorted by fleet then tool. Such a tool is
	// callable; the fleet validates its arguments itself.
	Relaxed []ToolNote
	// Hidden are the fleets' tools the tool policy hides from the
	// operator's session (tools_policy.go), with why ("hidden on kb by
	// fleets.toml:42 (tools.deny \"fleet_*\")"), sorted by fleet then tool.
	// Merge leaves it empty; MergeWithPolicy fills it.
	Hidden []ToolNote
}

// Drifts lists tool names whose schemas differ between fleets, sorted.
func (c *Catalogue) Drifts() []string {
	var out []string
	for n, t := range c.Tools {
		if t.Drift {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// FleetNotes returns the notes of notes (Excluded or Relaxed) about
// fleet's tools, in order.
func FleetNotes(notes []ToolNote, fleet string) []ToolNote {
	var out []ToolNote
	for _, n := range notes {
		if n.Fleet == fleet {
			out = append(out, n)
		}
	}
	return out
}

// LogNotes logs every excluded tool ("tool not exposed") and every relaxed
// schema ("tool schema relaxed") at warning level, with fleet, tool and
// why.
func (c *Catalogue) LogNotes(log *slog.Logger) {
	for _, n := range c.Excluded {
		log.Warn("tool not exposed", "fleet", n.Fleet, "tool", n.Tool, "why", n.Reason)
	}
	for _, n := range c.Relaxed {
		log.Warn("tool schema relaxed", "fleet", n.Fleet, "tool", n.Tool, "why", n.Reason)
	}
}

// Merge builds the merged catalogue from each fleet's tools/list result
// (docs/ARCHITECTURE.md "The merged catalogue"): tools are merged by name;
// each keeps its name, description and schema and gains a required "fleet"
// string property whose enum lists the fleets offering it. Each fleet's
// schema is patched so that every call it accepts is accepted with "fleet"
// added, or relaxed where that cannot be done exactly (exposeSchema). A
// fleet's tool is left out (Excluded) when its name breaks the MCP tool
// name rule, reserved says the name is fleetmgr's own, its schema is not an
// object schema, or its schema already uses a "fleet" argument.
func Merge(perFleet map[string][]*mcp.Tool, reserved func(string) bool) *Catalogue {
	c := &Catalogue{Tools: map[string]*MergedTool{}}
	type entry struct {
		fleet  string
		tool   *mcp.Tool
		schema map[string]any
		raw    []byte
		exp    exposure
	}
	byName := map[string][]entry{}
	fleets := make([]string, 0, len(perFleet))
	for f := range perFleet {
		fleets = append(fleets, f)
	}
	// This host's fleets first, then other hosts' (NAME@HOST), each by
	// name: a merged tool keeps the description, title, annotations and
	// output schema of the first fleet offering it, and a peer's catalogue
	// must never restate a local tool to the operator's client (a
	// readOnlyHint on a destructive tool, instructions in its description)
	// just because its name sorts first.
	slices.SortFunc(fleets, func(a, b string) int {
		_, _, ra := peerview.SplitRemote(a)
		_, _, rb := peerview.SplitRemote(b)
		if ra != rb {
			if ra {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	exclude := func(f, tool, format string, args ...any) {
		c.Excluded = append(c.Excluded, ToolNote{Fleet: f, Tool: tool, Reason: fmt.Sprintf(format, args...)})
	}
	for _, f := range fleets {
		budget := maxFleetSchemaNodes
		for _, t := range perFleet[f] {
			if t == nil {
				continue
			}
			if !toolNameRE.MatchString(t.Name) {
				exclude(f, t.Name, "name breaks ^[a-zA-Z0-9_-]{1,64}$ (the MCP tool name rule)")
				continue
			}
			if reserved != nil && reserved(t.Name) {
				exclude(f, t.Name, "name is reserved for fleetmgr's own tools")
				continue
			}
			raw, err := json.Marshal(t.InputSchema)
			var schema map[string]any
			if err == nil {
				schema, err = decodeSchema(raw)
			}
			if err != nil || schema == nil {
				schema = map[string]any{"type": "object"}
			}
			// Compiling a schema (jsonschema) costs time quadratic in its
			// subschemas: a catalogue of a few MiB (a peer's, whatever its
			// trust line says) held a core for minutes per merge.
			if n := schemaNodes(schema, maxSchemaNodes+1); n > maxSchemaNodes {
				exclude(f, t.Name, "input schema has more than %d objects and arrays, the most fleetmgr merges for one tool", maxSchemaNodes)
				continue
			} else if n > budget {
				exclude(f, t.Name, "the fleet's input schemas together have more than %d objects and arrays, the most fleetmgr merges for one fleet", maxFleetSchemaNodes)
				continue
			} else {
				budget -= n
			}
			if typ, ok := schema["type"]; ok && typ != "object" && !slices.Contains(stringList(typ), "object") {
				exclude(f, t.Name, "input schema type is %v, not object", typ)
				continue
			}
			exp, err := exposeSchema(schema)
			if err != nil {
				exclude(f, t.Name, "%v", err)
				continue
			}
			if exp.relaxed != "" {
				c.Relaxed = append(c.Relaxed, ToolNote{Fleet: f, Tool: t.Name, Reason: exp.relaxed})
			}
			byName[t.Name] = append(byName[t.Name], entry{f, t, schema, raw, exp})
		}
	}
	for name, es := range byName {
		m := &MergedTool{schemas: map[string]map[string]any{}}
		for _, e := range es[1:] {
			if !bytes.Equal(e.raw, es[0].raw) {
				m.Drift = true
			}
		}
		var out map[string]any
		if m.Drift {
			exps := make([]map[string]any, len(es))
			for i, e := range es {
				exps[i] = e.exp.schema
			}
			out = unionSchema(exps)
		} else {
			out = cloneMap(es[0].exp.schema)
		}
		for _, e := range es {
			m.Fleets = append(m.Fleets, e.fleet)
			m.schemas[e.fleet] = e.schema
		}
		sort.Strings(m.Fleets)
		enum := make([]any, len(m.Fleets))
		for i, f := range m.Fleets {
			enum[i] = f
		}
		props := cloneMap(out["properties"].(map[string]any))
		props[FleetArg] = map[string]any{
			"type":        "string",
			"enum":        enum,
			"description": "Which fleet to call (fleetmgr routes the call to that fleet's fleetd).",
		}
		out["properties"] = props
		t := *es[0].tool
		t.InputSchema = out
		m.Tool = &t
		c.Tools[name] = m
	}
	byFleetTool := func(a, b ToolNote) int {
		return cmp.Or(strings.Compare(a.Fleet, b.Fleet), strings.Compare(a.Tool, b.Tool))
	}
	slices.SortStableFunc(c.Excluded, byFleetTool)
	slices.SortStableFunc(c.Relaxed, byFleetTool)
	return c
}

// Bounds of what Merge takes from one fleet's catalogue: the JSON objects
// and arrays of one tool's input schema, and of all of a fleet's tools
// together. Real tools' schemas have tens; merging a fleet at both bounds
// takes about a second on one core.
const (
	maxSchemaNodes      = 2_000
	maxFleetSchemaNodes = 20_000
)

// schemaNodes counts the objects and arrays in v, stopping at limit.
func schemaNodes(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		if n >= limit {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			n++
			for _, e := range x {
				walk(e)
			}
		case []any:
			n++
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return n
}

func stringList(v any) []string {
	switch x := v.(type) {
	case []string:
		return slices.Clone(x)
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
