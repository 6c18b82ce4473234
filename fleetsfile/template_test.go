package fleetsfile

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/registry"
)

// keyPaths lists the dotted key paths of a decoded tree, with every fleet
// name written NAME and the keys of [fleets.NAME.env] (free-form) left out.
func keyPaths(tree map[string]any, prefix []string, out map[string]bool) {
	for k, v := range tree {
		p := append(slices.Clone(prefix), k)
		if len(p) == 2 && p[0] == "fleets" {
			p[1] = "NAME"
		}
		if len(p) == 4 && p[0] == "fleets" && p[2] == "env" {
			continue
		}
		out[strings.Join(p, ".")] = true
		if m, ok := v.(map[string]any); ok {
			keyPaths(m, p, out)
		}
	}
}

// uncomment turns the template's commented-out settings ("# key = value",
// "# [table]") into TOML and leaves its prose as comments.
var setting = regexp.MustCompile(`^# ((\[\[?[a-zA-Z0-9_.]+\]\]?)|([a-z_]+|[A-Z_]+) = .*)$`)

func uncomment(src string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(src, "\n") {
		if m := setting.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			l = m[1] + "\n"
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestTemplateCoversExample: every key fleets.example.toml documents is in
// init's template as a commented-out setting, and the template has no
// setting the example does not document. Uncommented, the template is
// TOML whose keys are exactly the example's.
func TestTemplateCoversExample(t *testing.T) {
	// The example documents some keys commented out ([guard]
	// allowed_uids): uncommented, they count too.
	exTree, err := decode([]byte(uncomment(string(readExample(t)))))
	if err != nil {
		t.Fatalf("fleets.example.toml, uncommented, is not TOML: %v", err)
	}
	tmplTree, err := decode([]byte(uncomment(string(Template()))))
	if err != nil {
		t.Fatalf("the template, uncommented, is not TOML: %v\n%s", err, uncomment(string(Template())))
	}
	ex, tm := map[string]bool{}, map[string]bool{}
	keyPaths(exTree, nil, ex)
	keyPaths(tmplTree, nil, tm)
	var missing, extra []string
	for k := range ex {
		if !tm[k] {
			missing = append(missing, k)
		}
	}
	for k := range tm {
		if !ex[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("keys fleets.example.toml documents that fleetsfile/template.toml lacks: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("keys in fleetsfile/template.toml that fleets.example.toml does not document: %v", extra)
	}
	// Each uncommented default is the value the example gives, where the
	// example gives one for a manager, guard, status or broker key.
	for _, table := range []string{"manager", "status", "broker"} {
		e, _ := exTree[table].(map[string]any)
		m, _ := tmplTree[table].(map[string]any)
		for k, v := range e {
			if k == "allowed_uids" {
				continue
			}
			if !equalValue(m[k], v) {
				t.Errorf("[%s] %s: template shows %v, example %v", table, k, m[k], v)
			}
		}
	}
}

func equalValue(a, b any) bool { return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b) }

// TestTemplateLoads: the template as written loads with registry.Load and
// gives the defaults: no fleet, no broker; with a fleet appended it loads
// that fleet.
func TestTemplateLoads(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_STATE_HOME", "")
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, Template(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Fleets) != 0 || cfg.Broker != nil || cfg.Manager.Listen != registry.DefaultListen ||
		cfg.Manager.StateDir != filepath.Join(dir, "home", ".local", "state", "fleetmgr") {
		t.Fatalf("template loads as %+v", cfg)
	}
	proj := filepath.Join(dir, "proj")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := Append(Template(), Fleet{Name: "proj", Project: proj})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = registry.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	f := cfg.Fleets["proj"]
	if f == nil || f.Project != proj || !slices.Equal(f.Command, DefaultCommand()) {
		t.Fatalf("appended fleet loads as %+v", f)
	}
}
