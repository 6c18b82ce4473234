package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/service"
	"github.com/fleetmgr/fleetmgr/setup"
)

// Flag parsing alone, in the style of cli/cli's pkg/cmd tests: each verb's
// constructor is given a runF that records the options argv parsed to, so
// nothing runs. A case with wantErr expects cobra (or the constructor's
// argument rules) to refuse argv before runF.

// parse runs the command newCmd builds on argv and returns the options its
// runF got (nil when it was not called) and the error.
func parse[O any](t *testing.T, newCmd func(*cmdutil.Factory, func(*O) error) *cobra.Command, argv ...string) (*O, error) {
	t.Helper()
	var got *O
	var out bytes.Buffer
	f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}}
	cmd := newCmd(f, func(o *O) error { got = o; return nil })
	cmd.SetArgs(argv)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return got, cmd.Execute()
}

// check compares what parse returned with want (nil: refused, its error
// containing wantErr).
func check[O any](t *testing.T, argv []string, got *O, err error, want *O, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: error %v, want one containing %q (options %+v)", argv, err, wantErr, got)
		}
		return
	}
	if err != nil || got == nil {
		t.Errorf("%q: error %v, options %+v", argv, err, got)
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q:\n got %+v\nwant %+v", argv, *got, *want)
	}
}

func TestActFlags(t *testing.T) {
	cases := []struct {
		verb    serveapi.Verb
		argv    []string
		want    ActOptions
		wantErr string
	}{
		{serveapi.Start, []string{"kb"}, ActOptions{Names: []string{"kb"}}, ""},
		{serveapi.Start, []string{"kb", "docs", "--lead", "--json"}, ActOptions{Names: []string{"kb", "docs"}, Lead: true, JSON: true}, ""},
		{serveapi.Start, []string{"--all"}, ActOptions{Names: []string{}, All: true}, ""},
		{serveapi.Stop, []string{"--all", "--json"}, ActOptions{Names: []string{}, All: true, JSON: true}, ""},
		{serveapi.Stop, []string{"kb", "--lead"}, ActOptions{}, "unknown flag: --lead"},
		{serveapi.Restart, []string{"kb", "--lead"}, ActOptions{Names: []string{"kb"}, Lead: true}, ""},
		{serveapi.Restart, []string{"--json=false", "kb"}, ActOptions{Names: []string{"kb"}}, ""},
	}
	for _, tc := range cases {
		got, err := parse(t, func(f *cmdutil.Factory, runF func(*ActOptions) error) *cobra.Command {
			return NewCmdAct(f, tc.verb, runF)
		}, tc.argv...)
		if got != nil {
			got.f = nil
		}
		tc.want.Verb = tc.verb
		check(t, append([]string{string(tc.verb)}, tc.argv...), got, err, &tc.want, tc.wantErr)
	}
}

