// Package cmdutil is what every verb of the fleetmgr CLI shares (in the
// manner of cli/cli's pkg/cmdutil): the Factory a verb's NewCmdX gets
// (streams, root flags, the config and the daemon client), running a verb
// or a test's runF in its place, exit statuses and the usage errors of a
// wrong argv, printing results as JSON or lines, and man pages. The verbs
// themselves, their flags and help texts, are in cmd/fleetmgr.
package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/buildinfo"
	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/lastgood"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// Factory is what every verb's constructor gets: the streams, and the
// root's persistent flags (set by the time a verb runs).
type Factory struct {
	IO         *iostreams.IOStreams
	ConfigPath string // --config
	Verbose    bool   // --verbose
	Version    string // the release set at link time; "" is "dev"
	// InForce, set by ConfigInForce when fleets.toml did not load, says
	// which configuration a verb runs on instead; nil when the file
	// loaded.
	InForce *InForce
	// NewClient, when set, makes the verbs' Client (a CLI test's fake);
	// nil: a serveclient.Client, the product's. m is the in-process fallback
	// the product's client uses when no serve runs (nil for completion).
	NewClient func(cfg *registry.Config, m *lifecycle.Manager) Client
}

// InForce is the configuration a verb used in place of a fleets.toml that
// does not load (ConfigInForce).
type InForce struct {
	// Err is why the file does not load (file:line per problem).
	Err error
	// ServePID is the running serve whose configuration it is; 0: the
	// state dir's last good copy, no serve running.
	ServePID int
	// Record is the kept copy.
	Record *lastgood.Record
}

// AppVersion is f.Version, "dev" when unset: the version the CLI names
// in its MCP handshakes and serve writes to serve.json.
func (f *Factory) AppVersion() string {
	if f.Version == "" {
		return "dev"
	}
	return f.Version
}

// Build is this binary's build information (package buildinfo), naming
// the release f.Version when set.
func (f *Factory) Build() buildinfo.Info { return buildinfo.Read(f.AppVersion()) }

// ConfigFile is the fleets.toml a verb reads: --config, else the first of
// registry.DefaultPath's places ("" when none can be named).
func (f *Factory) ConfigFile() string {
	if f.ConfigPath != "" {
		return f.ConfigPath
	}
	return registry.DefaultPath(os.Getenv)
}

// Config loads the config and allocates ports; a file that does not load
// is exit status 2, a missing one says how to create it.
func (f *Factory) Config() (*registry.Config, error) {
	if f.ConfigFile() == "" {
		return nil, &ExitError{Code: 2, Err: errors.New("no ./fleets.toml here, and neither $XDG_CONFIG_HOME nor $HOME is an absolute path: name the file with --config")}
	}
	cfg, data, err := registry.LoadBytes(f.ConfigFile())
	if err == nil {
		// Kept, so that a later edit that breaks the file does not lock
		// the operator out (ConfigInForce); best effort.
		_ = lastgood.Save(cfg.Manager.StateDir, lastgood.LastGoodFile, cfg.Path, data, "cli", 0)
	}
	if errors.Is(err, fs.ErrNotExist) && f.ConfigPath == "" {
		err = fmt.Errorf("%w\nfleetmgr looks for ./fleets.toml, then $XDG_CONFIG_HOME/fleetmgr/fleets.toml (~/.config/fleetmgr/fleets.toml): create one with `fleetmgr init`, or name a file with --config", err)
	} else if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w\ncreate it with `fleetmgr init --config %s`", err, f.ConfigPath)
	}
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	return cfg, cfg.AllocatePorts()
}

