package proxy

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validatorFor compiles schema (JSON text or decoded) with a real JSON
// Schema validator (ECMA-262 patterns, no loading from outside except
// resources, url → JSON text) and returns a function reporting whether an
// instance (JSON text) is valid.
func validatorFor(t *testing.T, schema any, resources map[string]string) func(inst string) bool {
	t.Helper()
	var b []byte
	switch s := schema.(type) {
	case string:
		b = []byte(s)
	default:
		var err error
		if b, err = json.Marshal(s); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("schema %s: %v", b, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	c.UseRegexpEngine(func(s string) (jsonschema.Regexp, error) { return compileECMA(s) })
	for u, r := range resources {
		rd, err := jsonschema.UnmarshalJSON(strings.NewReader(r))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(u, rd); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AddResource("urn:test:schema", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("urn:test:schema")
	if err != nil {
		t.Fatalf("compile %s: %v", b, err)
	}
	return func(inst string) bool {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(inst))
		if err != nil {
			t.Fatalf("instance %s: %v", inst, err)
		}
		return sch.Validate(v) == nil
	}
}

// withFleet returns instance (a JSON object) with "fleet": fleet added.
func withFleet(t *testing.T, inst, fleet string) string {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(inst))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("instance %s: %v", inst, err)
	}
	m[FleetArg] = fleet
	b, _ := json.Marshal(m)
	return string(b)
}

// naiveSchema is what fleetmgr exposed before schemas were patched: the
// fleet's schema with "fleet" added to its top-level properties and
// required only.
func naiveSchema(t *testing.T, up string) map[string]any {
	t.Helper()
	m, err := decodeSchema([]byte(up))
	if err != nil {
		t.Fatal(err)
	}
	props, _ := m["properties"].(map[string]any)
	props = maps.Clone(props)
	if props == nil {
		props = map[string]any{}
	}
	props[FleetArg] = map[string]any{"type": "string", "enum": []any{"kb"}}
	m["properties"] = props
	m["required"] = withFleetFirst(m["required"])
	m["type"] = "object"
	return m
}

// schemaCases are fleet schemas that restrict the arguments' property set
// where a top-level "fleet" property does not help. accept: instances the
// fleet's schema accepts; reject: instances it refuses for reasons unrelated
// to fleet. hostile: the naive merge refused some accepted call. relaxed:
// exact patching is impossible (reason contains this); otherwise every
// reject must still be refused with fleet added.
var schemaCases = []struct {
	name      string
	schema    string
	resources map[string]string
	accept    []string
	reject    []string
	hostile   bool
	relaxed   string
}{
	{name: "top-level additionalProperties",
		schema: `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`,
		accept: []string{`{"a":"x"}`}, reject: []string{`{}`, `{"a":1}`, `{"a":"x","b":1}`}},
	{name: "additionalProperties false under allOf", hostile: true,
		schema: `{"type":"object","allOf":[{"properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":false}],"required":["a"]}`,
		accept: []string{`{"a":"x"}`, `{"a":"x","b":2}`}, reject: []string{`{"a":"x","c":1}`, `{"b":2}`, `{"a":"x","b":"y"}`}},
	{name: "additionalProperties false in anyOf branches", hostile: true,
		schema: `{"type":"object","anyOf":[{"properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false},{"properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}]}`,
		accept: []string{`{"a":"x"}`, `{"b":1}`}, reject: []string{`{"a":"x","b":1}`, `{}`, `{"c":1}`}},
	{name: "oneOf discriminated by const", hostile: true,
		schema: `{"type":"object","oneOf":[{"properties":{"kind":{"const":"file"},"path":{"type":"string"}},"required":["kind","path"],"additionalProperties":false},{"properties":{"kind":{"const":"url"},"href":{"type":"string"}},"required":["kind","href"],"additionalProperties":false}]}`,
		accept: []string{`{"kind":"file","path":"/x"}`, `{"kind":"url","href":"h"}`}, reject: []string{`{"kind":"file","href":"h"}`, `{"kind":"file","path":"/x","extra":1}`}},
	{name: "root $ref into $defs", hostile: true,
		schema: `{"$ref":"#/$defs/Args","$defs":{"Args":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}}}`,
		accept: []string{`{"id":"m1"}`}, reject: []string{`{}`, `{"id":"m1","x":1}`}},
	{name: "draft-07 root $ref into definitions", hostile: true,
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","$ref":"#/definitions/Args","definitions":{"Args":{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}}}`,
		accept: []string{`{"id":"m1"}`}, reject: []string{`{}`, `{"id":"m1","x":1}`}},
	{name: "draft-04 allOf", hostile: true,
		schema: `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","allOf":[{"properties":{"a":{"type":"integer","maximum":3,"exclusiveMaximum":true}},"additionalProperties":false}]}`,
		accept: []string{`{}`, `{"a":2}`}, reject: []string{`{"a":3}`, `{"b":1}`}},
	{name: "unevaluatedProperties false",
		schema: `{"type":"object","allOf":[{"properties":{"a":{"type":"string"}}}],"properties":{"b":{"type":"integer"}},"unevaluatedProperties":false}`,
		accept: []string{`{"a":"x","b":1}`, `{}`}, reject: []string{`{"c":1}`, `{"a":1}`}},
	{name: "unevaluatedProperties in a branch", hostile: true,
		schema: `{"type":"object","anyOf":[{"properties":{"a":{"type":"string"}},"unevaluatedProperties":false}]}`,
		accept: []string{`{"a":"x"}`, `{}`}, reject: []string{`{"b":1}`}},
	{name: "propertyNames enum", hostile: true,
		schema: `{"type":"object","propertyNames":{"enum":["a","b"]}}`,
		accept: []string{`{"a":1}`, `{"a":1,"b":2}`, `{}`}, reject: []string{`{"c":1}`}},
	{name: "propertyNames pattern that fleet matches",
		schema: `{"type":"object","propertyNames":{"pattern":"^[a-z]+$"}}`,
		accept: []string{`{"abc":1}`}, reject: []string{`{"A":1}`}},
	{name: "propertyNames by $ref under allOf", hostile: true,
		schema: `{"type":"object","allOf":[{"propertyNames":{"$ref":"#/$defs/name"}}],"$defs":{"name":{"enum":["a","b"]}}}`,
		accept: []string{`{"a":1}`}, reject: []string{`{"z":1}`}},
	{name: "a $ref into a patched propertyNames", hostile: true,
		schema: `{"type":"object","propertyNames":{"enum":["a","tag"]},"properties":{"tag":{"$ref":"#/propertyNames"}}}`,
		accept: []string{`{"tag":"a"}`}, reject: []string{`{"tag":"fleet"}`, `{"b":1}`}},
	{name: "maxProperties", hostile: true,
		schema: `{"type":"object","properties":{"a":{},"b":{}},"maxProperties":1}`,
		accept: []string{`{"a":1}`, `{}`}, reject: []string{`{"a":1,"b":2}`}},
	{name: "minProperties under not", hostile: true,
		schema: `{"type":"object","not":{"minProperties":2}}`,
		accept: []string{`{"a":1}`, `{}`}, reject: []string{`{"a":1,"b":2}`}},
	{name: "minProperties (would loosen if left alone)",
		schema: `{"type":"object","minProperties":1}`,
		accept: []string{`{"a":1}`}, reject: []string{`{}`}},
	{name: "dependentSchemas", hostile: true,
		schema: `{"type":"object","properties":{"a":{},"b":{}},"dependentSchemas":{"a":{"properties":{"a":{},"b":{}},"additionalProperties":false}}}`,
		accept: []string{`{"a":1,"b":2}`, `{"c":3}`}, reject: []string{`{"a":1,"c":3}`}},
	{name: "draft-07 dependencies", hostile: true,
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","dependencies":{"a":{"properties":{"a":{}},"additionalProperties":false},"b":["c"]}}`,
		accept: []string{`{"a":1}`, `{"b":1,"c":2}`}, reject: []string{`{"a":1,"z":1}`, `{"b":1}`}},
	{name: "if then else", hostile: true,
		schema: `{"type":"object","if":{"required":["mode"]},"then":{"properties":{"mode":{"enum":["x"]},"n":{"type":"integer"}},"additionalProperties":false},"else":{"maxProperties":0}}`,
		accept: []string{`{"mode":"x","n":1}`, `{}`}, reject: []string{`{"n":1}`, `{"mode":"x","z":1}`, `{"mode":"y"}`}},
	{name: "if on the property count", hostile: true,
		schema: `{"type":"object","if":{"maxProperties":1},"then":{"required":["a"]},"else":{"required":["b"]}}`,
		accept: []string{`{"a":1}`, `{"b":1,"c":2}`}, reject: []string{`{"c":1}`, `{"a":1,"c":2}`}},
	{name: "not with additionalProperties",
		schema: `{"type":"object","not":{"properties":{"a":{}},"additionalProperties":false}}`,
		accept: []string{`{"b":1}`}, reject: []string{`{"a":1}`, `{}`}},
	{name: "recursive schema refers to the root", hostile: true,
		schema: `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["name"],"additionalProperties":false}`,
		accept: []string{`{"name":"a"}`, `{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`},
		reject: []string{`{"name":"a","children":[{}]}`, `{"name":"a","children":[{"name":"b","fleet":"kb"}]}`, `{"name":"a","x":1}`}},
	{name: "$defs shared by the root and a property", hostile: true,
		schema: `{"type":"object","allOf":[{"$ref":"#/$defs/X"}],"properties":{"sub":{"$ref":"#/$defs/X"}},"$defs":{"X":{"type":"object","properties":{"a":{},"sub":{}},"minProperties":1,"additionalProperties":false}}}`,
		accept: []string{`{"a":1}`, `{"a":1,"sub":{"a":2}}`},
		reject: []string{`{"a":1,"sub":{}}`, `{"a":1,"sub":{"a":1,"fleet":"kb"}}`, `{"b":1}`}},
	{name: "cyclic $ref at the root location", hostile: true,
		schema: `{"$ref":"#/$defs/A","$defs":{"A":{"type":"object","properties":{"a":{}},"additionalProperties":false,"anyOf":[{"$ref":"#/$defs/A"},{"required":["a"]}]}}}`,
		accept: []string{`{"a":1}`}, reject: []string{`{"b":1}`}},
	{name: "patternProperties that fleet does not match",
		schema: `{"type":"object","patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false}`,
		accept: []string{`{"x-a":1}`, `{}`}, reject: []string{`{"x-a":"s"}`, `{"y":1}`}},
	{name: "patternProperties that fleet matches, string values",
		schema: `{"type":"object","patternProperties":{".*":{"type":"string"}},"additionalProperties":false}`,
		accept: []string{`{"k":"v"}`}, reject: []string{`{"k":1}`}},
	{name: "ECMA-262 pattern with a lookahead",
		schema: `{"type":"object","properties":{"email":{"type":"string","pattern":"^(?!\\.)[a-z.]+@example\\.com$"}},"additionalProperties":false}`,
		accept: []string{`{"email":"a.b@example.com"}`}, reject: []string{`{"email":".a@example.com"}`}},

	// Relaxed: exact patching is impossible; calls must still pass.
	{name: "patternProperties that fleet matches, integer values", hostile: true, relaxed: `patternProperties "^f"`,
		schema: `{"type":"object","patternProperties":{"^f":{"type":"integer"}},"properties":{"g":{"type":"string"}},"required":["g"]}`,
		accept: []string{`{"g":"x","foo":1}`}},
	{name: "remote $ref at the root location", hostile: true, relaxed: "not a local reference",
		resources: map[string]string{"https://example.com/args.json": `{"type":"object","properties":{"id":{}},"additionalProperties":false}`},
		schema:    `{"type":"object","allOf":[{"$ref":"https://example.com/args.json"}],"properties":{"id":{"type":"string"}}}`,
		accept:    []string{`{"id":"m1"}`}},
	{name: "$dynamicAnchor on the root", hostile: true, relaxed: "$dynamicAnchor",
		schema: `{"type":"object","$dynamicAnchor":"node","properties":{"a":{"type":"integer"},"kids":{"type":"array","items":{"$dynamicRef":"#node"}}},"required":["a"],"additionalProperties":false}`,
		accept: []string{`{"a":1}`, `{"a":1,"kids":[{"a":2}]}`}},
	{name: "$anchor on the root named by a $ref", hostile: true, relaxed: "$anchor",
		schema: `{"type":"object","$anchor":"node","properties":{"a":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#node"}}},"required":["a"]}`,
		accept: []string{`{"a":1}`, `{"a":1,"kids":[{"a":2}]}`}},
	{name: "object const in a branch", hostile: true, relaxed: "object const",
		schema: `{"type":"object","anyOf":[{"const":{"mode":"default"}},{"required":["mode","level"]}]}`,
		accept: []string{`{"mode":"default"}`, `{"mode":"x","level":1}`}},
	{name: "anchor $ref at the root location", hostile: true, relaxed: "anchor",
		schema: `{"type":"object","allOf":[{"$ref":"#args"}],"$defs":{"a":{"$anchor":"args","properties":{"a":{}},"additionalProperties":false}}}`,
		accept: []string{`{"a":1}`}},
	{name: "$id in a branch", hostile: true, relaxed: "$id",
		schema: `{"type":"object","allOf":[{"$id":"https://example.com/branch","properties":{"a":{}},"additionalProperties":false}]}`,
		accept: []string{`{"a":1}`}},
	{name: "not valid JSON Schema", relaxed: "not valid JSON Schema",
		schema: `{"type":"object","properties":{"a":{"type":"integer"}},"minProperties":"one"}`},
}

// TestExposedSchemaAcceptsEveryFleetCall: for each fleet schema, every call
// it accepts is accepted by the exposed schema with "fleet" added (checked
// by santhosh-tekuri/jsonschema), every call it refuses is still refused
// where the patch is exact, the naive merge refused some call where the
// case says so, and relaxations are reported with their reason.
func TestExposedSchemaAcceptsEveryFleetCall(t *testing.T) {
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.accept != nil || tc.reject != nil {
				up := validatorFor(t, tc.schema, tc.resources)
				for _, in := range tc.accept {
					if !up(in) {
						t.Fatalf("case error: the fleet's schema refuses %s", in)
					}
				}
				for _, in := range tc.reject {
					if up(in) {
						t.Fatalf("case error: the fleet's schema accepts %s", in)
					}
				}
			}
			cat := Merge(map[string][]*mcp.Tool{"kb": {tool("t", tc.schema)}}, nil)
			mt := cat.Tools["t"]
			if mt == nil {
				t.Fatalf("not exposed: %+v", cat.Excluded)
			}
			exposed := schemaOf(t, mt)
			js, _ := json.Marshal(exposed)
			ex := validatorFor(t, exposed, nil)
			for _, in := range tc.accept {
				if !ex(withFleet(t, in, "kb")) {
					t.Errorf("exposed schema refuses %s + fleet\nexposed: %s", in, js)
				}
			}
			if tc.hostile {
				naive := validatorFor(t, naiveSchema(t, tc.schema), tc.resources)
				refused := false
				for _, in := range tc.accept {
					refused = refused || !naive(withFleet(t, in, "kb"))
				}
				if !refused {
					t.Errorf("case error: the naive merge accepts every call, so the case tests nothing")
				}
			}
			for _, in := range []string{`{}`, `{"fleet":"zz"}`, `{"fleet":1}`} {
				if ex(in) {
					t.Errorf("exposed schema accepts %s (fleet is required, one of the fleets)", in)
				}
			}
			if tc.relaxed != "" {
				if len(cat.Relaxed) != 1 || cat.Relaxed[0].Tool != "t" || cat.Relaxed[0].Fleet != "kb" || !strings.Contains(cat.Relaxed[0].Reason, tc.relaxed) {
					t.Fatalf("relaxed = %+v, want one note on kb/t containing %q", cat.Relaxed, tc.relaxed)
				}
				return
			}
			if len(cat.Relaxed) != 0 {
				t.Fatalf("relaxed %+v, want an exact patch\nexposed: %s", cat.Relaxed, js)
			}
			for _, in := range tc.reject {
				if ex(withFleet(t, in, "kb")) {
					t.Errorf("exposed schema accepts %s + fleet, which the fleet refuses\nexposed: %s", in, js)
				}
			}
		})
	}
}

