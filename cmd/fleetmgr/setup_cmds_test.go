package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/cmdutil"
)

// TestCompleteFleetNames: `fleetmgr __complete VERB ""` lists the fleets
// of the config for every verb that takes fleet names, filters by prefix,
// leaves out names already given, and offers nothing after the one name of
// logs, remove and vhost delete.
func TestCompleteFleetNames(t *testing.T) {
	cfgPath, _ := fakeDaemon(t, []string{"kb", "docs", "kbase"}, func(c net.Conn) { c.Close() })
	complete := func(args ...string) []string {
		t.Helper()
		out, _, err := runCLI(cfgPath, append([]string{"__complete"}, args...)...)
		if err != nil {
			t.Fatalf("__complete %v: %v", args, err)
		}
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") && l != "" {
				names = append(names, l)
			}
		}
		if !strings.Contains(out, ":4") { // ShellCompDirectiveNoFileComp
			t.Errorf("__complete %v: no-file directive missing:\n%s", args, out)
		}
		return names
	}
	for _, verb := range []string{"start", "stop", "restart", "logs", "status", "remove"} {
		if got := complete(verb, ""); !slices.Equal(got, []string{"docs", "kb", "kbase"}) {
			t.Errorf("%s: %v", verb, got)
		}
	}
	if got := complete("vhost", "delete", "k"); !slices.Equal(got, []string{"kb", "kbase"}) {
		t.Errorf("vhost delete k: %v", got)
	}
	if got := complete("start", "kb", ""); !slices.Equal(got, []string{"docs", "kbase"}) {
		t.Errorf("start kb <TAB>: %v", got)
	}
	if got := complete("logs", "kb", ""); len(got) != 0 {
		t.Errorf("logs kb <TAB>: %v", got)
	}
	// A file that does not load as a whole still completes its names.
	bad := filepath.Join(t.TempDir(), "fleets.toml")
	if err := os.WriteFile(bad, []byte("[fleets.alpha]\nport = \"x\"\n[fleets.beta]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath = bad
	if got := complete("stop", ""); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("invalid file: %v", got)
	}
}

