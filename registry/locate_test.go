package registry

import (
	"strings"
	"testing"
)

func TestLocate(t *testing.T) {
	src := `# [fleets.commented] = "not a header"
title = """
[fleets.inside_string]
port = 1
"""
[manager]
listen = "127.0.0.1:1" # [not.a.header]
port_range = [
  8000,  # low
  9000,
]

[fleets.kb]
project = '~/kb'
"command" = ["a",
  "b"]
env = { A = "1", B = { C = "x" } }
'quoted.key' = 1
sub.dotted.key = 2

[fleets."odd name".env]
X = "y"

[fleets.late.env]
Y = "z"
[fleets.late]
project = "/late"

[[items]]
a = 1
[[items]]
a = 2
`
	l := locate(src)
	cases := []struct {
		path []string
		line int
	}{
		{[]string{"title"}, 2},
		{[]string{"manager"}, 6},
		{[]string{"manager", "listen"}, 7},
		{[]string{"manager", "port_range"}, 8},
		{[]string{"manager", "port_range", indexPart(0)}, 9},
		{[]string{"manager", "port_range", indexPart(1)}, 10},
		{[]string{"fleets"}, 13},
		{[]string{"fleets", "kb"}, 13},
		{[]string{"fleets", "kb", "project"}, 14},
		{[]string{"fleets", "kb", "command"}, 15},
		{[]string{"fleets", "kb", "command", indexPart(1)}, 16},
		{[]string{"fleets", "kb", "env", "B", "C"}, 17},
		{[]string{"fleets", "kb", "quoted.key"}, 18},
		{[]string{"fleets", "kb", "sub"}, 19},
		{[]string{"fleets", "kb", "sub", "dotted", "key"}, 19},
		{[]string{"fleets", "odd name"}, 21},
		{[]string{"fleets", "odd name", "env", "X"}, 22},
		{[]string{"fleets", "late"}, 26},             // its own header wins over the implicit definition
		{[]string{"fleets", "late", "env", "Y"}, 25}, // keys keep their line
		{[]string{"items", indexPart(1), "a"}, 32},
		{[]string{"fleets", "kb", "nope"}, 13}, // falls back to the table
		{[]string{"nope"}, 0},
	}
	for _, tc := range cases {
		if got := l.line(tc.path); got != tc.line {
			t.Errorf("line(%s) = %d, want %d", fieldName(tc.path), got, tc.line)
		}
	}
	if _, ok := l.exact([]string{"fleets", "inside_string"}); ok {
		t.Error("a header inside a multi-line string was recorded")
	}
	if _, ok := l.exact([]string{"fleets", "commented"}); ok {
		t.Error("a header inside a comment was recorded")
	}
}

func TestFieldName(t *testing.T) {
	cases := map[string][]string{
		"fleets.kb.port":             {"fleets", "kb", "port"},
		`fleets."a.b".env."X Y"`:     {"fleets", "a.b", "env", "X Y"},
		"guard.operator_sessions[2]": {"guard", "operator_sessions", indexPart(2)},
		`""`:                         {""},
	}
	for want, path := range cases {
		if got := fieldName(path); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", path, got, want)
		}
	}
}

// FuzzLocate checks that the locator terminates without panicking on any
// text, valid TOML or not.
func FuzzLocate(f *testing.F) {
	for _, s := range []string{"", "[", "[[", "a = [", "a = {", "'''", `"""`, "a.b.c = \"\\", "[a]\nb = { c = [1, {d = 2}] }\n", "x = [\n# c\n]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		l := locate(src)
		if n := strings.Count(src, "\n") + 1; len(l.lines) > 0 {
			for k, ln := range l.lines {
				if ln < 1 || ln > n {
					t.Fatalf("line %d of key %q outside 1..%d", ln, k, n)
				}
			}
		}
	})
}