// TestExposedSchemaExcludesToolsThatUseFleet: a schema giving "fleet" a
// meaning anywhere at the arguments' own level cannot be exposed; the note
// names fleet, tool and where.
func TestExposedSchemaExcludesToolsThatUseFleet(t *testing.T) {
	for schema, where := range map[string]string{
		`{"type":"object","properties":{"fleet":{"type":"string"}}}`:                            `already has a "fleet" property`,
		`{"type":"object","allOf":[{"properties":{"fleet":{}}}]}`:                               "allOf/0/properties",
		`{"type":"object","anyOf":[{"required":["fleet"]},{"required":["a"]}]}`:                 "anyOf/0/required",
		`{"type":"object","dependentRequired":{"a":["fleet"]}}`:                                 "dependentRequired",
		`{"type":"object","dependentSchemas":{"fleet":{}}}`:                                     "dependentSchemas",
		`{"$ref":"#/$defs/A","$defs":{"A":{"type":"object","properties":{"fleet":{}}}}}`:        "$defs/A/properties",
		`{"type":"object","not":{"required":["fleet"]}}`:                                        "not/required",
		`{"type":"object","if":{"required":["a"]},"then":{"properties":{"fleet":{"const":1}}}}`: "then/properties",
	} {
		cat := Merge(map[string][]*mcp.Tool{"kb": {tool("t", schema), tool("ok", `{"type":"object"}`)}}, nil)
		if cat.Tools["t"] != nil || cat.Tools["ok"] == nil {
			t.Errorf("%s: exposed %v", schema, cat.Tools)
			continue
		}
		if len(cat.Excluded) != 1 || cat.Excluded[0].Fleet != "kb" || cat.Excluded[0].Tool != "t" || !strings.Contains(cat.Excluded[0].Reason, where) {
			t.Errorf("%s: excluded = %+v, want kb/t naming %q", schema, cat.Excluded, where)
		}
	}
	// A fleet whose tool uses fleet is left out; another fleet's tool of
	// that name stays exposed for that fleet alone.
	cat := Merge(map[string][]*mcp.Tool{
		"kb":   {tool("t", `{"type":"object","properties":{"fleet":{}}}`)},
		"docs": {tool("t", `{"type":"object"}`)},
	}, nil)
	if mt := cat.Tools["t"]; mt == nil || len(mt.Fleets) != 1 || mt.Fleets[0] != "docs" {
		t.Fatalf("t: %+v", mt)
	}
}

