package mount

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tailscale/hujson"
)

const jsonc = `// my OpenCode config
{
  "$schema": "https://opencode.ai/config.json",
  /* the model I use */
  "model": "anthropic/claude-sonnet-4",
  "mcp": {
    "other": { "type": "local", "command": ["x"] }, // keep me
  },
  "theme": "dark",
}
`

func TestMergeOpenCodeKeepsTheRest(t *testing.T) {
	entry := map[string]any{"type": "remote", "url": "http://127.0.0.1:8760/mcp", "enabled": true}
	out, replaced, err := MergeOpenCode([]byte(jsonc), "fleets", entry)
	if err != nil || replaced {
		t.Fatalf("merge: %v replaced=%v", err, replaced)
	}
	for _, keep := range []string{"// my OpenCode config", "/* the model I use */", "// keep me", `"theme": "dark",`} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("lost %q:\n%s", keep, out)
		}
	}
	v, err := hujson.Standardize(out)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(v, &got); err != nil {
		t.Fatal(err)
	}
	mcp := got["mcp"].(map[string]any)
	if got["model"] != "anthropic/claude-sonnet-4" || mcp["other"] == nil || mcp["fleets"].(map[string]any)["url"] != "http://127.0.0.1:8760/mcp" {
		t.Fatalf("merged: %v", got)
	}
	// Again with another entry: replaced, still one fleets.
	out2, replaced, err := MergeOpenCode(out, "fleets", map[string]any{"type": "local", "command": []string{"fleetmgr", "mcp"}, "enabled": true})
	if err != nil || !replaced || strings.Count(string(out2), `"fleets"`) != 1 || strings.Contains(string(out2), "8760") {
		t.Fatalf("second merge: %v replaced=%v\n%s", err, replaced, out2)
	}
}

func TestMergeOpenCodeFromNothing(t *testing.T) {
	for _, src := range []string{"", "  \n", "{}", `{"mcp": {}}`} {
		out, _, err := MergeOpenCode([]byte(src), "fleets", map[string]any{"type": "remote", "url": "u", "enabled": true})
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q gives invalid JSON: %v\n%s", src, err, out)
		}
		if got["mcp"].(map[string]any)["fleets"] == nil {
			t.Fatalf("%q: %s", src, out)
		}
		// A file made from nothing is formatted, one key a line.
		if strings.TrimSpace(src) == "" && !strings.Contains(string(out), "\n    \"fleets\": {\n      \"enabled\": true,") {
			t.Errorf("%q gives an unformatted file:\n%s", src, out)
		}
	}
}

