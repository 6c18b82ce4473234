package registry

import (
	"strconv"
	"strings"
	"testing"
)

// TestToolRules: [manager] and [fleets.NAME] tools.allow / tools.deny are
// read with the line of each pattern; a bad pattern is refused with its
// file, line and field.
func TestToolRules(t *testing.T) {
	body := `[manager]
tools.deny = ["fleet_debug_*"]

[fleets.kb]
project = "/src/kb"
command = ["fleetd"]
tools.allow = ["fleet_*", "kb_?"]
tools.deny = [
  "fleet_stop",
]
`
	c, err, _ := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Manager.Tools.Deny; len(d) != 1 || d[0].Glob != "fleet_debug_*" || d[0].Line != 2 {
		t.Errorf("manager deny = %+v", d)
	}
	kb := c.Fleets["kb"].Tools
	if len(kb.Allow) != 2 || kb.AllowLine != lineOf(t, body, "tools.allow") || kb.Allow[1].Glob != "kb_?" {
		t.Errorf("kb allow = %+v line %d", kb.Allow, kb.AllowLine)
	}
	if len(kb.Deny) != 1 || kb.Deny[0].Line != lineOf(t, body, `"fleet_stop"`) {
		t.Errorf("kb deny = %+v, want line %d", kb.Deny, lineOf(t, body, `"fleet_stop"`))
	}
	if !kb.Deny[0].Match("fleet_stop") || kb.Deny[0].Match("fleet_stopx") || !kb.Allow[1].Match("kb_x") {
		t.Error("patterns match wrongly")
	}
	if c.ToolSource(kb.Deny[0].Line) != "fleets.toml:"+strconv.Itoa(kb.Deny[0].Line) {
		t.Errorf("source = %s", c.ToolSource(kb.Deny[0].Line))
	}
	if c.Fleets["kb"].Tools.Allow == nil || (ToolRules{}).Allow != nil {
		t.Error("allow absent and allow set must differ")
	}

	for _, tc := range []struct{ rule, field, want string }{
		{`tools.deny = ["fleet_[stop"]`, "fleets.kb.tools.deny[0]", "not a valid glob"},
		{`tools.allow = [""]`, "fleets.kb.tools.allow[0]", "empty pattern"},
		{`tools.deny = ["fleet stop"]`, "fleets.kb.tools.deny[0]", "cannot be part of a tool name"},
		{`tools.deny = "fleet_stop"`, "fleets.kb.tools.deny", "expected array of strings"},
		{`tools.hide = ["x"]`, "fleets.kb.tools.hide", "unknown key"},
		{`tools = 3`, "fleets.kb.tools", "expected table"},
	} {
		b := "[fleets.kb]\nproject = \"/src/kb\"\ncommand = [\"fleetd\"]\n" + tc.rule + "\n"
		_, err, _ := loadBody(t, b)
		if err == nil {
			t.Errorf("%s: loaded", tc.rule)
			continue
		}
		want := "fleets.toml:4: " + tc.field + ": "
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q and %q", tc.rule, err, want, tc.want)
		}
	}
}
