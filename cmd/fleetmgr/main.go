// Command fleetmgr drives several coding-agent fleets (fleetd + its herdr
// session + its broker vhost + its project) from one MCP mount. See
// README.md and docs/ARCHITECTURE.md.
//
// This package only parses flags and prints. Each verb is an options
// struct filled from argv by its NewCmdX(f, runF) constructor and a
// runX(ctx, opts, ios) function doing the verb through the packages that
// own the work: daemon (serve, and the client every verb reaches fleets
// through), doctor (check), setup (init, add, remove), service, mount,
// status. What the verbs share (the Factory, exit statuses, printing) is
// package cmdutil; their streams, package iostreams. A test passes runF
// to see what argv parsed to without running anything (flags_test.go).
package main

import (
	"context"
	"embed"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := cmdutil.SignalContext(context.Background())
	f := &cmdutil.Factory{IO: iostreams.System(), Version: version}
	err := NewCmdRoot(f).ExecuteContext(ctx)
	interrupted := ctx.Err() != nil // before stop(), which cancels ctx too
	stop()
	os.Exit(cmdutil.Exit(f.IO.ErrOut, err, interrupted))
}

// NewCmdRoot is `fleetmgr` with every verb.
func NewCmdRoot(f *cmdutil.Factory) *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetmgr",
		Short:         "Drive several coding-agent fleets from one MCP mount",
		Long:          help("fleetmgr"),
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       f.Build().Short(),
	}
	root.SetVersionTemplate(versionTemplate(f))
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.PersistentFlags().StringVarP(&f.ConfigPath, "config", "c", "", "fleets.toml to use (default ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml or ~/.config/fleetmgr/fleets.toml)")
	root.PersistentFlags().BoolVarP(&f.Verbose, "verbose", "v", false, "log debug detail to stderr")
	root.AddCommand(NewCmdServe(f, nil), NewCmdMCP(f, nil), NewCmdReload(f, nil), NewCmdLogpipe(f, nil),
		NewCmdAct(f, serveapi.Start, nil), NewCmdAct(f, serveapi.Stop, nil), NewCmdAct(f, serveapi.Restart, nil),
		NewCmdLogs(f, nil), NewCmdList(f, nil), NewCmdStatus(f, nil), NewCmdTop(f, nil), NewCmdCheck(f, nil), NewCmdVhost(f, nil),
		NewCmdInit(f, nil), NewCmdAdd(f, nil), NewCmdRemove(f, nil), NewCmdService(f, nil), NewCmdMount(f, nil),
		NewCmdVersion(f, nil), NewCmdDocs(f, nil), NewCmdFederation(f, nil), NewCmdTools(f, nil),
		NewCmdEvents(f, nil), NewCmdNotify(f, nil))
	cmdutil.UsageErrors(root)
	return root
}

//go:embed help/*.txt
var helpFiles embed.FS

// help is the long help of a command: help/<name>.txt, the text --help
// and `fleetmgr docs man` show (flags_test.go checks every file is used).
func help(name string) string {
	b, _ := helpFiles.ReadFile("help/" + name + ".txt")
	return strings.TrimSuffix(string(b), "\n")
}