// TestDriftUnionOfPatchedSchemas: two fleets publish one tool name with
// different schemas, each closed in an allOf; the exposed union accepts
// every call either fleet accepts, with its fleet.
func TestDriftUnionOfPatchedSchemas(t *testing.T) {
	kb := `{"type":"object","allOf":[{"properties":{"a":{"type":"string"},"b":{"$ref":"#/$defs/n"}},"additionalProperties":false}],"required":["a"],"$defs":{"n":{"type":"integer"}}}`
	docs := `{"type":"object","properties":{"a":{"type":"integer"},"c":{"$ref":"#/$defs/n"}},"required":["a","c"],"additionalProperties":false,"$defs":{"n":{"type":"string"}}}`
	ops := `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`
	cat := Merge(map[string][]*mcp.Tool{"kb": {tool("t", kb)}, "docs": {tool("t", docs)}, "ops": {tool("t", ops)}}, nil)
	mt := cat.Tools["t"]
	if mt == nil || !mt.Drift {
		t.Fatalf("t: %+v", mt)
	}
	ex := validatorFor(t, schemaOf(t, mt), nil)
	for fleet, calls := range map[string][]string{
		"kb":   {`{"a":"x"}`, `{"a":"x","b":1}`},
		"docs": {`{"a":1,"c":"s"}`},
		"ops":  {`{"a":"y"}`},
	} {
		schema := map[string]string{"kb": kb, "docs": docs, "ops": ops}[fleet]
		up := validatorFor(t, schema, nil)
		for _, in := range calls {
			if !up(in) {
				t.Fatalf("case error: %s refuses %s", fleet, in)
			}
			if !ex(withFleet(t, in, fleet)) {
				js, _ := json.Marshal(mt.Tool.InputSchema)
				t.Errorf("union refuses %s's call %s\nexposed: %s", fleet, in, js)
			}
		}
	}
	if rep := cat.DriftReport(); len(rep) != 1 || rep[0].Tool != "t" {
		t.Errorf("drift report %+v", rep)
	}
	// Every fleet closed at the top: the union stays closed.
	cat = Merge(map[string][]*mcp.Tool{"docs": {tool("t", docs)}, "ops": {tool("t", ops)}}, nil)
	ex = validatorFor(t, schemaOf(t, cat.Tools["t"]), nil)
	if ex(`{"fleet":"ops","a":"x","zzz":1}`) {
		t.Errorf("union of two closed schemas accepts an unknown property")
	}
	if !ex(`{"fleet":"docs","a":1,"c":"s"}`) || !ex(`{"fleet":"ops","a":"x"}`) {
		t.Errorf("union refuses a fleet's call")
	}
}