func TestMergeOpenCodeRefuses(t *testing.T) {
	for src, want := range map[string]string{
		"[1]":             "top level is not an object",
		`{"mcp": []}`:     `"mcp" is not an object`,
		`{"mcp": null}`:   `"mcp" is null`,
		`{"a": 1,,}`:      "not JSON or JSONC",
		`{"a": /* open }`: "not JSON or JSONC",
	} {
		if _, _, err := MergeOpenCode([]byte(src), "fleets", map[string]any{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

func TestMountOpenCodeFiles(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	getenv := func(k string) string { return map[string]string{"HOME": home}[k] }
	// User scope: ~/.config/opencode/opencode.json, created.
	res, err := Mount(context.Background(), Options{Client: OpenCode, Scope: User, URL: "http://127.0.0.1:9/mcp", Getenv: getenv})
	if err != nil || res.Path != filepath.Join(home, ".config", "opencode", "opencode.json") {
		t.Fatalf("%+v %v", res, err)
	}
	// Project scope with an opencode.jsonc only: that file is edited, mode kept.
	proj := filepath.Join(dir, "proj")
	_ = os.MkdirAll(proj, 0o755)
	p := filepath.Join(proj, "opencode.jsonc")
	if err := os.WriteFile(p, []byte(jsonc), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = Mount(context.Background(), Options{Client: OpenCode, Scope: Project, Dir: proj, Command: []string{"/bin/fleetmgr", "--config", "/c/f.toml", "mcp"}})
	if err != nil || res.Path != p {
		t.Fatalf("%+v %v", res, err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), "// keep me") || !strings.Contains(string(b), `"/bin/fleetmgr"`) {
		t.Fatalf("%s", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	// --print writes nothing.
	before, _ := os.ReadFile(p)
	res, err = Mount(context.Background(), Options{Client: OpenCode, Scope: Project, Dir: proj, URL: "http://x/mcp", Print: true})
	if after, _ := os.ReadFile(p); err != nil || !strings.Contains(res.Printed, "http://x/mcp") || string(after) != string(before) {
		t.Fatalf("print: %v %+v", err, res)
	}
}

type fakeClaude struct {
	ran    [][]string
	exists bool
}

func (f *fakeClaude) run(_ context.Context, name string, args ...string) (string, error) {
	f.ran = append(f.ran, args)
	switch args[1] {
	case "add":
		if f.exists {
			return "MCP server fleets already exists in user config", errors.New("exit status 1")
		}
		f.exists = true
	case "remove":
		f.exists = false
	}
	return "ok", nil
}

func TestMountClaude(t *testing.T) {
	fc := &fakeClaude{}
	o := Options{Client: Claude, Scope: User, URL: "http://127.0.0.1:8760/mcp", ClaudeBin: "/x/claude", Run: fc.run}
	res, err := Mount(context.Background(), o)
	if err != nil || res.Replaced || !slices.Equal(fc.ran[0], []string{"mcp", "add", "--scope", "user", "--transport", "http", "fleets", "http://127.0.0.1:8760/mcp"}) {
		t.Fatalf("%+v %v %q", res, err, fc.ran)
	}
	// Mounted already: replaced by the stdio mount.
	fc.ran = nil
	o.Command = []string{"/opt/my bin/fleetmgr", "--config", "/c/f.toml", "mcp"}
	res, err = Mount(context.Background(), o)
	if err != nil || !res.Replaced || len(fc.ran) != 3 || fc.ran[1][1] != "remove" ||
		!slices.Equal(fc.ran[2], []string{"mcp", "add", "--scope", "user", "fleets", "--", "/opt/my bin/fleetmgr", "--config", "/c/f.toml", "mcp"}) {
		t.Fatalf("%+v %v %q", res, err, fc.ran)
	}
	o.Print, o.Scope = true, Project
	res, err = Mount(context.Background(), o)
	if err != nil || res.Printed != "/x/claude mcp add --scope project fleets -- '/opt/my bin/fleetmgr' --config /c/f.toml mcp" {
		t.Fatalf("print: %q %v", res.Printed, err)
	}
	if _, err := Mount(context.Background(), Options{Client: Claude, Scope: "local", URL: "u"}); err == nil {
		t.Fatal("scope local accepted")
	}
}

// TestMountOpenCodeFollowsLink: an opencode.json that is a symbolic link
// (a dotfiles repository's file) gets the entry in its target, and the
// link stays; it used to be replaced by a regular file, leaving the
// operator's own file without the entry. A dangling link is an error and
// stays as it was.
func TestMountOpenCodeFollowsLink(t *testing.T) {
	dir := t.TempDir()
	proj := filepath.Join(dir, "proj")
	dots := filepath.Join(dir, "dotfiles")
	for _, d := range []string{proj, dots} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	real := filepath.Join(dots, "opencode.json")
	if err := os.WriteFile(real, []byte(jsonc), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(proj, "opencode.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Mount(context.Background(), Options{Client: OpenCode, Scope: Project, Dir: proj, URL: "http://127.0.0.1:9/mcp"}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(real)
	if !strings.Contains(string(b), "http://127.0.0.1:9/mcp") || !strings.Contains(string(b), "// keep me") {
		t.Fatalf("the link's target was not edited:\n%s", b)
	}
	if st, _ := os.Stat(real); st.Mode().Perm() != 0o600 {
		t.Errorf("target mode %v, want 0600 kept", st.Mode().Perm())
	}

	if err := os.Remove(real); err != nil {
		t.Fatal(err)
	}
	_, err := Mount(context.Background(), Options{Client: OpenCode, Scope: Project, Dir: proj, URL: "http://127.0.0.1:9/mcp"})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("a dangling link: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the dangling link was replaced: %v", err)
	}
}
