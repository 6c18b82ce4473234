// Package registry loads fleets.toml, the operator's list of fleets on this
// host, and the manager settings that go with it.
//
// Load decodes the file strictly (unknown keys and wrong types are refused),
// applies defaults, expands paths, and validates the isolation rules
// (docs/fleetd.md "Isolation"): no two fleets share a port, a
// herdr session, a broker vhost, a worktree root or a rendered config file.
// Every problem is reported as an *Error that names the file, the line and
// the key; Load reports all of them at once, sorted by line.
//
// Load never writes. AllocatePorts gives fleets without a fixed port one from
// the manager's port range and persists the choice in the state directory.
// fleets.example.toml at the repository root documents every key.
package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Default values of the [manager] and [fleets.NAME] keys. Paths that start
// with "<state_dir>" are relative to the manager's state directory.
const (
	DefaultListen       = "127.0.0.1:8760"   // [manager] listen
	DefaultHerdrBin     = "herdr"            // [manager] herdr_bin
	DefaultPortLow      = 8766               // [manager] port_range[0]
	DefaultPortHigh     = 8799               // [manager] port_range[1]
	DefaultStopGrace    = 10 * time.Second   // [manager] stop_grace
	DefaultStartTimeout = 30 * time.Second   // [manager] start_timeout
	DefaultCallTimeout  = 120 * time.Second  // [manager] call_timeout
	DefaultMCPPath      = "/mcp"             // [fleets.NAME] mcp_path (docs/fleetd.md: the path is not known)
	DefaultLeadTab      = "lead"             // [fleets.NAME] lead_tab
	DefaultLeadReady    = 30 * time.Second   // [fleets.NAME] lead_ready_timeout
	DefaultBrokerURIEnv = "FLEET_BROKER_URI" // [fleets.NAME] broker_uri_env (docs/fleetd.md "The contract fleetmgr gives it")
)

// defaultLeadCommand returns the default of [fleets.NAME] lead_command.
func defaultLeadCommand() []string { return []string{"claude"} }

// Config is a loaded fleets.toml.
type Config struct {
	// Path is the absolute path of the file Load read.
	Path string
	// Manager holds the [manager] table with defaults applied.
	Manager Manager
	// Guard holds the [guard] table with defaults applied.
	Guard Guard
	// Status holds the [status] table with defaults applied.
	Status Status
	// Broker holds the [broker] table with defaults applied; nil when the
	// file has none (no vhost step, "no broker configured").
	Broker *Broker
	// Federation holds the [federation] table with defaults applied; nil
	// when the file has none (nothing federates).
	Federation *Federation
	// Notify are the [[notify]] rules in file order (nil: none).
	Notify []Notify
	// Fleets holds each [fleets.NAME] table by NAME.
	Fleets map[string]*Fleet
}

