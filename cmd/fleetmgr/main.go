// Command fleetmgr drives several coding-agent fleets (fleetd + its herdr
// session + its broker vhost + its project) from one MCP mount. See
// README.md and docs/ARCHITECTURE.md.
//
// This package only parses flags and prints. Each verb is an options
// struct filled from argv by its NewCmdX(f, runF) constructor and a
// runX(ctx, opts, ios) function doing the verb through the packages that
// own the work: daemon (serve, and the client every verb reaches fleets
// through), doctor (check), setup (init, add, remove), service, mount,
// status. A test passes runF to see what argv parsed to without running
// anything (flags_test.go).
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// IOStreams are a command's standard streams; tests give buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Factory is what every verb's constructor gets: the streams, and the
// root's persistent flags (set by the time a verb runs).
type Factory struct {
	IO         *IOStreams
	ConfigPath string // --config
	Verbose    bool   // --verbose
}

// exitError carries a process exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string   { return e.err.Error() }
func (e *exitError) Unwrap() error   { return e.err }
func (e *exitError) ExitStatus() int { return e.code }

// exitCode is err's exit status: that of the first error in its chain
// with an ExitStatus method (2 for a request that cannot be carried out as
// given: daemon.UsageError, service.UsageError, a rejected reload; 3 for a
// refusal by the guard's rules, daemon.Refusal, docs/SECURITY.md), else 1.
func exitCode(err error) int {
	var st interface{ ExitStatus() int }
	if errors.As(err, &st) {
		return st.ExitStatus()
	}
	return 1
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	f := &Factory{IO: &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}}
	err := NewCmdRoot(f).ExecuteContext(ctx)
	interrupted := ctx.Err() != nil // before stop(), which cancels ctx too
	stop()
	if err != nil && interrupted && errors.Is(err, context.Canceled) {
		// Ctrl-C or SIGTERM: say what that means rather than "context canceled".
		fmt.Fprintln(os.Stderr, "fleetmgr: interrupted; a start that was under way was rolled back where it could be — `fleetmgr list` shows each fleet's state")
		os.Exit(130)
	}
	if err != nil {
		// Errors carry text from fleets and other hosts: escaped, never
		// acted on by the terminal (docs/SECURITY.md "Text from fleets and peers").
		fmt.Fprintln(os.Stderr, "fleetmgr:", termtext.Text(err.Error()))
		os.Exit(exitCode(err))
	}
}

// NewCmdRoot is `fleetmgr` with every verb.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetmgr",
		Short:         "Drive several coding-agent fleets from one MCP mount",
		Long:          help("fleetmgr"),
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       build().Short(),
	}
	root.SetVersionTemplate(versionTemplate())
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.PersistentFlags().StringVarP(&f.ConfigPath, "config", "c", "", "fleets.toml to use (default ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml or ~/.config/fleetmgr/fleets.toml)")
	root.PersistentFlags().BoolVarP(&f.Verbose, "verbose", "v", false, "log debug detail to stderr")
	root.AddCommand(NewCmdServe(f, nil), NewCmdMCP(f, nil), NewCmdReload(f, nil), NewCmdLogpipe(f, nil),
		NewCmdAct(f, daemon.Start, nil), NewCmdAct(f, daemon.Stop, nil), NewCmdAct(f, daemon.Restart, nil),
		NewCmdLogs(f, nil), NewCmdList(f, nil), NewCmdStatus(f, nil), NewCmdCheck(f, nil), NewCmdVhost(f, nil),
		NewCmdInit(f, nil), NewCmdAdd(f, nil), NewCmdRemove(f, nil), NewCmdService(f, nil), NewCmdMount(f, nil),
		NewCmdVersion(f, nil), NewCmdDocs(f, nil), NewCmdFederation(f, nil))
	completeFleets(root, f)
	usageErrors(root)
	return root
}

