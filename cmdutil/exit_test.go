package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/service"
)

// TestExitCodes: the exit status is that of the first error in the chain
// with an ExitStatus method, whichever package it comes from, else 1.
func TestExitCodes(t *testing.T) {
	for err, want := range map[error]int{
		errors.New("plain"): 1,
		fmt.Errorf("wrapped: %w", &serveapi.UsageError{Err: errors.New("u")}): 2,
		&serveapi.Refusal{Err: errors.New("r")}:                               3,
		&service.UsageError{Err: errors.New("s")}:                             2,
		&serveclient.ReloadRejected{PID: 1}:                                   2,
		&lifecycle.LogPipeError{Status: 127, Err: errors.New("exec")}:         127,
		&ExitError{Code: 130, Err: &serveapi.Refusal{Err: errors.New("x")}}:   130,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%T %v) = %d, want %d", err, err, got, want)
		}
	}
}

// TestExit: what main prints and exits with for a command's error.
func TestExit(t *testing.T) {
	canceled := fmt.Errorf("start kb: %w", context.Canceled)
	for _, tc := range []struct {
		name        string
		err         error
		interrupted bool
		code        int
		want        string // on stderr, "" nothing
	}{
		{"success", nil, false, 0, ""},
		{"success while interrupted", nil, true, 0, ""},
		{"interrupted", canceled, true, 130, "fleetmgr: interrupted; a start that was under way was rolled back"},
		{"canceled, not by a signal", canceled, false, 1, "fleetmgr: start kb: context canceled\n"},
		{"another error while interrupted", &serveapi.Refusal{Err: errors.New("in a pane")}, true, 3, "fleetmgr: in a pane\n"},
		{"fleet text escaped", &ExitError{Code: 2, Err: errors.New("bad \x1b]0;title\x07 name")}, false, 2, `fleetmgr: bad \x1b]0;title\x07 name` + "\n"},
	} {
		var errOut bytes.Buffer
		code := Exit(&errOut, tc.err, tc.interrupted)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) || (tc.want == "") != (errOut.Len() == 0) {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", tc.name, code, errOut.String(), tc.code, tc.want)
		}
	}
}

// TestUsageErrors: on a tree of its own, a wrong argument count, an
// unknown flag and an unknown subcommand of a group are exit status 2
// naming the usage and --help; a group alone shows its help.
func TestUsageErrors(t *testing.T) {
	newRoot := func(out *bytes.Buffer) *cobra.Command {
		root := &cobra.Command{Use: "tool", SilenceErrors: true, SilenceUsage: true}
		one := &cobra.Command{Use: "one NAME", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return nil }}
		grp := &cobra.Command{Use: "grp", Short: "a group"}
		grp.AddCommand(&cobra.Command{Use: "sub", Short: "its member", RunE: func(*cobra.Command, []string) error { return nil }})
		root.AddCommand(one, grp)
		root.SetOut(out)
		root.SetErr(out)
		UsageErrors(root)
		return root
	}
	for _, tc := range []struct {
		argv []string
		want []string
	}{
		{[]string{"one"}, []string{"accepts 1 arg(s), received 0", "usage: tool one NAME", "`tool one --help`"}},
		{[]string{"one", "x", "--nosuch"}, []string{"unknown flag: --nosuch", "`tool one --help`"}},
		{[]string{"grp", "sbu"}, []string{`unknown command "sbu" for "tool grp"`, "did you mean sub?", "usage: tool grp COMMAND"}},
		{[]string{"onee"}, []string{`unknown command "onee" for "tool"`, "did you mean one?"}},
	} {
		var out bytes.Buffer
		root := newRoot(&out)
		root.SetArgs(tc.argv)
		err := root.Execute()
		if ExitCode(err) != 2 {
			t.Errorf("%q: %v, exit %d; want 2", tc.argv, err, ExitCode(err))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q lacks %q", tc.argv, err, w)
			}
		}
	}
	var out bytes.Buffer
	root := newRoot(&out)
	root.SetArgs([]string{"grp"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "its member") {
		t.Errorf("grp alone: %v\n%s", err, out.String())
	}
	root = newRoot(&out)
	root.SetArgs([]string{"one", "x"})
	if err := root.Execute(); err != nil {
		t.Errorf("one x: %v", err)
	}
}