func TestLogsFlags(t *testing.T) {
	cases := []struct {
		argv    []string
		want    LogsOptions
		wantErr string
	}{
		{[]string{"kb"}, LogsOptions{Fleets: []string{"kb"}, Lines: 50}, ""},
		{[]string{"kb", "-f", "-n", "0", "--herdr"}, LogsOptions{Fleets: []string{"kb"}, Follow: true, Lines: 0, Herdr: true}, ""},
		{[]string{"kb", "--lines=-3"}, LogsOptions{Fleets: []string{"kb"}, Lines: -3}, ""}, // refused by runLogs, not by parsing
		{[]string{}, LogsOptions{}, "name a fleet (or several), or --all, or --serve"},
		{[]string{"kb", "docs", "--since", "10m", "--timestamps", "--json"}, LogsOptions{Fleets: []string{"kb", "docs"}, Lines: 50, Since: 10 * time.Minute, Timestamps: true, JSON: true}, ""},
		{[]string{"--all", "-f"}, LogsOptions{All: true, Follow: true, Lines: 50}, ""},
		{[]string{"--serve"}, LogsOptions{Serve: true, Lines: 50}, ""},
		{[]string{"kb", "--since", "ten"}, LogsOptions{}, "invalid argument"},
	}
	for _, tc := range cases {
		got, err := parse(t, NewCmdLogs, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestListFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    ListOptions
		wantErr string
	}{
		{nil, ListOptions{}, ""},
		{[]string{"--json"}, ListOptions{JSON: true}, ""},
		{[]string{"kb"}, ListOptions{}, `unknown command "kb"`},
	} {
		got, err := parse(t, NewCmdList, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestStatusFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    StatusOptions
		wantErr string
	}{
		{nil, StatusOptions{Names: []string{}}, ""},
		{[]string{"kb", "docs", "--json"}, StatusOptions{Names: []string{"kb", "docs"}, JSON: true}, ""},
		{[]string{"--watch", "--interval", "2s", "--local"}, StatusOptions{Names: []string{}, Watch: true, Interval: 2 * time.Second, Local: true}, ""},
		{[]string{"--interval", "2"}, StatusOptions{}, `invalid argument "2" for "--interval"`},
	} {
		got, err := parse(t, NewCmdStatus, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    ServeOptions
		wantErr string
	}{
		{nil, ServeOptions{}, ""},
		{[]string{"--detach", "--env-file", "/home/u/.config/fleetmgr/broker.env"}, ServeOptions{Detach: true, EnvFile: "/home/u/.config/fleetmgr/broker.env"}, ""},
		{[]string{"--allow-remote", "--token-file", "tok"}, ServeOptions{Exposure: daemon.Exposure{Allow: true, TokenFile: "tok"}}, ""},
		{[]string{"--daemon-stage", "2", "--daemon-ready-fd", "3"}, ServeOptions{Stage: 2, ReadyFD: 3}, ""},
		{[]string{"--take-over-host"}, ServeOptions{TakeOver: true}, ""},
		{[]string{"--json"}, ServeOptions{}, "unknown flag: --json"},
		{[]string{"kb"}, ServeOptions{}, `unknown command "kb"`},
	} {
		got, err := parse(t, NewCmdServe, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestMCPFlags(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want MCPOptions
	}{
		{nil, MCPOptions{}},
		{[]string{"--no-start"}, MCPOptions{NoStart: true}},
	} {
		got, err := parse(t, NewCmdMCP, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, "")
	}
}

func TestReloadFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    ReloadOptions
		wantErr string
	}{
		{nil, ReloadOptions{}, ""},
		{[]string{"--json"}, ReloadOptions{JSON: true}, ""},
		{[]string{"now"}, ReloadOptions{}, `unknown command "now"`},
	} {
		got, err := parse(t, NewCmdReload, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestLogpipeFlags(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want LogpipeOptions
	}{
		{[]string{"--file", "/s/fleetd.log"}, LogpipeOptions{File: "/s/fleetd.log", MaxMB: 10, Backups: 5, Command: []string{}}},
		{[]string{"--file", "f", "--max-mb", "1", "--backups", "0", "--ready-fd", "3"}, LogpipeOptions{File: "f", MaxMB: 1, ReadyFD: 3, Command: []string{}}},
		{[]string{"--file", "f", "--", "fleetd", "--port", "9"}, LogpipeOptions{File: "f", MaxMB: 10, Backups: 5, Command: []string{"fleetd", "--port", "9"}}},
	} {
		got, err := parse(t, NewCmdLogpipe, tc.argv...)
		check(t, tc.argv, got, err, &tc.want, "")
	}
}

func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    CheckOptions
		wantErr string
	}{
		{nil, CheckOptions{}, ""},
		{[]string{"--json"}, CheckOptions{JSON: true}, ""},
		{[]string{"kb"}, CheckOptions{}, `unknown command "kb"`},
	} {
		got, err := parse(t, NewCmdCheck, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestVhostDeleteFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    VhostDeleteOptions
		wantErr string
	}{
		{[]string{"delete", "kb"}, VhostDeleteOptions{Fleet: "kb"}, ""}, // refused by runVhostDelete without the confirmation
		{[]string{"delete", "kb", "--yes-delete-messages"}, VhostDeleteOptions{Fleet: "kb", Yes: true}, ""},
		{[]string{"delete"}, VhostDeleteOptions{}, "accepts 1 arg(s)"},
	} {
		got, err := parse(t, NewCmdVhost, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestInitFlags(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want InitOptions
	}{
		{nil, InitOptions{Stray: []string{}}},
		{[]string{"--project", "~/src/kb", "--name", "kb", "--port", "8770", "--lead", "--json"},
			InitOptions{Stray: []string{}, JSON: true, Fleet: setup.FleetOptions{Project: "~/src/kb", Name: "kb", Port: 8770, Lead: true}}},
		{[]string{"--project", ".", "--", "fleetd", "--config", "{{.ConfigPath}}"},
			InitOptions{Stray: []string{}, Fleet: setup.FleetOptions{Project: ".", Command: []string{"fleetd", "--config", "{{.ConfigPath}}"}}}},
		{[]string{"stray", "--", "x"}, InitOptions{Stray: []string{"stray"}, Fleet: setup.FleetOptions{Command: []string{"x"}}}}, // refused by runInit
	} {
		got, err := parse(t, NewCmdInit, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, "")
	}
}

func TestAddFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    AddOptions
		wantErr string
	}{
		{[]string{"docs", "--project", "~/src/docs"}, AddOptions{Names: []string{"docs"}, Fleet: setup.FleetOptions{Project: "~/src/docs"}}, ""},
		{[]string{"kb", "--project", ".", "--port", "8770", "--lead", "--json", "--", "fleetd", "--name", "{{.Name}}"},
			AddOptions{Names: []string{"kb"}, JSON: true, Fleet: setup.FleetOptions{Project: ".", Port: 8770, Lead: true, Command: []string{"fleetd", "--name", "{{.Name}}"}}}, ""},
		{[]string{"a", "b", "--project", "."}, AddOptions{Names: []string{"a", "b"}, Fleet: setup.FleetOptions{Project: "."}}, ""}, // refused by runAdd
		{[]string{"docs"}, AddOptions{}, `"project" not set`},
		{[]string{"docs", "--project", ".", "--name", "x"}, AddOptions{}, "unknown flag: --name"},
		{[]string{}, AddOptions{}, "requires at least 1 arg(s)"},
	} {
		got, err := parse(t, NewCmdAdd, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestRemoveFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    RemoveOptions
		wantErr string
	}{
		{[]string{"docs"}, RemoveOptions{Remove: setup.RemoveOptions{Name: "docs"}}, ""},
		{[]string{"docs", "--purge", "--yes-delete-messages", "--yes-delete-worktrees", "--json"},
			RemoveOptions{JSON: true, Remove: setup.RemoveOptions{Name: "docs", Purge: true, DeleteMessages: true, DeleteWorktrees: true}}, ""},
		{[]string{"a", "b"}, RemoveOptions{}, "accepts 1 arg(s)"},
	} {
		got, err := parse(t, NewCmdRemove, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestServiceFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    ServiceOptions
		wantErr string
	}{
		{[]string{"install"}, ServiceOptions{Action: "install"}, ""},
		{[]string{"install", "--print", "--manager", "launchd", "--env-file", "/e", "--json"},
			ServiceOptions{Action: "install", Print: true, Kind: "launchd", EnvFile: "/e", JSON: true}, ""},
		{[]string{"uninstall", "--manager", "systemd"}, ServiceOptions{Action: "uninstall", Kind: "systemd"}, ""},
		{[]string{"status", "--json"}, ServiceOptions{Action: "status", JSON: true}, ""},
		{[]string{"status", "--print"}, ServiceOptions{}, "unknown flag: --print"},
		{[]string{"install", "x"}, ServiceOptions{}, `unknown command "x"`},
	} {
		got, err := parse(t, NewCmdService, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestMountFlags(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    MountOptions
		wantErr string
	}{
		{[]string{"claude"}, MountOptions{Client: "claude", Scope: "user", Name: "fleets"}, ""},
		{[]string{"opencode", "--stdio", "--scope", "project", "--name", "fm", "--print", "--json"},
			MountOptions{Client: "opencode", Stdio: true, Scope: "project", Name: "fm", Print: true, JSON: true}, ""},
		{nil, MountOptions{}, "accepts 1 arg(s)"},
	} {
		got, err := parse(t, NewCmdMount, tc.argv...)
		if got != nil {
			got.f = nil
		}
		check(t, tc.argv, got, err, &tc.want, tc.wantErr)
	}
}

func TestFederationKeyFlags(t *testing.T) {
	got, err := parse(t, NewCmdFederation, "key", "--json")
	if got != nil {
		got.f = nil
	}
	check(t, []string{"key", "--json"}, got, err, &FederationKeyOptions{JSON: true}, "")
	got, err = parse(t, NewCmdFederation, "key", "extra")
	check(t, []string{"key", "extra"}, got, err, nil, `unknown command "extra"`)
}

func TestVersionAndDocsFlags(t *testing.T) {
	got, err := parse(t, NewCmdVersion, "--json")
	if got != nil {
		got.f = nil
	}
	check(t, []string{"--json"}, got, err, &VersionOptions{JSON: true}, "")
	got, err = parse(t, NewCmdVersion, "x")
	check(t, []string{"x"}, got, err, nil, `unknown command "x"`)
	d, err := parse(t, NewCmdDocs, "man", "/tmp/man1")
	if err != nil || d == nil || d.Dir != "/tmp/man1" || d.root == nil {
		t.Errorf("docs man /tmp/man1: %v %+v", err, d)
	}
}

// TestJSONFlagPerVerb: every verb's --json is its own, bound to its own
// options, never one variable shared by several commands.
func TestJSONFlagPerVerb(t *testing.T) {
	f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}}
	seen := map[uintptr]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if fl := c.LocalFlags().Lookup("json"); fl != nil {
			p := reflect.ValueOf(fl.Value).Pointer()
			if other, ok := seen[p]; ok {
				t.Errorf("--json of %q and of %q is one variable", c.CommandPath(), other)
			}
			seen[p] = c.CommandPath()
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(NewCmdRoot(f))
	if len(seen) != 22 {
		t.Errorf("%d commands with a --json of their own, want 22: %v", len(seen), seen)
	}
}

// TestHelpFiles: every help/*.txt is some command's long help.
func TestHelpFiles(t *testing.T) {
	f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}}
	longs := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		longs[c.Long] = true
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(NewCmdRoot(f))
	files, _ := fs.Glob(helpFiles, "help/*.txt")
	if len(files) < 20 {
		t.Fatalf("%d help files", len(files))
	}
	for _, p := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "help/"), ".txt")
		if h := help(name); h == "" || !longs[h] {
			t.Errorf("%s is no command's help", p)
		}
	}
	if !strings.Contains(help("service"), "~/Library/LaunchAgents/"+service.Label+".plist") {
		t.Errorf("help/service.txt does not name the launchd agent %s", service.Label)
	}
}

// TestRunWithoutCobra: a verb's run function is called with options and
// streams of the test's own, no argv and no cobra.
func TestRunWithoutCobra(t *testing.T) {
	cfgPath, _ := fakeDaemon(t, []string{"kb", "docs"}, func(c net.Conn) { c.Close() })
	var out, errOut bytes.Buffer
	ios := &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	f := &cmdutil.Factory{IO: ios, ConfigPath: cfgPath}
	if err := runList(context.Background(), &ListOptions{f: f, JSON: true}, ios); err != nil {
		t.Fatal(err)
	}
	var rows []serveclient.ListRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 || rows[0].Name != "docs" || rows[0].State != "stopped" || rows[1].Port != 20001 {
		t.Fatalf("list: %v\n%s", err, out.String())
	}
	out.Reset()
	err := runAct(context.Background(), &ActOptions{f: f, Verb: serveapi.Start, Names: []string{"kb"}, All: true}, ios)
	if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("start kb --all: %v (exit %d)", err, cmdutil.ExitCode(err))
	}
	err = runLogs(context.Background(), &LogsOptions{f: f, Fleets: []string{"nope"}, Lines: 5}, ios)
	if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("logs nope: %v (exit %d)", err, cmdutil.ExitCode(err))
	}
}