// usageErrors makes every way argv itself can be wrong exit 2 (as a
// fleets.toml that does not load), naming the command's usage and its
// --help, for root and every command under it: a flag that does not parse,
// a wrong count of arguments, and an unknown subcommand of a command that
// only groups others (cobra would print that command's help and exit 0).
// Such a command given no subcommand still shows its help.
func usageErrors(root *cobra.Command) {
	root.InitDefaultCompletionCmd() // cobra adds it at Execute otherwise, after this walk
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError(c, err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
				if c.SuggestionsMinimumDistance <= 0 {
					c.SuggestionsMinimumDistance = 2 // cobra's own default, which SuggestionsFor does not apply
				}
				if s := c.SuggestionsFor(args[0]); len(s) > 0 {
					alts := s[len(s)-1]
					if len(s) > 1 {
						alts = strings.Join(s[:len(s)-1], ", ") + " or " + alts
					}
					msg += "; did you mean " + alts + "?"
				}
				return usageError(c, errors.New(msg))
			}
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
			c.DisableFlagsInUseLine = true // its usage: "fleetmgr service …" alone shows this help
		case c.Args != nil:
			check := c.Args
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					return usageError(c, err)
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

// usageError is err, a wrong argv of command c, with exit status 2 and
// c's usage line.
func usageError(c *cobra.Command, err error) error {
	use := c.UseLine()
	if c.HasSubCommands() && !strings.Contains(c.Use, " ") {
		use = c.CommandPath() + " COMMAND"
	}
	return &exitError{code: 2, err: fmt.Errorf("%w\nusage: %s (`%s --help` explains it)", err, use, c.CommandPath())}
}

// configFile is the fleets.toml a verb reads: --config, else the first of
// registry.DefaultPath's places.
func (f *Factory) configFile() string {
	if f.ConfigPath != "" {
		return f.ConfigPath
	}
	return registry.DefaultPath(os.Getenv)
}

// Config loads the config and allocates ports; a file that does not load
// is exit status 2, a missing one says how to create it.
func (f *Factory) Config() (*registry.Config, error) {
	if f.configFile() == "" {
		return nil, &exitError{code: 2, err: errors.New("no ./fleets.toml here, and neither $XDG_CONFIG_HOME nor $HOME is an absolute path: name the file with --config")}
	}
	cfg, err := registry.Load(f.configFile())
	if errors.Is(err, fs.ErrNotExist) && f.ConfigPath == "" {
		err = fmt.Errorf("%w\nfleetmgr looks for ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml (~/.config/fleetmgr/fleets.toml): create one with `fleetmgr init`, or name a file with --config", err)
	} else if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w\ncreate it with `fleetmgr init --config %s`", err, f.ConfigPath)
	}
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return cfg, cfg.AllocatePorts()
}

// Logger logs to stderr at level (debug with --verbose).
func (f *Factory) Logger(level slog.Level) *slog.Logger {
	if f.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: level}))
}

// Manager is cfg's lifecycle.Manager, logging warnings.
func (f *Factory) Manager(cfg *registry.Config) *lifecycle.Manager {
	return daemon.NewManager(cfg, f.Logger(slog.LevelWarn))
}

// Client loads the config (Config) and returns it with its daemon
// client: through the running serve of its state dir, else through a
// lifecycle.Manager in this process.
func (f *Factory) Client() (*registry.Config, *daemon.Client, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, nil, err
	}
	return cfg, daemon.NewClient(cfg, f.Manager(cfg), version), nil
}

// quietManager is cfg's lifecycle.Manager logging errors only, for
// checks whose findings carry what went wrong (the guard's, check's).
func (f *Factory) quietManager(cfg *registry.Config) *lifecycle.Manager {
	return daemon.NewManager(cfg, f.Logger(slog.LevelError))
}

// refuseInPane is daemon.RefuseInPane for cfg.
func (f *Factory) refuseInPane(ctx context.Context, cfg *registry.Config, what string) error {
	return daemon.RefuseInPane(ctx, cfg, f.quietManager(cfg), what)
}

// printJSON writes v as indented JSON, with the characters a terminal
// would act on (C1 controls, bidi overrides from fleet or peer text)
// written as \u escapes: the same JSON, inert on a terminal.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.JSON(b), '\n'))
	return err
}

// printResult prints res as JSON, or lines; then returns err (a result
// with an error: the edit was made, what followed it failed).
func printResult(ios *IOStreams, asJSON bool, res any, lines []string, err error) error {
	if asJSON {
		if jerr := printJSON(ios.Out, res); jerr != nil {
			return jerr
		}
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(ios.Out, l)
	}
	return err
}

// do runs a verb: runF (a test's) when given, else the verb itself.
func do[O any](cmd *cobra.Command, f *Factory, opts *O, runF func(*O) error, verb func(context.Context, *O, *IOStreams) error) error {
	if runF != nil {
		return runF(opts)
	}
	return verb(cmd.Context(), opts, f.IO)
}

//go:embed help/*.txt
var helpFiles embed.FS

// help is the long help of a command: help/<name>.txt, the text --help
// and `fleetmgr docs man` show (flags_test.go checks every file is used).
func help(name string) string {
	b, _ := helpFiles.ReadFile("help/" + name + ".txt")
	return strings.TrimSuffix(string(b), "\n")
}