// TestAddNamesRunningDaemon: add and remove while a serve runs for the
// state dir say what makes it re-read the file.
func TestAddNamesRunningDaemon(t *testing.T) {
	cfgPath, _ := fakeDaemon(t, []string{"kb"}, func(c net.Conn) { c.Close() })
	proj := t.TempDir()
	out, errOut, err := runCLI(cfgPath, "add", "docs", "--project", proj, "--port", "20005")
	if err != nil {
		t.Fatalf("add: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "added fleet docs to ") || !strings.Contains(out, "port 20005") ||
		!strings.Contains(out, "still has the file as it was: run `fleetmgr reload`") {
		t.Fatalf("add said:\n%s", out)
	}
	out, _, err = runCLI(cfgPath, "remove", "docs", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Removed string `json:"removed"`
		Reload  string `json:"reload"`
	}
	if json.Unmarshal([]byte(out), &res) != nil || res.Removed != "docs" || !strings.Contains(res.Reload, "fleetmgr reload") {
		t.Fatalf("remove --json:\n%s", out)
	}
}

// TestSetupFlags: what each verb makes of its arguments.
func TestSetupFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_CONFIG_HOME", "")
	cfgPath := filepath.Join(dir, "fleets.toml")
	proj := filepath.Join(dir, "My Proj")
	if err := os.Mkdir(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(cfgPath, "init", "--name", "x"); err == nil || !strings.Contains(err.Error(), "pass --project DIR too") {
		t.Fatalf("init --name without --project: %v", err)
	}
	if _, _, err := runCLI(cfgPath, "init", "stray"); err == nil || !strings.Contains(err.Error(), "goes after --") {
		t.Fatalf("init stray: %v", err)
	}
	out, _, err := runCLI(cfgPath, "init", "--project", proj, "--lead", "--", "my-fleetd", "--port", "{{.Port}}")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "fleet my-proj: project "+proj) {
		t.Fatalf("init said:\n%s", out)
	}
	out, _, err = runCLI(cfgPath, "list", "--json")
	if err != nil || !strings.Contains(out, `"name": "my-proj"`) {
		t.Fatalf("list after init: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(b), `command = ["my-fleetd", "--port", "{{.Port}}"]`) || !strings.Contains(string(b), "lead = true") {
		t.Fatalf("init wrote:\n%s", b)
	}
	if _, _, err := runCLI(cfgPath, "add", "a", "b", "--project", proj); err == nil || !strings.Contains(err.Error(), "one NAME before --") {
		t.Fatalf("add a b: %v", err)
	}
	if _, _, err := runCLI(cfgPath, "add", "a"); err == nil || !strings.Contains(err.Error(), `"project" not set`) {
		t.Fatalf("add without --project: %v", err)
	}
	if _, _, err := runCLI(filepath.Join(dir, "none.toml"), "add", "a", "--project", proj); err == nil || !strings.Contains(err.Error(), "fleetmgr init") {
		t.Fatalf("add without a file: %v", err)
	}
}

// TestVersionJSON: version --json is the build information; --version
// prints one line.
func TestVersionJSON(t *testing.T) {
	out, _, err := runCLI("", "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	for _, k := range []string{"module", "version", "revision", "time", "modified", "go_version"} {
		if _, ok := v[k]; !ok {
			t.Errorf("version --json lacks %q: %s", k, out)
		}
	}
	out, _, err = runCLI("", "--version")
	if err != nil || !strings.HasPrefix(out, "fleetmgr dev (revision unknown) go") {
		t.Fatalf("--version: %v %q", err, out)
	}
}

// TestDocsMan: a man page per available command, hidden ones left out.
func TestDocsMan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	if _, _, err := runCLI("", "docs", "man", dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"fleetmgr.1", "fleetmgr-start.1", "fleetmgr-add.1", "fleetmgr-vhost-delete.1", "fleetmgr-docs-man.1"} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !strings.Contains(string(b), ".TH \"FLEETMGR\" \"1\"") {
			t.Errorf("%s is not a man page:\n%.200s", p, b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "fleetmgr-add.1"))
	if !strings.Contains(string(b), "byte for byte") {
		t.Errorf("fleetmgr-add.1 lacks add's help text:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "fleetmgr-logpipe.1")); err == nil {
		t.Error("a page for the hidden logpipe command")
	}
}

// TestDocsManUnwritable: a DIR that cannot hold the pages (here a file;
// a directory without write permission is the same for a non-root user)
// is an error naming it and saying what to do, not the bare "mkdir …:
// not a directory".
func TestDocsManUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "man1")} {
		_, _, err := runCLI("", "docs", "man", dir)
		if err == nil || !strings.Contains(err.Error(), "man pages not written to "+dir) || !strings.Contains(err.Error(), "name a directory you can write") {
			t.Errorf("docs man %s: %v", dir, err)
		}
	}
}

// TestMissingConfigSaysInit: a verb finding no fleets.toml exits 2 and says
// how to create one: where fleetmgr looks and `fleetmgr init`, or for
// --config FILE, `fleetmgr init --config FILE`.
func TestMissingConfigSaysInit(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Chdir(dir)
	none := filepath.Join(dir, "none.toml")
	for _, tc := range []struct{ cfg, want string }{
		{"", "fleetmgr looks for ./fleets.toml"},
		{"", "create one with `fleetmgr init`"},
		{none, "create it with `fleetmgr init --config " + none + "`"},
	} {
		_, _, err := runCLI(tc.cfg, "list")
		if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("list --config %q: %v (exit %d), want %q", tc.cfg, err, cmdutil.ExitCode(err), tc.want)
		}
	}
}