// Manager is the [manager] table: settings of fleetmgr itself.
type Manager struct {
	// Listen is the host:port of the streamable-HTTP MCP endpoint. Load
	// checks only its form; `fleetmgr serve` refuses a non-loopback host
	// unless told otherwise. Default DefaultListen.
	Listen string
	// StateDir is the absolute state directory (ports.json, per-fleet
	// state, logs). Default $XDG_STATE_HOME/fleetmgr, else
	// ~/.local/state/fleetmgr. "~" and $VARS are expanded.
	StateDir string
	// HerdrBin is the herdr executable: a name looked up in $PATH, or a
	// path (expanded and made absolute when it contains a slash).
	HerdrBin string
	// PortRange is the inclusive [low, high] range fleet ports come from.
	PortRange [2]int
	// StopGrace is how long a fleet gets between SIGTERM and SIGKILL.
	StopGrace Duration
	// StartTimeout bounds a fleet's start (herdr session up, /healthz).
	StartTimeout Duration
	// CallTimeout is the default per-tool-call timeout for forwarded calls.
	CallTimeout Duration
	// MCPSocket is the unix socket `fleetmgr mcp` connects to. Default
	// <state_dir>/fleetmgr.sock; at most 107 bytes (sun_path).
	MCPSocket string
	// Restart is the default supervision policy of every fleet (the
	// restart_* / crash_loop_* / health_* keys of [manager]).
	Restart RestartPolicy
	// LogMaxMB is the size in megabytes at which a fleet's fleetd.log or
	// herdr.log is rotated. Default DefaultLogMaxMB.
	LogMaxMB int
	// LogMaxBackups is how many rotated log files are kept per log (0:
	// all). Default DefaultLogMaxBackups.
	LogMaxBackups int
	// PassEnv names variables of fleetmgr's environment that every fleet's
	// processes get as they are, beyond the login basics (pass_env; see
	// Fleet.PassEnv). Never a secret of the manager: the broker
	// administrator's variables and FLEETMGR_* are refused, as are HERDR_*
	// and FLEET_*. nil when not set.
	PassEnv []string
	// FastPath is whether `fleetmgr serve` answers forwarded tools/call
	// itself on both MCP mounts (the fast path, docs/ARCHITECTURE.md
	// "Overhead") rather than through the go-sdk's server session
	// (fast_path; default true). false sends every message through the
	// SDK: slower, and what SDK middleware sees is then every call.
	FastPath bool
	// HerdrLabels makes `fleetmgr serve` show its verdict for each member
	// in herdr's own sidebar (pane.report_metadata, e.g. "STALLED 3m") on
	// a herdr that pushes (herdr_labels). Default true.
	HerdrLabels bool
	// Tools are [manager]'s tools.allow and tools.deny: applied to every
	// fleet, this host's and other hosts' (ToolRules).
	Tools ToolRules
	// Journal makes serve keep the journal (<state_dir>/journal.db):
	// `events`, the dashboard's history, notification episodes across
	// restarts. Default true; false ([manager] journal = false) keeps
	// none, and `fleetmgr events` says so.
	Journal bool
	// JournalMaxMB bounds the journal (<state_dir>/journal.db) in
	// megabytes: the oldest events go past it. Default DefaultJournalMaxMB.
	JournalMaxMB int
	// JournalMaxAge is how long an event is kept. Default
	// DefaultJournalMaxAge (30 days).
	JournalMaxAge Duration
	// JournalCallArguments stores each tool call's arguments in the
	// journal. Default false: only tool, client, duration, size, outcome.
	JournalCallArguments bool
}

// Guard is the [guard] table: who may call the manager (docs/SECURITY.md).
type Guard struct {
	// AllowedUIDs are the peer uids let in. Default: the manager's own uid.
	AllowedUIDs []int
	// OperatorSessions names herdr sessions whose panes may call the
	// manager. Load refuses any that is a fleet's herdr session, since that
	// would let that fleet's members in. Default none.
	OperatorSessions []string
}

// Fleet is one [fleets.NAME] table with defaults applied and paths absolute.
type Fleet struct {
	// Name is NAME: ^[a-z][a-z0-9_-]{0,31}$.
	Name string
	// Project is the absolute, cleaned project directory (required).
	Project string
	// Command is fleetd's argv (required, non-empty). Elements are
	// text/template strings over TemplateData; see RenderCommand.
	Command []string
	// Port is fleetd's loopback port: fixed in the file, or set by
	// AllocatePorts (0 until then).
	Port int
	// PortAllocated is true when Port came from AllocatePorts rather than
	// the file.
	PortAllocated bool
	// HerdrSession is the fleet's herdr session name. Default Name.
	HerdrSession string
	// WorktreeRoot is the absolute directory for the fleet's worktrees.
	// Default <state_dir>/fleets/NAME/worktrees.
	WorktreeRoot string
	// Env holds extra environment variables for the fleet's fleetd and
	// lead ([fleets.NAME.env]). HERDR_* and FLEET_* names are refused
	// (HERDR_* are scrubbed, FLEET_* are the contract with fleetd), and so
	// are the manager's secrets (the broker administrator's variables,
	// FLEETMGR_*). Never nil.
	Env map[string]string
	// PassEnv names further variables of fleetmgr's environment this
	// fleet's processes get as they are (the fleet's own pass_env; the
	// manager's Manager.PassEnv applies too). Same refusals as Env. nil
	// when not set.
	PassEnv []string
	// MCPPath is fleetd's MCP endpoint path. Default DefaultMCPPath.
	MCPPath string
	// ConfigTemplate is the absolute path of a text/template file rendered
	// into ConfigFile before fleetd starts; "" when not set.
	ConfigTemplate string
	// ConfigFile is where the rendered config goes. Default
	// <state_dir>/fleets/NAME/fleetd.conf.
	ConfigFile string
	// Lead reports whether fleetmgr launches the fleet's lead (LeadCommand
	// in a herdr tab labelled LeadTab) once fleetd is healthy. Default
	// false.
	Lead bool
	// LeadTab is the herdr tab label of the lead. Default DefaultLeadTab.
	LeadTab string
	// LeadCommand is the lead's argv (literal, not a template). Default
	// ["claude"].
	LeadCommand []string
	// LeadReadyTimeout bounds how long a lead launch waits, after typing
	// LeadCommand, for herdr to show an agent in the lead's pane (a settled
	// agent_status); the launch does not fail when it passes, it says so.
	// Default DefaultLeadReady.
	LeadReadyTimeout Duration
	// CallTimeout is the per-tool-call timeout for this fleet: the file's
	// value, else the manager's call_timeout.
	CallTimeout Duration
	// Restart is this fleet's supervision policy: [manager]'s, with the
	// keys the fleet's table sets overriding it.
	Restart RestartPolicy
	// Vhost is the fleet's broker vhost. Default "fleet-" + Name
	// (DefaultVhostPrefix). Not "/" (the broker's shared default vhost).
	Vhost string
	// BrokerUser is the broker user fleetmgr creates for the fleet, with
	// permissions on Vhost only. Default "fleet-" + Name.
	BrokerUser string
	// BrokerURIEnv names the env var that carries the broker URI to
	// fleetd. Default DefaultBrokerURIEnv.
	BrokerURIEnv string
	// StateDir is the fleet's own state directory,
	// <state_dir>/fleets/NAME (not configurable).
	StateDir string
	// LogDir is where the fleet's logs go (fleetd.log, herdr.log and their
	// rotated copies): the fleet's StateDir.
	LogDir string
	// Host is where the fleet runs: LocalHost (default) or a host name;
	// status reports a fleet on another host as REMOTE and never probes it.
	Host string
	// Line is the 1-based line of the fleet's [fleets.NAME] header (or of
	// the first key that defines the table).
	Line int
	// Tools are the fleet's own tools.allow and tools.deny ([manager]'s
	// apply too: Config.ToolRulesOf).
	Tools ToolRules
}