// ConfigInForce is Config for the verbs that read or act on fleets that
// exist (list, status, logs, stop, restart, start): when the file exists
// but does not load, it is the last configuration that loaded instead —
// the running serve's of the file's state dir, else the state dir's last
// good copy of the same file (package lastgood) — with one warning on
// stderr naming each problem with file:line, and f.InForce set. With no
// such copy it is Config's error. check, reload, add and serve use Config,
// and refuse.
func (f *Factory) ConfigInForce() (*registry.Config, error) {
	cfg, err := f.Config()
	path := f.ConfigFile()
	if err == nil || path == "" || errors.Is(err, fs.ErrNotExist) {
		return cfg, err
	}
	if _, serr := os.Stat(path); serr != nil {
		return nil, err
	}
	stateDir := registry.StateDirOf(path)
	pid := serveapi.ServePID(stateDir)
	lg, rec, ferr := lastgood.Find(stateDir, path, pid)
	if ferr != nil {
		return nil, err
	}
	if aerr := lg.AllocatePorts(); aerr != nil {
		return nil, err
	}
	var loadErr error = err
	var ee *ExitError
	if errors.As(err, &ee) {
		loadErr = ee.Err
	}
	f.InForce = &InForce{Err: loadErr, Record: rec}
	using := fmt.Sprintf("its last good copy (loaded %s)", rec.SavedAt.Local().Format("2006-01-02 15:04:05"))
	if pid > 0 && rec.By == "serve" {
		f.InForce.ServePID = pid
		using = fmt.Sprintf("the configuration fleetmgr serve (pid %d) runs", pid)
	}
	fmt.Fprintf(f.IO.ErrOut, "fleetmgr: warning: %s; using %s (check, reload, add and serve refuse until the file is fixed)\n",
		strings.Join(strings.Split(strings.TrimSpace(loadErr.Error()), "\n"), "; "), using)
	return lg, nil
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

// QuietManager is cfg's lifecycle.Manager logging errors only, for
// checks whose findings carry what went wrong (the guard's, check's).
func (f *Factory) QuietManager(cfg *registry.Config) *lifecycle.Manager {
	return daemon.NewManager(cfg, f.Logger(slog.LevelError))
}

// QuietClient is cfg's Client over QuietManager, for checks.
func (f *Factory) QuietClient(cfg *registry.Config) Client { return f.client(cfg, f.QuietManager(cfg)) }

// Client loads the config (Config) and returns it with its daemon
// client: through the running serve of its state dir, else through a
// lifecycle.Manager in this process.
func (f *Factory) Client() (*registry.Config, Client, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, nil, err
	}
	return cfg, f.client(cfg, f.Manager(cfg)), nil
}

// ClientInForce is Client on ConfigInForce.
func (f *Factory) ClientInForce() (*registry.Config, Client, error) {
	cfg, err := f.ConfigInForce()
	if err != nil {
		return nil, nil, err
	}
	return cfg, f.client(cfg, f.Manager(cfg)), nil
}

// RefuseInPane is daemon.RefuseInPane for cfg: an error (exit status 3)
// when this process runs inside a herdr pane; what names the action
// refused ("start", "read the status of" …).
func (f *Factory) RefuseInPane(ctx context.Context, cfg *registry.Config, what string) error {
	return daemon.RefuseInPane(ctx, cfg, f.QuietManager(cfg), what)
}

// ConfigOutsidePane is Config, then RefuseInPane: for the verbs that
// act on fleets, which a member in a herdr pane must not reach.
func (f *Factory) ConfigOutsidePane(ctx context.Context, what string) (*registry.Config, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	return cfg, f.RefuseInPane(ctx, cfg, what)
}

// ClientOutsidePane is Client, then RefuseInPane.
func (f *Factory) ClientOutsidePane(ctx context.Context, what string) (*registry.Config, Client, error) {
	return f.outsidePane(ctx, what, f.Client)
}

func (f *Factory) outsidePane(ctx context.Context, what string, client func() (*registry.Config, Client, error)) (*registry.Config, Client, error) {
	cfg, c, err := client()
	if err != nil {
		return nil, nil, err
	}
	if err := f.RefuseInPane(ctx, cfg, what); err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

// Reloader is add's and remove's setup.Reloader: it makes a running serve
// re-read the edited file (serveclient.Client.ReloadEdited) and returns what
// to tell the operator.
func (f *Factory) Reloader(ctx context.Context, cfg *registry.Config) (string, error) {
	return f.client(cfg, f.Manager(cfg)).ReloadEdited(ctx)
}

// Run runs a verb from its command's RunE: runF (a test's, to see what
// argv parsed to) when given, else verb with the command's context and
// f's streams.
func Run[O any](cmd *cobra.Command, f *Factory, opts *O, runF func(*O) error, verb func(context.Context, *O, *iostreams.IOStreams) error) error {
	if runF != nil {
		return runF(opts)
	}
	return verb(cmd.Context(), opts, f.IO)
}
