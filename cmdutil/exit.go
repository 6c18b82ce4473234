package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/termtext"
)

// ExitError carries a process exit status through cobra.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }

// Unwrap is the error carried.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitStatus is Code.
func (e *ExitError) ExitStatus() int { return e.Code }

// ExitCode is err's exit status: that of the first error in its chain
// with an ExitStatus method (2 for a request that cannot be carried out as
// given: serveapi.UsageError, service.UsageError, a rejected reload, a wrong
// argv; 3 for a refusal by the guard's rules, serveapi.Refusal,
// docs/SECURITY.md), else 1.
func ExitCode(err error) int {
	var st interface{ ExitStatus() int }
	if errors.As(err, &st) {
		return st.ExitStatus()
	}
	return 1
}

// Exit writes what ended the command to errOut and returns the process's
// exit status: 0 without err; 130 with a word on what an interruption
// means when the command was interrupted (Ctrl-C, SIGTERM) and err is
// the cancellation; else "fleetmgr: " and err, escaped, with ExitCode.
func Exit(errOut io.Writer, err error, interrupted bool) int {
	if err == nil {
		return 0
	}
	if interrupted && errors.Is(err, context.Canceled) {
		// Say what that means rather than "context canceled".
		fmt.Fprintln(errOut, "fleetmgr: interrupted; a start that was under way was rolled back where it could be — `fleetmgr list` shows each fleet's state")
		return 130
	}
	// Errors carry text from fleets and other hosts: escaped, never
	// acted on by the terminal (docs/SECURITY.md "Text from fleets and peers").
	fmt.Fprintln(errOut, "fleetmgr:", termtext.Text(err.Error()))
	return ExitCode(err)
}

// UsageErrors makes every way argv itself can be wrong exit 2 (as a
// fleets.toml that does not load), naming the command's usage and its
// --help, for root and every command under it: a flag that does not parse,
// a wrong count of arguments, and an unknown subcommand of a command that
// only groups others (cobra would print that command's help and exit 0).
// Such a command given no subcommand still shows its help. Call it once
// every command is added.
func UsageErrors(root *cobra.Command) {
	root.InitDefaultCompletionCmd() // cobra adds it at Execute otherwise, after this walk
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return UsageError(c, err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				return UsageError(c, unknownCommand(c, args[0]))
			}
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
			c.DisableFlagsInUseLine = true // its usage: "fleetmgr service …" alone shows this help
		case c.Args != nil:
			check := c.Args
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					return UsageError(c, err)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownCommand is the error for name, no subcommand of c, with the
// subcommands it may have meant.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, which SuggestionsFor does not apply
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		alts := s[len(s)-1]
		if len(s) > 1 {
			alts = strings.Join(s[:len(s)-1], ", ") + " or " + alts
		}
		msg += "; did you mean " + alts + "?"
	}
	return errors.New(msg)
}

// UsageError is err, a wrong argv of command c, with exit status 2 and
// c's usage line.
func UsageError(c *cobra.Command, err error) error {
	use := c.UseLine()
	if c.HasSubCommands() && !strings.Contains(c.Use, " ") {
		use = c.CommandPath() + " COMMAND"
	}
	return &ExitError{Code: 2, Err: fmt.Errorf("%w\nusage: %s (`%s --help` explains it)", err, use, c.CommandPath())}
}