// schemaGen builds a fleet schema from bytes (0 once they run out): a mix
// of the keywords that restrict an object's property set, nested in
// in-place applicators, $refs to $defs and to the root.
type schemaGen struct{ b []byte }

func (g *schemaGen) next(n int) int {
	if len(g.b) == 0 {
		return 0
	}
	v := int(g.b[0]) % n
	g.b = g.b[1:]
	return v
}

var genNames = []string{"a", "b", "c"}

func (g *schemaGen) names() []any {
	out := []any{}
	for _, n := range genNames {
		if g.next(2) == 1 {
			out = append(out, n)
		}
	}
	return out
}

func (g *schemaGen) value() any {
	switch g.next(5) {
	case 0:
		return map[string]any{"type": "integer"}
	case 1:
		return map[string]any{"type": "string"}
	case 2:
		return map[string]any{"$ref": "#"} // the root, applied to a property
	case 3:
		return map[string]any{"$ref": "#/$defs/D0"}
	}
	return map[string]any{}
}

func (g *schemaGen) schema(depth int) any {
	kinds := 18
	if depth == 0 {
		kinds = 4
	}
	props := func() map[string]any {
		m := map[string]any{}
		for _, n := range g.names() {
			m[n.(string)] = g.value()
		}
		return m
	}
	switch g.next(kinds) {
	case 0:
		return map[string]any{"properties": props(), "additionalProperties": g.next(2) == 0}
	case 1:
		return map[string]any{"required": g.names()}
	case 2:
		return map[string]any{"maxProperties": g.next(4)}
	case 3:
		return map[string]any{"minProperties": g.next(4)}
	case 4:
		return map[string]any{"allOf": []any{g.schema(depth - 1), g.schema(depth - 1)}}
	case 5:
		return map[string]any{"anyOf": []any{g.schema(depth - 1), g.schema(depth - 1)}}
	case 6:
		return map[string]any{"oneOf": []any{g.schema(depth - 1), g.schema(depth - 1)}}
	case 7:
		return map[string]any{"not": g.schema(depth - 1)}
	case 8:
		return map[string]any{"if": g.schema(depth - 1), "then": g.schema(depth - 1), "else": g.schema(depth - 1)}
	case 9:
		return map[string]any{"propertyNames": map[string]any{"enum": g.names()}}
	case 10:
		return map[string]any{"allOf": []any{map[string]any{"properties": props()}}, "unevaluatedProperties": false}
	case 11:
		return map[string]any{"$ref": "#/$defs/D" + []string{"0", "1"}[g.next(2)]}
	case 12:
		return map[string]any{"dependentSchemas": map[string]any{genNames[g.next(3)]: g.schema(depth - 1)}}
	case 13:
		return map[string]any{"dependentRequired": map[string]any{genNames[g.next(3)]: g.names()}}
	case 14:
		return map[string]any{"patternProperties": map[string]any{"^[ab]": g.value()}, "additionalProperties": false}
	case 15:
		return map[string]any{"propertyNames": map[string]any{"pattern": []string{"^[a-z]+$", "^[ab]$"}[g.next(2)]}}
	case 16:
		return map[string]any{"properties": props(), "unevaluatedProperties": g.value()}
	}
	return g.next(2) == 0
}

