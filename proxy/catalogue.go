package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// Catalogue is an immutable merged tool set.
type Catalogue struct {
	Tools map[string]*MergedTool
	// Skipped records upstream tools that could not be exposed, with why.
	Skipped []string
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

// Merge builds the merged catalogue from each fleet's tools/list result
// (DESIGN.md "The merged catalogue"): tools are merged by name; each keeps
// its name, description and schema and gains a required "fleet" string
// property whose enum lists the fleets offering it. reserved names (the
// manager's own tools) are never taken from upstreams.
func Merge(perFleet map[string][]*mcp.Tool, reserved func(string) bool) *Catalogue {
	c := &Catalogue{Tools: map[string]*MergedTool{}}
	type entry struct {
		fleet  string
		tool   *mcp.Tool
		schema map[string]any
		raw    []byte
	}
	byName := map[string][]entry{}
	fleets := make([]string, 0, len(perFleet))
	for f := range perFleet {
		fleets = append(fleets, f)
	}
	sort.Strings(fleets)
	for _, f := range fleets {
		for _, t := range perFleet[f] {
			if t == nil {
				continue
			}
			if !toolNameRE.MatchString(t.Name) {
				c.Skipped = append(c.Skipped, fmt.Sprintf("fleet %s: tool %q: name breaks ^[a-zA-Z0-9_-]{1,64}$", f, t.Name))
				continue
			}
			if reserved != nil && reserved(t.Name) {
				c.Skipped = append(c.Skipped, fmt.Sprintf("fleet %s: tool %q: name is reserved for fleetmgr's own tools", f, t.Name))
				continue
			}
			raw, err := json.Marshal(t.InputSchema)
			var schema map[string]any
			if err == nil {
				err = json.Unmarshal(raw, &schema)
			}
			if err != nil || schema == nil {
				schema = map[string]any{"type": "object"}
			}
			if typ, ok := schema["type"]; ok && typ != "object" {
				c.Skipped = append(c.Skipped, fmt.Sprintf("fleet %s: tool %q: input schema type is %v, not object", f, t.Name, typ))
				continue
			}
			if _, ok := schema[FleetArg]; ok {
				// never happens at top level; property clash is handled below
			}
			byName[t.Name] = append(byName[t.Name], entry{f, t, schema, raw})
		}
	}
	for name, es := range byName {
		m := &MergedTool{schemas: map[string]map[string]any{}}
		base := es[0]
		out := cloneMap(base.schema)
		out["type"] = "object"
		for _, e := range es[1:] {
			if !bytes.Equal(e.raw, base.raw) {
				m.Drift = true
			}
		}
		if m.Drift {
			props := map[string]any{}
			var req []string
			for i, e := range es {
				if p, ok := e.schema["properties"].(map[string]any); ok {
					for k, v := range p {
						if _, seen := props[k]; !seen {
							props[k] = v
						}
					}
				}
				r := stringList(e.schema["required"])
				if i == 0 {
					req = r
				} else {
					req = slices.DeleteFunc(req, func(s string) bool { return !slices.Contains(r, s) })
				}
			}
			out["properties"] = props
			out["required"] = req
		}
		for _, e := range es {
			m.Fleets = append(m.Fleets, e.fleet)
			m.schemas[e.fleet] = e.schema
		}
		sort.Strings(m.Fleets)
		props, _ := out["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		} else {
			props = cloneMap(props)
		}
		if _, clash := props[FleetArg]; clash {
			c.Skipped = append(c.Skipped, fmt.Sprintf("tool %q: already has a %q argument, so fleetmgr cannot add its own", name, FleetArg))
			continue
		}
		enum := make([]any, len(m.Fleets))
		for i, f := range m.Fleets {
			enum[i] = f
		}
		props[FleetArg] = map[string]any{
			"type":        "string",
			"enum":        enum,
			"description": "Which fleet to call (fleetmgr routes the call to that fleet's fleetd).",
		}
		out["properties"] = props
		req := stringList(out["required"])
		if !slices.Contains(req, FleetArg) {
			req = append([]string{FleetArg}, req...)
		}
		out["required"] = req
		t := *base.tool
		t.InputSchema = out
		m.Tool = &t
		c.Tools[name] = m
	}
	sort.Strings(c.Skipped)
	return c
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
