package registry

import (
	"sort"
	"strings"
)

// Outline is the statement structure of a fleets.toml text: where each
// table header and each key/value statement starts. Tools that edit the
// file in place (fleetmgr add and remove) use it to find a table's lines
// without re-implementing TOML's lexical rules: it comes from the same
// scanner that gives Load its file:line diagnostics, so multi-line strings
// and arrays that span lines are skipped the same way.
//
// Like that scanner it is tolerant, not a validator: call it on text that
// toml.Decode accepts, and check an edit by decoding the result.
type Outline struct {
	// Headers are the table headers, [t] and [[t]], in source order.
	Headers []OutlineHeader
	// Keys are the key/value statements outside inline tables, in source
	// order: the line each starts on and its full key path (the section's
	// path followed by the statement's dotted key). An element of an array
	// of tables appears in the path as "[N]".
	Keys []OutlineKey
}

// OutlineHeader is one table header.
type OutlineHeader struct {
	// Line is the 1-based line the header is written on.
	Line int
	// Path is the key the header names, unquoted: [fleets."kb"] is
	// ["fleets", "kb"].
	Path []string
	// Array is true for an array-of-tables header [[t]].
	Array bool
}

// OutlineKey is one key/value statement.
type OutlineKey struct {
	// Line is the 1-based line the statement starts on.
	Line int
	// Path is the full key path the statement assigns.
	Path []string
}

// OutlineOf scans src (TOML text) and returns its outline. It never fails:
// on text that is not TOML it returns what it could recognise.
func OutlineOf(src string) Outline {
	l := locate(src)
	starts := []int{0} // byte offset of each line's start
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	var o Outline
	for _, h := range l.headers {
		array := false
		if h.line >= 1 && h.line <= len(starts) {
			array = strings.HasPrefix(strings.TrimLeft(src[starts[h.line-1]:], " \t"), "[[")
		}
		o.Headers = append(o.Headers, OutlineHeader{Line: h.line, Path: exportPath(h.parts), Array: array})
	}
	lines := make([]int, 0, len(l.keys))
	for ln := range l.keys {
		lines = append(lines, ln)
	}
	sort.Ints(lines)
	for _, ln := range lines {
		o.Keys = append(o.Keys, OutlineKey{Line: ln, Path: exportPath(l.keys[ln])})
	}
	return o
}

// exportPath copies a locator path, writing array indices as "[N]".
func exportPath(parts []string) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if strings.HasPrefix(p, indexMark) {
			p = "[" + p[len(indexMark):] + "]"
		}
		out[i] = p
	}
	return out
}