// genInstances are every object over genNames with values absent, 1, "s"
// or {"b": 1}.
func genInstances() []string {
	vals := []any{nil, 1, "s", map[string]any{"b": 1}}
	var out []string
	for i := 0; i < 64; i++ {
		m := map[string]any{}
		for j, n := range genNames {
			if v := vals[(i>>(2*j))&3]; v != nil {
				m[n] = v
			}
		}
		b, _ := json.Marshal(m)
		out = append(out, string(b))
	}
	return out
}

// checkGenerated builds a schema from data and checks, over genInstances
// with a real validator, that the exposed schema judges x + fleet as the
// fleet's schema judges x (exact patch), or at least accepts it whenever
// the fleet does (relaxed).
func checkGenerated(t *testing.T, data []byte) {
	g := &schemaGen{b: data}
	root := map[string]any{"$defs": map[string]any{"D0": g.schema(1), "D1": g.schema(2)}}
	switch body := g.schema(3).(type) {
	case map[string]any:
		maps.Copy(root, body)
	case bool:
		if !body {
			root["not"] = map[string]any{}
		}
	}
	up, _ := json.Marshal(root)
	cat := Merge(map[string][]*mcp.Tool{"kb": {tool("t", string(up))}}, nil)
	mt := cat.Tools["t"]
	if mt == nil {
		t.Fatalf("%s: not exposed: %+v", up, cat.Excluded)
	}
	ex := validatorFor(t, schemaOf(t, mt), nil)
	fv := validatorFor(t, string(up), nil)
	exact := len(cat.Relaxed) == 0
	for _, in := range genInstances() {
		want, got := fv(in), ex(withFleet(t, in, "kb"))
		if want && !got || exact && got && !want {
			js, _ := json.Marshal(mt.Tool.InputSchema)
			t.Fatalf("fleet schema %s: %s → %v, exposed (relaxed %v) with fleet → %v\nexposed: %s", up, in, want, cat.Relaxed, got, js)
		}
	}
}

