package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Input schemas as fleetmgr exposes them (docs/ARCHITECTURE.md "The merged
// catalogue").
//
// A re-exposed tool takes the fleet's own arguments plus "fleet", which
// fleetmgr strips before forwarding. The exposed schema must accept every
// call the fleet's schema accepts with "fleet" added, and should refuse
// what the fleet's schema refuses. Adding "fleet" at the top level is not
// enough: a fleet's schema can restrict the set of properties of the
// arguments object in places JSON Schema evaluates against that same object
// (allOf/anyOf/oneOf, not, if/then/else, dependentSchemas, $ref), and with
// keywords other than additionalProperties (unevaluatedProperties,
// propertyNames, maxProperties, minProperties).
//
// exposeSchema therefore patches every schema that applies to the
// arguments object itself ("root-location" schemas), so that for every
// arguments object x without "fleet" and every fleet name v,
// patched(x + {"fleet": v}) == upstream(x):
//
//   - additionalProperties / unevaluatedProperties that could refuse a
//     string: "fleet": {} is added to that schema's properties;
//   - propertyNames P becomes {"anyOf": [P, {"enum": ["fleet"]}]};
//   - maxProperties and minProperties are raised by one;
//   - a local $ref reached from a root-location schema is pointed at a
//     patched copy of its target (kept in $defs, or definitions for
//     drafts 4 to 7), so the target stays as it was wherever else it is
//     used; a $ref used elsewhere that targets a root-location schema
//     (a recursive schema referring to "#") is pointed at an unpatched
//     copy of the fleet's schema.
//
// Patching is exact, so it holds under not, oneOf and if as well. Where it
// cannot be done (a $ref that is not a local JSON pointer, $dynamicRef,
// an object in const or enum, a patternProperties pattern matching "fleet"
// whose schema may refuse a string, a nested $id, a schema that does not
// compile), the exposed schema is the fleet's relaxed one: its top-level
// properties and required only (plus $defs/definitions they refer to).
// A relaxed schema accepts more than the fleet does; the fleet validates
// every call itself, so a relaxed tool is still callable, which a schema
// that no call satisfies is not. Each relaxation is reported with its
// reason (Catalogue.Relaxed). A schema that itself gives "fleet" a meaning
// (a "fleet" property, or "fleet" in required, dependentRequired or
// dependentSchemas of a root-location schema) cannot be exposed at all
// (Catalogue.Excluded).

// fleetPlaceholder is the fleet property of a patched schema until Merge
// sets the real one (type string, enum of the fleets).
func fleetPlaceholder() map[string]any { return map[string]any{} }

// exposure is one fleet's tool input schema as fleetmgr exposes it: the
// schema (with properties.fleet and "fleet" first in required), and why it
// was relaxed ("" when it was patched exactly).
type exposure struct {
	schema  map[string]any
	relaxed string
}

// excludedError says why a tool cannot be exposed at all.
type excludedError struct{ reason string }

func (e *excludedError) Error() string { return e.reason }

// exposeSchema returns the schema fleetmgr exposes for a fleet's tool whose
// input schema is up (decoded JSON, numbers as json.Number; not modified),
// or an *excludedError. See the comment at the top of this file.
func exposeSchema(up map[string]any) (exposure, error) {
	doc, perr := patchSchema(up)
	var ex *excludedError
	if errors.As(perr, &ex) {
		return exposure{}, perr
	}
	if perr == nil {
		cerr := compileSchema(doc)
		if cerr == nil {
			return exposure{schema: doc}, nil
		}
		perr = fmt.Errorf("fleetmgr's patched schema does not compile: %s", oneLineErr(cerr))
	}
	why := perr.Error()
	var load *jsonschema.LoadURLError
	if uerr := compileSchema(up); uerr != nil && !errors.As(uerr, &load) {
		why = "its schema is not valid JSON Schema: " + oneLineErr(uerr)
	}
	rel, rerr := relaxSchema(up)
	if rerr == nil {
		rerr = compileSchema(rel)
	}
	if rerr != nil {
		return exposure{schema: minimalSchema(up), relaxed: why + "; exposed with the fleet argument only"}, nil
	}
	return exposure{schema: rel, relaxed: why + "; exposed with its top-level properties and required only"}, nil
}

// minimalSchema is the last resort: an object with the fleet argument.
func minimalSchema(up map[string]any) map[string]any {
	out := map[string]any{"type": "object", "properties": map[string]any{FleetArg: fleetPlaceholder()}, "required": []any{FleetArg}}
	if d, ok := up["description"].(string); ok {
		out["description"] = d
	}
	return out
}

// relaxedKeep are the top-level keywords a relaxed schema keeps.
var relaxedKeep = []string{"$schema", "$id", "$comment", "title", "description", "properties", "required", "$defs", "definitions"}

// relaxSchema builds the relaxed schema of up: type object, its top-level
// properties and required, the definitions they may refer to, and the
// fleet argument. A $ref elsewhere that pointed at the root or at a
// dropped keyword is pointed at an unpatched copy of up.
func relaxSchema(up map[string]any) (map[string]any, error) {
	doc := map[string]any{"type": "object"}
	for _, k := range relaxedKeep {
		if v, ok := up[k]; ok {
			doc[k] = deepCopy(v)
		}
	}
	props, ok := doc["properties"].(map[string]any)
	if !ok {
		props = map[string]any{}
	}
	props[FleetArg] = fleetPlaceholder()
	doc["properties"] = props
	doc["required"] = withFleetFirst(doc["required"])
	p := newPatcher(up, doc)
	err := p.rewriteNested(func(tp string) bool {
		first, _, _ := strings.Cut(strings.TrimPrefix(tp, "/"), "/")
		return tp == "" || (first != "properties" && first != "$defs" && first != "definitions")
	})
	return doc, err
}

// withFleetFirst returns required (a JSON array of names) with "fleet"
// first, as a []any.
func withFleetFirst(required any) []any {
	out := []any{FleetArg}
	for _, s := range stringList(required) {
		if s != FleetArg {
			out = append(out, s)
		}
	}
	return out
}

// patchSchema returns a patched copy of up (see the top of this file), an
// *excludedError, or another error saying why up cannot be patched
// exactly.
func patchSchema(up map[string]any) (map[string]any, error) {
	doc := deepCopy(up).(map[string]any)
	doc["type"] = "object"
	p := newPatcher(up, doc)
	p.collectInPlace(doc, "")
	if err := p.visit(doc, "", ""); err != nil {
		return nil, err
	}
	if p.fail != nil {
		return nil, p.fail
	}
	props, ok := doc["properties"].(map[string]any)
	if !ok {
		if _, present := doc["properties"]; present {
			return nil, errors.New("its properties is not an object")
		}
		props = map[string]any{}
	}
	props[FleetArg] = fleetPlaceholder()
	doc["properties"] = props
	doc["required"] = withFleetFirst(doc["required"])
	err := p.rewriteNested(func(tp string) bool {
		if p.inPlace[tp] {
			return true
		}
		for _, m := range p.moved {
			if tp == m || strings.HasPrefix(tp, m+"/") {
				return true
			}
		}
		return false
	})
	return doc, err
}

// patcher holds the state of one patchSchema or relaxSchema.
type patcher struct {
	orig    map[string]any  // the fleet's schema, never modified
	doc     map[string]any  // the schema being built
	baseID  string          // orig's $id without fragment, "" when none
	defsKey string          // "$defs", or "definitions" for drafts 4 to 7
	inPlace map[string]bool // JSON pointers of the root-location schemas of the tree (no $ref followed)
	visited map[string]bool // pointers (in doc) of schemas patched
	copies  map[string]string
	// followed are the pointers (in doc) of root-location schemas whose
	// $ref was followed (and possibly repointed at a patched copy).
	followed map[string]bool
	// moved are pointers (in orig) of propertyNames schemas wrapped in an
	// anyOf: a $ref to them or below now lands elsewhere.
	moved    []string
	pristine string // pointer of the unpatched copy of orig in doc, once made
	fail     error  // the first reason exact patching is impossible
}

func newPatcher(orig, doc map[string]any) *patcher {
	p := &patcher{orig: orig, doc: doc, defsKey: "$defs",
		inPlace: map[string]bool{}, visited: map[string]bool{}, copies: map[string]string{}, followed: map[string]bool{}}
	if id, ok := orig["$id"].(string); ok {
		p.baseID, _, _ = strings.Cut(id, "#")
	}
	if s, ok := orig["$schema"].(string); ok {
		for _, d := range []string{"draft-04", "draft-06", "draft-07"} {
			if strings.Contains(s, d) {
				p.defsKey = "definitions"
			}
		}
	}
	return p
}

func (p *patcher) failf(format string, args ...any) {
	if p.fail == nil {
		p.fail = fmt.Errorf(format, args...)
	}
}

// Keywords whose subschemas apply to the same instance as the schema
// holding them (in-place applicators), and those whose subschemas apply
// elsewhere (to properties, items, names).
var (
	inPlaceArrays = []string{"allOf", "anyOf", "oneOf"}
	inPlaceSingle = []string{"not", "if", "then", "else"}
	inPlaceMaps   = []string{"dependentSchemas", "dependencies"}
	nestedSingle  = []string{"items", "additionalItems", "contains", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "propertyNames", "contentSchema"}
	nestedArrays  = []string{"prefixItems", "items"}
	nestedMaps    = []string{"properties", "patternProperties", "$defs", "definitions"}
)

// child is one subschema with its JSON pointer.
type child struct {
	ptr  string
	node any
}

// subschemas lists n's subschemas: in-place ones when inPlace, the others
// otherwise. dependencies values that are arrays (required names) are not
// schemas and are left out.
func subschemas(n map[string]any, ptr string, inPlace bool) []child {
	single, arrays, maps := nestedSingle, nestedArrays, nestedMaps
	if inPlace {
		single, arrays, maps = inPlaceSingle, inPlaceArrays, inPlaceMaps
	}
	var out []child
	for _, k := range single {
		if v, ok := n[k]; ok && isSchema(v) {
			out = append(out, child{ptr + "/" + escapeToken(k), v})
		}
	}
	for _, k := range arrays {
		if a, ok := n[k].([]any); ok {
			for i, v := range a {
				out = append(out, child{ptr + "/" + k + "/" + strconv.Itoa(i), v})
			}
		}
	}
	for _, k := range maps {
		if m, ok := n[k].(map[string]any); ok {
			for _, name := range sortedKeys(m) {
				if isSchema(m[name]) {
					out = append(out, child{ptr + "/" + escapeToken(k) + "/" + escapeToken(name), m[name]})
				}
			}
		}
	}
	return out
}

func isSchema(v any) bool {
	switch v.(type) {
	case bool, map[string]any:
		return true
	}
	return false
}

// collectInPlace records the pointers of node and its in-place subschemas,
// without following $ref.
func (p *patcher) collectInPlace(node any, ptr string) {
	p.inPlace[ptr] = true
	if n, ok := node.(map[string]any); ok {
		for _, c := range subschemas(n, ptr, true) {
			p.collectInPlace(c.node, c.ptr)
		}
	}
}

// visit patches one root-location schema (at ptr in doc; shown is where
// it is in the fleet's schema, for messages) and, recursively, its in-place
// subschemas and local $ref targets. It returns only an *excludedError;
// reasons for relaxing go to p.fail.
func (p *patcher) visit(node any, ptr, shown string) error {
	n, ok := node.(map[string]any)
	if !ok {
		if _, isBool := node.(bool); !isBool {
			p.failf("%s is not a schema", where(shown))
		}
		return nil
	}
	if p.visited[ptr] {
		return nil
	}
	p.visited[ptr] = true
	if err := namesFleet(n, shown); err != nil {
		return err
	}
	if _, ok := n["$id"]; ok && ptr != "" {
		p.failf("%s has its own $id", where(shown))
	}
	for _, k := range []string{"$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"} {
		if _, ok := n[k]; ok {
			p.failf("%s uses %s", where(shown), k)
		}
	}
	if a, ok := n["$anchor"].(string); ok && refersTo(p.orig, "#"+a) {
		p.failf("%s has $anchor %q, which a $ref names", where(shown), a)
	}
	if c, ok := n["const"]; ok {
		if _, obj := c.(map[string]any); obj {
			p.failf("%s has an object const", where(shown))
		}
	}
	if e, ok := n["enum"].([]any); ok && slices.ContainsFunc(e, func(v any) bool { _, obj := v.(map[string]any); return obj }) {
		p.failf("%s has an object in enum", where(shown))
	}
	if pp, ok := n["patternProperties"].(map[string]any); ok {
		for _, pat := range sortedKeys(pp) {
			re, err := compileECMA(pat)
			if err != nil {
				p.failf("%s: patternProperties %q does not compile: %v", where(shown), pat, err)
				continue
			}
			if re.MatchString(FleetArg) && !acceptsAnyString(pp[pat]) {
				p.failf("%s: patternProperties %q matches %q and may refuse its value", where(shown), pat, FleetArg)
			}
		}
	}
	if !acceptsAnyString(n["additionalProperties"]) || !acceptsAnyString(n["unevaluatedProperties"]) {
		props, ok := n["properties"].(map[string]any)
		if !ok {
			if _, present := n["properties"]; present {
				p.failf("%s: properties is not an object", where(shown))
			}
			props = map[string]any{}
			n["properties"] = props
		}
		props[FleetArg] = fleetPlaceholder()
	}
	if pn, ok := n["propertyNames"]; ok && !acceptsName(pn, FleetArg) {
		n["propertyNames"] = map[string]any{"anyOf": []any{pn, map[string]any{"enum": []any{FleetArg}}}}
		p.moved = append(p.moved, ptr+"/propertyNames")
	}
	for _, k := range []string{"maxProperties", "minProperties"} {
		if v, ok := n[k]; ok {
			b, err := bumpInt(v)
			if err != nil {
				p.failf("%s: %s: %v", where(shown), k, err)
				continue
			}
			n[k] = b
		}
	}
	for _, c := range subschemas(n, ptr, true) {
		if err := p.visit(c.node, c.ptr, shown+strings.TrimPrefix(c.ptr, ptr)); err != nil {
			return err
		}
	}
	if ref, ok := n["$ref"].(string); ok {
		return p.followRef(n, ptr, shown, ref)
	}
	return nil
}

// followRef makes the $ref of root-location schema n (at ptr) point at a
// patched schema: a root-location schema of the tree is patched where it
// is; any other target is copied into $defs (once), and the copy patched.
func (p *patcher) followRef(n map[string]any, ptr, shown, ref string) error {
	tp, err := p.localPointer(ref)
	if err != nil {
		p.failf("%s: %v", where(shown), err)
		return nil
	}
	p.followed[ptr] = true
	if p.inPlace[tp] {
		return nil
	}
	if c, ok := p.copies[tp]; ok {
		n["$ref"] = "#" + c
		return nil
	}
	target, ok := lookup(p.orig, tp)
	if !ok || !isSchema(target) {
		p.failf("%s: $ref %q points at no schema", where(shown), ref)
		return nil
	}
	if k := resourceKeyword(target, ""); k != "" {
		p.failf("%s: the target of $ref %q has %s", where(shown), ref, k)
		return nil
	}
	defs, err := p.defs()
	if err != nil {
		p.failf("%v", err)
		return nil
	}
	name := uniqueKey(defs, "fleetmgr_"+lastToken(tp))
	cp := deepCopy(target)
	defs[name] = cp
	np := "/" + escapeToken(p.defsKey) + "/" + escapeToken(name)
	p.copies[tp] = np
	n["$ref"] = "#" + np
	return p.visit(cp, np, tp)
}

// defs returns doc's $defs (or definitions) object, creating it.
func (p *patcher) defs() (map[string]any, error) {
	v, ok := p.doc[p.defsKey]
	if !ok {
		m := map[string]any{}
		p.doc[p.defsKey] = m
		return m, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("its %s is not an object", p.defsKey)
	}
	return m, nil
}

// rewriteNested points every $ref of doc not followed as root-location
// (a $ref applied to a property, an item, …) whose target satisfies
// changed at the same place in an unpatched copy of orig, made once.
// Subschemas with their own $id are separate resources and left alone.
func (p *patcher) rewriteNested(changed func(tp string) bool) error {
	var walk func(node any, ptr string) error
	walk = func(node any, ptr string) error {
		n, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		if _, hasID := n["$id"]; hasID && ptr != "" {
			return nil
		}
		if ref, ok := n["$ref"].(string); ok && !p.followed[ptr] {
			if tp, err := p.localPointer(ref); err == nil && changed(tp) {
				if err := p.makePristine(); err != nil {
					return err
				}
				_, frag, _ := strings.Cut(ref, "#")
				n["$ref"] = "#" + p.pristine + frag
			}
		}
		for _, inPlace := range []bool{true, false} {
			for _, c := range subschemas(n, ptr, inPlace) {
				if err := walk(c.node, c.ptr); err != nil {
					return err
				}
			}
		}
		return nil
	}
	had := p.pristine
	if err := walk(p.doc, ""); err != nil {
		return err
	}
	if had == "" && p.pristine != "" {
		// The copy itself was skipped if made after the walk passed $defs,
		// and is new anyway: its own $refs get the same treatment.
		pr, _ := lookup(p.doc, p.pristine)
		return walk(pr, p.pristine)
	}
	return nil
}

// makePristine adds an unpatched copy of orig to doc's $defs, once
// (without its $schema, $id, anchors and definitions, which stay shared at
// the root). It is never patched; rewriteNested repoints its own $refs.
func (p *patcher) makePristine() error {
	if p.pristine != "" {
		return nil
	}
	cp := deepCopy(p.orig).(map[string]any)
	for _, k := range []string{"$schema", "$id", "$anchor", "$dynamicAnchor", "$defs", "definitions"} {
		delete(cp, k)
	}
	if k := resourceKeyword(cp, ""); k != "" {
		return fmt.Errorf("its schema refers to itself and has %s", k)
	}
	defs, err := p.defs()
	if err != nil {
		return err
	}
	name := uniqueKey(defs, "fleetmgr_upstream")
	defs[name] = cp
	p.pristine = "/" + escapeToken(p.defsKey) + "/" + escapeToken(name)
	return nil
}

// localPointer returns the JSON pointer a $ref names within orig: "#…",
// or orig's $id followed by "#…". Anything else (another document, an
// anchor) is an error.
func (p *patcher) localPointer(ref string) (string, error) {
	base, frag, _ := strings.Cut(ref, "#")
	if base != "" && (p.baseID == "" || base != p.baseID) {
		return "", fmt.Errorf("$ref %q is not a local reference", ref)
	}
	dec, err := url.PathUnescape(frag)
	if err != nil {
		return "", fmt.Errorf("$ref %q: %v", ref, err)
	}
	if dec != "" && !strings.HasPrefix(dec, "/") {
		return "", fmt.Errorf("$ref %q names an anchor", ref)
	}
	return dec, nil
}

// namesFleet returns an *excludedError when root-location schema n gives
// the fleet argument a meaning of its own.
func namesFleet(n map[string]any, ptr string) error {
	at := func(kw string) error {
		if ptr == "" && kw == "properties" {
			return &excludedError{fmt.Sprintf("its input schema already has a %q property, so fleetmgr cannot add its own", FleetArg)}
		}
		return &excludedError{fmt.Sprintf("its input schema already uses a %q argument (%s), so fleetmgr cannot add its own", FleetArg, strings.TrimPrefix(ptr+"/"+kw, "/"))}
	}
	if props, ok := n["properties"].(map[string]any); ok {
		if _, has := props[FleetArg]; has {
			return at("properties")
		}
	}
	if slices.Contains(stringList(n["required"]), FleetArg) {
		return at("required")
	}
	for _, kw := range []string{"dependentRequired", "dependentSchemas", "dependencies"} {
		m, ok := n[kw].(map[string]any)
		if !ok {
			continue
		}
		if _, has := m[FleetArg]; has {
			return at(kw)
		}
		for _, v := range m {
			if _, isList := v.([]any); isList && slices.Contains(stringList(v), FleetArg) {
				return at(kw)
			}
		}
	}
	return nil
}

// acceptsAnyString reports whether schema v (absent: nil) surely accepts
// every string: absent, true, or only annotations and a type that allows
// strings.
func acceptsAnyString(v any) bool {
	switch s := v.(type) {
	case nil:
		return true
	case bool:
		return s
	case map[string]any:
		for k, val := range s {
			switch k {
			case "title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly":
			case "type":
				if t, ok := val.(string); ok && t == "string" {
					continue
				}
				if !slices.Contains(stringList(val), "string") {
					return false
				}
			default:
				return false
			}
		}
		return true
	}
	return false
}

// acceptsName reports whether propertyNames schema v surely accepts name:
// acceptsAnyString, or only a pattern (with annotations) that matches it.
func acceptsName(v any, name string) bool {
	if acceptsAnyString(v) {
		return true
	}
	s, ok := v.(map[string]any)
	if !ok {
		return false
	}
	pat, ok := s["pattern"].(string)
	if !ok {
		return false
	}
	rest := make(map[string]any, len(s))
	for k, val := range s {
		if k != "pattern" {
			rest[k] = val
		}
	}
	re, err := compileECMA(pat)
	return err == nil && re.MatchString(name) && acceptsAnyString(rest)
}

// bumpInt returns integer v (a JSON number) plus one.
func bumpInt(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return json.Number(strconv.FormatInt(i+1, 10)), nil
		}
		if f, err := x.Float64(); err == nil && f == float64(int64(f)) {
			return json.Number(strconv.FormatInt(int64(f)+1, 10)), nil
		}
	case float64:
		if x == float64(int64(x)) {
			return x + 1, nil
		}
	}
	return nil, fmt.Errorf("%v is not an integer", v)
}

