package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
)

// TestUsageErrors: every way argv itself can be wrong — an unknown verb
// or subcommand, too many or too few arguments, a flag that does not
// parse, a verb given no fleet — exits 2 (as a bad fleets.toml does) and
// names the command's usage and its --help; nothing is run, and no help
// text with exit 0 stands for an error.
func TestUsageErrors(t *testing.T) {
	cfgPath, _ := fakeDaemon(t, []string{"kb"}, nil)
	cases := []struct {
		argv []string
		want []string
	}{
		{[]string{"nosuchverb"}, []string{`unknown command "nosuchverb" for "fleetmgr"`, "`fleetmgr --help`"}},
		{[]string{"stat"}, []string{`unknown command "stat" for "fleetmgr"`, "did you mean start, status or stop?", "usage: fleetmgr COMMAND"}},
		{[]string{"service", "nosuch"}, []string{`unknown command "nosuch" for "fleetmgr service"`, "usage: fleetmgr service install|uninstall|status", "`fleetmgr service --help`"}},
		{[]string{"completion", "tcsh"}, []string{`unknown command "tcsh" for "fleetmgr completion"`}},
		{[]string{"federation", "keys"}, []string{`unknown command "keys" for "fleetmgr federation"`, "did you mean key?"}},
		{[]string{"vhost", "remove", "kb"}, []string{`unknown command "remove" for "fleetmgr vhost"`}},
		{[]string{"logs"}, []string{"name a fleet (or several), or --all, or --serve", "usage: fleetmgr logs [NAME…] [--all] [--serve] [flags]", "`fleetmgr logs --help`"}},
		{[]string{"docs", "man"}, []string{"accepts 1 arg(s), received 0", "usage: fleetmgr docs man DIR"}},
		{[]string{"list", "extra"}, []string{`"extra"`, "usage: fleetmgr list [flags]"}},
		{[]string{"mount"}, []string{"accepts 1 arg(s)", "usage: fleetmgr mount"}},
		{[]string{"mount", "bogus"}, []string{`invalid argument "bogus"`, "usage: fleetmgr mount", "`fleetmgr mount --help`"}},
		{[]string{"mount", "opencode", "--scope", "bogus"}, []string{`unknown --scope "bogus": user or project`, "usage: fleetmgr mount"}},
		{[]string{"status", "--interval", "0"}, []string{"--interval must be positive, e.g. 2s, not 0s", "usage: fleetmgr status"}},
		{[]string{"status", "--interval", "-1s"}, []string{"--interval must be positive"}},
		{[]string{"status", "--interval", "abc"}, []string{`invalid argument "abc" for "--interval"`, "`fleetmgr status --help`"}},
		{[]string{"logs", "kb", "-n", "99999999999999999999"}, []string{"value out of range", "`fleetmgr logs --help`"}},
		{[]string{"start", "--nosuch"}, []string{"unknown flag: --nosuch", "`fleetmgr start --help`"}},
		{[]string{"--config", cfgPath, "start"}, []string{"name a fleet to start (or --all); configured: kb", "usage: fleetmgr start [NAME…]", "`fleetmgr start --help`"}},
		{[]string{"--config", cfgPath, "restart"}, []string{"name a fleet to restart", "usage: fleetmgr restart"}},
		{[]string{"--config", cfgPath, "stop"}, []string{"name a fleet to stop (or --all); configured: kb", "usage: fleetmgr stop"}},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}}
		root := NewCmdRoot(f)
		root.SetArgs(tc.argv)
		err := root.Execute()
		if err == nil || cmdutil.ExitCode(err) != 2 {
			t.Errorf("%q: error %v, exit %d; want exit 2 (%d bytes on stdout)", tc.argv, err, cmdutil.ExitCode(err), out.Len())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q lacks %q", tc.argv, err, w)
			}
		}
	}
	// Without a subcommand a group command shows its help (exit 0), as
	// before.
	var out bytes.Buffer
	f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}}
	root := NewCmdRoot(f)
	root.SetArgs([]string{"service"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "fleetmgr service [command]") {
		t.Errorf("service alone: %v\n%s", err, out.String())
	}
}
