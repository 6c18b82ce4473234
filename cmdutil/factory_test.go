package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/buildinfo"
	"github.com/fleetmgr/fleetmgr/iostreams"
)

// TestConfigErrors: a fleets.toml that is missing, cannot be named or
// does not load is exit status 2 with what to do; one that loads gets its
// ports.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Chdir(dir)
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[manager]\nnosuchkey = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"", "create one with `fleetmgr init`, or name a file with --config"},
		{filepath.Join(dir, "none.toml"), "create it with `fleetmgr init --config " + filepath.Join(dir, "none.toml") + "`"},
		{bad, "nosuchkey"},
	} {
		ios, _, _ := iostreams.Test()
		_, err := (&Factory{IO: ios, ConfigPath: tc.path}).Config()
		if ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--config %q: %v (exit %d), want exit 2 and %q", tc.path, err, ExitCode(err), tc.want)
		}
	}
	t.Setenv("HOME", "relative")
	ios, _, _ := iostreams.Test()
	if _, err := (&Factory{IO: ios}).Config(); ExitCode(err) != 2 || !strings.Contains(err.Error(), "name the file with --config") {
		t.Errorf("no place to look: %v", err)
	}
	good := filepath.Join(dir, "fleets.toml")
	cfgText := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\nport_range = [20000, 20010]\n[fleets.kb]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\n"
	if err := os.WriteFile(good, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := (&Factory{IO: ios}).Config() // ./fleets.toml
	if err != nil || cfg.Path != "fleets.toml" && cfg.Path != good {
		t.Fatalf("./fleets.toml: %v %+v", err, cfg)
	}
	if p := cfg.Fleets["kb"].Port; p < 20000 || p > 20010 {
		t.Errorf("kb's port %d, want one allocated from [20000, 20010]", p)
	}
}

// TestAppVersion: unset is "dev", which buildinfo does not take for a
// release.
func TestAppVersion(t *testing.T) {
	if v := (&Factory{}).AppVersion(); v != "dev" {
		t.Errorf("unset: %q", v)
	}
	f := &Factory{Version: "v1.2.3"}
	if v := f.AppVersion(); v != "v1.2.3" || f.Build().Version != "v1.2.3" {
		t.Errorf("set: %q, build %+v", v, f.Build())
	}
}

// TestRun: a test's runF stands in for the verb; without one the verb
// runs with the command's context and the factory's streams.
func TestRun(t *testing.T) {
	ios, out, _ := iostreams.Test()
	f := &Factory{IO: ios}
	type opts struct{ N int }
	verb := func(ctx context.Context, o *opts, s *iostreams.IOStreams) error {
		if ctx.Value(opts{}) != "marked" {
			return errors.New("not the command's context")
		}
		_, err := s.Out.Write([]byte("ran"))
		return err
	}
	cmd := &cobra.Command{}
	cmd.SetContext(context.WithValue(context.Background(), opts{}, "marked"))
	var got *opts
	if err := Run(cmd, f, &opts{N: 1}, func(o *opts) error { got = o; return nil }, verb); err != nil || got == nil || got.N != 1 || out.Len() != 0 {
		t.Errorf("with runF: %v, %+v, %q", err, got, out.String())
	}
	if err := Run(cmd, f, &opts{}, nil, verb); err != nil || out.String() != "ran" {
		t.Errorf("without runF: %v, %q", err, out.String())
	}
}

// TestPrintResult: JSON escaped for terminals, or the lines; the error
// given comes back either way.
func TestPrintResult(t *testing.T) {
	failed := errors.New("reload failed")
	ios, out, _ := iostreams.Test()
	if err := PrintResult(ios, true, map[string]string{"name": "a\u009bb\u202e"}, []string{"unused"}, failed); err != failed {
		t.Errorf("JSON: error %v", err)
	}
	if got := out.String(); got != "{\n  \"name\": \"a\\u009bb\\u202e\"\n}\n" {
		t.Errorf("JSON: %q", got)
	}
	out.Reset()
	if err := PrintResult(ios, false, nil, []string{"one", "two"}, nil); err != nil || out.String() != "one\ntwo\n" {
		t.Errorf("lines: %v %q", err, out.String())
	}
}

// TestWriteManPages: a page per available command, dated by the build's
// commit time, the same bytes from one run to the next.
func TestWriteManPages(t *testing.T) {
	root := &cobra.Command{Use: "fleetmgr", Short: "root"}
	root.AddCommand(&cobra.Command{Use: "start", Short: "start fleets", Run: func(*cobra.Command, []string) {}},
		&cobra.Command{Use: "hidden", Hidden: true, Run: func(*cobra.Command, []string) {}})
	build := buildinfo.Info{Version: "v1.0.0", Time: "2026-01-02T03:04:05Z"}
	var pages [2][]byte
	for i := range pages {
		dir := filepath.Join(t.TempDir(), "man1")
		if err := WriteManPages(root, dir, build); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "fleetmgr-start.1"))
		if err != nil {
			t.Fatal(err)
		}
		pages[i] = b
		if _, err := os.Stat(filepath.Join(dir, "fleetmgr-hidden.1")); err == nil {
			t.Error("a page for a hidden command")
		}
	}
	if !bytes.Equal(pages[0], pages[1]) {
		t.Error("two runs wrote different pages")
	}
	if !strings.Contains(string(pages[0]), "Jan 2026") || !strings.Contains(string(pages[0]), "start fleets") {
		t.Errorf("page lacks the commit's date or the command's text:\n%s", pages[0])
	}
}

// TestOutsidePane: outside a herdr pane (this test's process) the config
// and client come back; a config that does not load is its exit status 2
// before any look at panes. The refusal itself: e2e/guard_test.go runs
// the binary in a pane.
func TestOutsidePane(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	cfgText := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\nport_range = [20000, 20010]\n[fleets.kb]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\n"
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	ios, _, _ := iostreams.Test()
	f := &Factory{IO: ios, ConfigPath: path}
	ctx := context.Background()
	if cfg, err := f.ConfigOutsidePane(ctx, "add"); err != nil || cfg.Path != path {
		t.Errorf("ConfigOutsidePane: %v %+v", err, cfg)
	}
	if cfg, c, err := f.ClientOutsidePane(ctx, "read the status of"); err != nil || cfg.Path != path || c == nil {
		t.Errorf("ClientOutsidePane: %v %+v %v", err, cfg, c)
	}
	f.ConfigPath = filepath.Join(dir, "none.toml")
	if _, err := f.ConfigOutsidePane(ctx, "add"); ExitCode(err) != 2 {
		t.Errorf("missing file: %v", err)
	}
	if _, _, err := f.ClientOutsidePane(ctx, "add"); ExitCode(err) != 2 {
		t.Errorf("missing file: %v", err)
	}
}