// fixedPort reports whether f's port was written in the file (or set by
// whoever built the Fleet) rather than allocated.
func (f *Fleet) fixedPort() bool { return f.Port != 0 && !f.PortAllocated }

// Duration is a time.Duration written in TOML as a Go duration string such
// as "10s" or "1m30s".
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string (time.ParseDuration).
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as time.Duration.String does, e.g. "1m30s".
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.Duration.String()), nil
}

// Error is one problem in a configuration file. Load returns them joined
// with errors.Join; use errors.As to reach the first.
type Error struct {
	// File is the path as passed to Load.
	File string
	// Line is the 1-based line of the offending key (or of its table when
	// the key is absent); 0 when no line applies.
	Line int
	// Field is the dotted key, e.g. "fleets.kb.port" or
	// "guard.operator_sessions[1]"; "" for whole-file problems.
	Field string
	// Msg says what is wrong and, where it helps, what is expected.
	Msg string
}

// Error formats the problem as "file:line: field: msg", leaving out the
// parts that are empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads the fleets.toml at path, decodes it strictly, applies
// defaults and validates it. It uses the process environment for ~ and
// $VAR expansion and os.Getuid for the default allowed uid. It writes
// nothing. A read failure is returned as is; every problem in the file is
// an *Error, all of them joined and sorted by line.
func Load(path string) (*Config, error) {
	return load(path, env{getenv: os.Getenv, uid: os.Getuid()})
}

// Names returns the fleet names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.Fleets))
	for n := range c.Fleets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Fleet returns the fleet called name, or an error that lists the valid
// names.
func (c *Config) Fleet(name string) (*Fleet, error) {
	if f, ok := c.Fleets[name]; ok {
		return f, nil
	}
	names := c.Names()
	if len(names) == 0 {
		return nil, fmt.Errorf("unknown fleet %q: %s defines no fleets", name, c.Path)
	}
	return nil, fmt.Errorf("unknown fleet %q: %s defines %s", name, c.Path, strings.Join(names, ", "))
}

// DefaultPath returns where fleetmgr looks for its configuration:
// "./fleets.toml" when that file exists, else
// $XDG_CONFIG_HOME/fleetmgr/fleets.toml when XDG_CONFIG_HOME is an absolute
// path (the XDG spec says to ignore relative ones), else
// $HOME/.config/fleetmgr/fleets.toml when HOME is an absolute path, else
// "" (no place: the caller asks for --config, rather than reading
// ".config/…" under the current directory). getenv is usually os.Getenv.
func DefaultPath(getenv func(string) string) string {
	const local = "./fleets.toml"
	if st, err := os.Stat(local); err == nil && !st.IsDir() {
		return local
	}
	if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "fleetmgr", "fleets.toml")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".config", "fleetmgr", "fleets.toml")
	}
	return ""
}
