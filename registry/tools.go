package registry

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// ToolRules are the tools.allow and tools.deny keys of [manager] or of a
// [fleets.NAME] table: glob patterns (path.Match syntax: *, ?, [a-z]) on
// the names of the fleet tools the operator's session sees. A tool is
// shown when some allow pattern matches it (no allow key: every tool) and
// no deny pattern does (deny wins). [manager]'s rules apply to every fleet:
// its deny patterns add to each fleet's, its allow list stands for a
// fleet that has none (docs/ARCHITECTURE.md "Which tools the operator
// sees").
type ToolRules struct {
	// Allow are the allow patterns; nil when the key is absent (every tool
	// is allowed), never nil but empty when it is [] (no tool is).
	Allow []ToolPattern
	// AllowLine is the line of the allow key (0 when absent).
	AllowLine int
	// Deny are the deny patterns; nil when the key is absent.
	Deny []ToolPattern
}

// ToolPattern is one glob of ToolRules with where it was written.
type ToolPattern struct {
	// Glob is the pattern as written.
	Glob string
	// Line is its 1-based line in fleets.toml.
	Line int
}

// Match reports whether tool matches the pattern (path.Match; a pattern
// Load accepted never fails to compile).
func (p ToolPattern) Match(tool string) bool {
	ok, _ := path.Match(p.Glob, tool)
	return ok
}

// CheckToolPattern returns an error saying why glob is not a pattern of
// tool names, or nil: it must be non-empty, compile as a path.Match
// pattern, and hold only the characters of tool names
// (^[a-zA-Z0-9_-]{1,64}$, the MCP tool name rule) besides *, ?, [, ], ^
// and !; a name without *, ? or [ is at most 64 characters. (The MCP
// specification, 2025-11-25, allows "." and 128 characters too; fleetmgr
// keeps to the names every MCP client and model API takes, and excludes
// other tools from its catalogue: proxy/catalogue.go.)
func CheckToolPattern(glob string) error {
	if glob == "" {
		return fmt.Errorf("empty pattern: write a tool name or a glob such as \"fleet_*\"")
	}
	if len(glob) > 256 {
		return fmt.Errorf("pattern longer than 256 bytes")
	}
	for _, r := range glob {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		case strings.ContainsRune("*?[]^!", r):
		default:
			return fmt.Errorf("%q: %q cannot be part of a tool name (tool names match ^[a-zA-Z0-9_-]{1,64}$; globs add * ? [ ])", glob, r)
		}
	}
	if !strings.ContainsAny(glob, "*?[") && len(glob) > 64 {
		return fmt.Errorf("%q is %d characters long: tool names are 1 to 64 (^[a-zA-Z0-9_-]{1,64}$), so it would match none", glob, len(glob))
	}
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob (%v): use * for any run of characters, ? for one, [a-z] for a set", glob, err)
	}
	return nil
}

// ToolSource is how a rule's place is named in messages: the file's base
// name and the line, "fleets.toml:42".
func (c *Config) ToolSource(line int) string {
	name := "fleets.toml"
	if c != nil && c.Path != "" {
		name = filepath.Base(c.Path)
	}
	if line > 0 {
		return fmt.Sprintf("%s:%d", name, line)
	}
	return name
}

// toolsField is the "tools" key of [manager] or [fleets.NAME]: a table
// with allow and deny, each an array of patterns (CheckToolPattern).
func (ld *loader) toolsField(dst *ToolRules) field {
	return field{key: "tools", set: func(p []string, v any) {
		t, ok := ld.table(p, v)
		if !ok {
			return
		}
		patterns := func(kp []string, v any) []ToolPattern {
			globs, ok := ld.strs(kp, v)
			if !ok {
				return nil
			}
			out := make([]ToolPattern, 0, len(globs))
			for i, g := range globs {
				ep := appendPath(kp, indexPart(i))
				if err := CheckToolPattern(g); err != nil {
					ld.fail(ep, "%v", err)
					continue
				}
				out = append(out, ToolPattern{Glob: g, Line: ld.loc.line(ep)})
			}
			return out
		}
		ld.decodeTable(p, t, []field{
			{key: "allow", set: func(kp []string, v any) {
				dst.Allow = patterns(kp, v)
				if dst.Allow == nil {
					dst.Allow = []ToolPattern{}
				}
				dst.AllowLine = ld.loc.line(kp)
			}},
			{key: "deny", set: func(kp []string, v any) { dst.Deny = patterns(kp, v) }},
		})
	}}
}