// resourceKeyword returns "$id", "$anchor" or "$dynamicAnchor" when a
// schema in node (below the top when ptr is "") declares one — a copy
// would declare it twice — or "".
func resourceKeyword(node any, ptr string) string {
	n, ok := node.(map[string]any)
	if !ok {
		return ""
	}
	for _, k := range []string{"$id", "$anchor", "$dynamicAnchor"} {
		if _, has := n[k]; has {
			return k
		}
	}
	for _, inPlace := range []bool{true, false} {
		for _, c := range subschemas(n, ptr, inPlace) {
			if k := resourceKeyword(c.node, c.ptr); k != "" {
				return k
			}
		}
	}
	return ""
}

// where names a schema location for reasons: "the schema" or "allOf/0".
func where(ptr string) string {
	if ptr == "" {
		return "top level"
	}
	return strings.TrimPrefix(ptr, "/")
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

func lastToken(ptr string) string {
	i := strings.LastIndexByte(ptr, '/')
	return unescapeToken(ptr[i+1:])
}

// lookup resolves JSON pointer ptr ("" or "/a/0/b") in doc.
func lookup(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescapeToken(tok)
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != tok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// uniqueKey returns base, or base_2, base_3 … whichever m lacks. Only
// [A-Za-z0-9_-] are kept from base, so the key needs no escaping in a
// $ref.
func uniqueKey(m map[string]any, base string) string {
	base = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, base)
	k := base
	for i := 2; ; i++ {
		if _, taken := m[k]; !taken {
			return k
		}
		k = base + "_" + strconv.Itoa(i)
	}
}

// deepCopy copies decoded JSON.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	return v
}

