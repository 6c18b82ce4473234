package registry

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

// TemplateData holds the fields a fleet's command strings and config
// template may use, e.g. "--port={{.Port}}". They are the same values
// fleetmgr passes to fleetd as FLEET_* variables (docs/fleetd.md "The
// contract fleetmgr gives it").
type TemplateData struct {
	Name         string // fleet name (FLEET_NAME)
	Port         int    // fleetd's port (FLEET_PORT)
	ConfigPath   string // absolute path of the rendered config (config_file)
	StateDir     string // the fleet's own state directory, <state_dir>/fleets/NAME
	ProjectDir   string // absolute project directory (FLEET_PROJECT_DIR)
	HerdrSession string // herdr session name (FLEET_HERDR_SESSION)
	HerdrSocket  string // herdr API socket of that session (FLEET_HERDR_SOCKET)
	WorktreeRoot string // absolute worktree root (FLEET_WORKTREE_ROOT)
	LogDir       string // directory of the fleet's logs (fleetd.log, herdr.log): its StateDir
}

// templateFields lists the TemplateData field names, in declaration order.
func templateFields() []string {
	return []string{"Name", "Port", "ConfigPath", "StateDir", "ProjectDir",
		"HerdrSession", "HerdrSocket", "WorktreeRoot", "LogDir"}
}

// isTemplateField reports whether name is a TemplateData field.
func isTemplateField(name string) bool {
	for _, f := range templateFields() {
		if f == name {
			return true
		}
	}
	return false
}

// TemplateData returns the template fields of f. herdrSocket is the socket
// of f's herdr session, which the registry does not compute (see
// herdr.SocketPath). Port is 0 until AllocatePorts has run for a fleet
// without a fixed port.
func (f *Fleet) TemplateData(herdrSocket string) TemplateData {
	return TemplateData{
		Name:         f.Name,
		Port:         f.Port,
		ConfigPath:   f.ConfigFile,
		StateDir:     f.StateDir,
		ProjectDir:   f.Project,
		HerdrSession: f.HerdrSession,
		HerdrSocket:  herdrSocket,
		WorktreeRoot: f.WorktreeRoot,
		LogDir:       f.LogDir,
	}
}

// RenderCommand executes each element of f.Command as a text/template over
// d and returns the resulting argv.
func (f *Fleet) RenderCommand(d TemplateData) ([]string, error) {
	out := make([]string, 0, len(f.Command))
	for i, arg := range f.Command {
		t, err := parseTemplate(fmt.Sprintf("fleets.%s.command[%d]", f.Name, i), arg)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		if err := t.Execute(&b, d); err != nil {
			return nil, err
		}
		out = append(out, b.String())
	}
	return out, nil
}

// RenderConfig reads f.ConfigTemplate, executes it over d and returns the
// rendered config (to be written to f.ConfigFile). It returns (nil, nil)
// when the fleet has no config_template.
func (f *Fleet) RenderConfig(d TemplateData) ([]byte, error) {
	if f.ConfigTemplate == "" {
		return nil, nil
	}
	src, err := readBounded(f.ConfigTemplate)
	if err != nil {
		return nil, err
	}
	t, err := parseTemplate(f.ConfigTemplate, string(src))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// parseTemplate parses text and checks that it only uses TemplateData
// fields.
func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	if _, err := templateUses(t); err != nil {
		return nil, fmt.Errorf("template: %s: %w", name, err)
	}
	return t, nil
}

// templateUses returns the TemplateData fields t refers to, or an error
// naming the first unknown field. Fields are checked statically; the
// template is not executed (a template can loop for a very long time).
func templateUses(t *template.Template) (map[string]bool, error) {
	used := map[string]bool{}
	var bad []string
	field := func(idents []string) {
		if len(idents) == 0 {
			return
		}
		if !isTemplateField(idents[0]) {
			bad = append(bad, "."+idents[0]+" is not a field")
			return
		}
		used[idents[0]] = true
		if len(idents) > 1 {
			bad = append(bad, "."+strings.Join(idents, ".")+": ."+idents[0]+" has no fields")
		}
	}
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch x := n.(type) {
		case nil:
		case *parse.ListNode:
			if x == nil {
				return
			}
			for _, c := range x.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(x.Pipe)
		case *parse.PipeNode:
			if x == nil {
				return
			}
			for _, c := range x.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range x.Args {
				walk(a)
			}
		case *parse.FieldNode:
			field(x.Ident)
		case *parse.VariableNode:
			if len(x.Ident) > 1 && x.Ident[0] == "$" {
				field(x.Ident[1:])
			}
		case *parse.ChainNode:
			walk(x.Node)
			if len(x.Field) > 0 {
				bad = append(bad, "."+strings.Join(x.Field, ".")+": template fields have no fields")
			}
		case *parse.IfNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.RangeNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.WithNode:
			walk(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.TemplateNode:
			walk(x.Pipe)
		}
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			walk(tt.Tree.Root)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("%s (known fields: .%s)", bad[0], strings.Join(templateFields(), " ."))
	}
	return used, nil
}

// checkTemplateFile reads and parses a config template file, returning
// the fields it uses.
func checkTemplateFile(path string) (map[string]bool, error) {
	src, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	t, err := template.New(path).Parse(string(src))
	if err != nil {
		return nil, err
	}
	used, err := templateUses(t)
	if err != nil {
		return nil, fmt.Errorf("template: %s: %w", path, err)
	}
	return used, nil
}