// TestExposedSchemaOnGeneratedSchemas runs checkGenerated on 400 schemas
// from a fixed pseudo-random sequence.
func TestExposedSchemaOnGeneratedSchemas(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 6))
	for range 400 {
		data := make([]byte, 64)
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		checkGenerated(t, data)
	}
}

// FuzzExposedSchema: go test -fuzz FuzzExposedSchema ./proxy explores
// further.
func FuzzExposedSchema(f *testing.F) {
	for _, s := range []string{"", "\x04\x00\x01", "\x0b\x07\x0a\x00", "\x08\x09\x02\x03\x01\x00\x0e", "\x10\x02\x07\x01\x05\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 256 {
			return
		}
		checkGenerated(t, data)
	})
}

// BenchmarkMerge measures one Merge of three fleets with the stand-in's
// eight tools each plus the schemaCases (about 45 tools per fleet), every
// schema patched and compiled: the cost of one catalogue refresh.
func BenchmarkMerge(b *testing.B) {
	perFleet := map[string][]*mcp.Tool{}
	for _, f := range []string{"docs", "kb", "ops"} {
		var tools []*mcp.Tool
		for i := range 8 {
			tools = append(tools, tool("fleet_"+string(rune('a'+i)), `{"type":"object","properties":{"id":{"type":"string","description":"member id"},"text":{"type":"string"}},"required":["id"],"additionalProperties":false}`))
		}
		for i, tc := range schemaCases {
			tools = append(tools, tool("case_"+string(rune('a'+i)), tc.schema))
		}
		perFleet[f] = tools
	}
	b.ResetTimer()
	for b.Loop() {
		if cat := Merge(perFleet, nil); len(cat.Tools) == 0 {
			b.Fatal("empty catalogue")
		}
	}
}