// decodeSchema decodes a schema keeping numbers exact (json.Number).
func decodeSchema(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// ecmaRegexp adapts regexp2 (ECMAScript syntax, the dialect JSON Schema
// names for pattern) to jsonschema.Regexp.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok
}

func (r ecmaRegexp) String() string { return r.re.String() }

// compileECMA compiles a JSON Schema pattern (ECMA-262), falling back to
// regexp2's default syntax for what its ECMAScript mode lacks (\p{…}).
// Matching stops after a second.
func compileECMA(pat string) (ecmaRegexp, error) {
	re, err := regexp2.Compile(pat, regexp2.ECMAScript)
	if err != nil {
		var err2 error
		if re, err2 = regexp2.Compile(pat, regexp2.None); err2 != nil {
			return ecmaRegexp{}, err
		}
	}
	re.MatchTimeout = time.Second
	return ecmaRegexp{re}, nil
}

// compileSchema compiles doc with santhosh-tekuri/jsonschema, loading
// nothing from outside (no files, no network: a $ref to another document
// is an error) and with ECMA-262 patterns.
func compileSchema(doc map[string]any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	c.UseRegexpEngine(func(s string) (jsonschema.Regexp, error) {
		re, err := compileECMA(s)
		if err != nil {
			return nil, err
		}
		return re, nil
	})
	const loc = "urn:fleetmgr:input-schema"
	if err := c.AddResource(loc, v); err != nil {
		return err
	}
	_, err = c.Compile(loc)
	return err
}

// oneLineErr is err's text on one line, at most 300 bytes.
func oneLineErr(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

// unionSchema is the exposed schema of a tool that fleets publish with
// different schemas (drift), from each fleet's exposed schema: type object;
// the union of their top-level properties (a property defined differently
// by two fleets accepts either definition, anyOf); required = the
// intersection of their required lists; additionalProperties false only
// when every fleet's says so at the top and none has top-level
// patternProperties; their $defs/definitions when no two fleets define one
// name differently (otherwise properties that use $ref accept any value);
// no other keyword. A call any one fleet's schema accepts (with "fleet")
// is accepted; each fleet validates its own. Should that not compile, the
// fleet argument alone.
func unionSchema(exps []map[string]any) map[string]any {
	out := map[string]any{"type": "object"}
	for _, k := range []string{"title", "description", "$comment"} {
		if v, ok := exps[0][k]; ok {
			out[k] = deepCopy(v)
		}
	}
	if s, ok := exps[0]["$schema"]; ok && !slices.ContainsFunc(exps, func(e map[string]any) bool { return !jsonEqual(e["$schema"], s) }) {
		out["$schema"] = s
	}
	defs := map[string]map[string]any{"$defs": {}, "definitions": {}}
	conflict := false
	for _, e := range exps {
		for dk, merged := range defs {
			v, present := e[dk]
			m, ok := v.(map[string]any)
			if present && !ok {
				conflict = true
			}
			for k, d := range m {
				if old, seen := merged[k]; !seen {
					merged[k] = d
				} else if !jsonEqual(old, d) {
					conflict = true
				}
			}
		}
	}
	defsOf := map[string][]any{}
	required := map[string]int{}
	closed := true
	for _, e := range exps {
		props, _ := e["properties"].(map[string]any)
		for _, k := range sortedKeys(props) {
			if k == FleetArg {
				continue
			}
			if v := props[k]; !slices.ContainsFunc(defsOf[k], func(x any) bool { return jsonEqual(x, v) }) {
				defsOf[k] = append(defsOf[k], v)
			}
		}
		for _, r := range slices.Compact(slices.Sorted(slices.Values(stringList(e["required"])))) {
			required[r]++
		}
		_, pp := e["patternProperties"]
		if ap, ok := e["additionalProperties"].(bool); !ok || ap || pp {
			closed = false
		}
	}
	props := map[string]any{FleetArg: fleetPlaceholder()}
	for k, ds := range defsOf {
		var d any = deepCopy(ds[0])
		if len(ds) > 1 {
			d = map[string]any{"anyOf": deepCopy(ds)}
		}
		if conflict && hasRef(d) {
			loose := map[string]any{}
			for _, x := range ds {
				if m, ok := x.(map[string]any); ok {
					if desc, ok := m["description"].(string); ok {
						loose["description"] = desc
						break
					}
				}
			}
			d = loose
		}
		props[k] = d
	}
	out["properties"] = props
	req := []any{FleetArg}
	for _, r := range sortedKeys(required) {
		if r != FleetArg && required[r] == len(exps) {
			req = append(req, r)
		}
	}
	out["required"] = req
	if closed {
		out["additionalProperties"] = false
	}
	if !conflict {
		for dk, m := range defs {
			if len(m) > 0 {
				out[dk] = deepCopy(m)
			}
		}
	}
	if compileSchema(out) != nil {
		return minimalSchema(exps[0])
	}
	return out
}

// refersTo reports whether decoded JSON v holds a "$ref" whose value ends
// with suffix.
func refersTo(v any, suffix string) bool {
	switch x := v.(type) {
	case map[string]any:
		if r, ok := x["$ref"].(string); ok && strings.HasSuffix(r, suffix) {
			return true
		}
		for _, e := range x {
			if refersTo(e, suffix) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, func(e any) bool { return refersTo(e, suffix) })
	}
	return false
}

// hasRef reports whether decoded JSON v holds a "$ref" key anywhere.
func hasRef(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["$ref"]; ok {
			return true
		}
		for _, e := range x {
			if hasRef(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, hasRef)
	}
	return false
}
