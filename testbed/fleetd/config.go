package fleetd

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultLeadTab is the tab label treated as the lead's when none is
// configured (fleetd's fleet.leaders.*.tab).
const DefaultLeadTab = "lead"

// Config configures one stand-in daemon.
type Config struct {
	// Name is the fleet name reported by /healthz and in every tool result.
	// Required.
	Name string
	// Port is the TCP port on 127.0.0.1. LoadConfig requires 1–65535; a
	// Daemon built directly may use 0 for an ephemeral port (see
	// Daemon.Addr).
	Port int
	// HerdrSocket is the path of the herdr API socket the daemon drives.
	// Required.
	HerdrSocket string
	// HerdrSession is the herdr session name; informational only (logged).
	HerdrSession string
	// WorktreeRoot is where member working directories are made
	// (WorktreeRoot/<id>). Empty: fleet_spawn fails with a tool error.
	WorktreeRoot string
	// ProjectDir is the lead's working directory; empty lets herdr choose.
	ProjectDir string
	// LeadLaunch enables lead auto-launch at startup (fleetd's default).
	LeadLaunch bool
	// LeadTab is the label of the lead's tab; empty means DefaultLeadTab.
	LeadTab string
	// BrokerURI is the AMQP URI of the fleet's vhost
	// (amqp://user:pass@host:port/vhost); empty: no broker, members get no
	// inbox queue.
	BrokerURI string
	// BrokerURIEnv is the name of the variable BrokerURI was read from.
	BrokerURIEnv string
	// JSONResponse makes the MCP endpoint answer a POST with one
	// application/json message instead of an SSE stream (the go-sdk's
	// StreamableHTTPOptions.JSONResponse); progress and other messages
	// related to a call then go out on the session's GET stream.
	JSONResponse bool
	// AnyMemberID makes fleet_spawn accept any member id of 1–128 bytes of
	// UTF-8 without control characters (markup, quotes, slashes, spaces),
	// as a fleetd that does not check the ids it is given would: a peer
	// whose roster and log lines carry whatever a caller named a member,
	// for tests of how fleetmgr shows such values. The member's worktree
	// directory and tab label then use a hex form of the id. Off: ids are
	// 1-64 of [A-Za-z0-9._-].
	AnyMemberID bool
	// EventsFile, when set, receives one line per test-visible event,
	// appended: "cancelled fleet_slow" (with " request-id=ID" when the call
	// carried one) and "executed TOOL request-id=ID" for each execution of
	// a call whose _meta carries RequestIDMetaKey (executions.go).
	EventsFile string
}

// fileConfig is the TOML form read by --config. Environment variables win
// over it.
type fileConfig struct {
	Name         string `toml:"name"`
	Port         int    `toml:"port"`
	HerdrSocket  string `toml:"herdr_socket"`
	HerdrSession string `toml:"herdr_session"`
	WorktreeRoot string `toml:"worktree_root"`
	ProjectDir   string `toml:"project_dir"`
	LeadTab      string `toml:"lead_tab"`
	LeadLaunch   *bool  `toml:"lead_launch"`
}

// Environment variable names read by LoadConfig (docs/fleetd.md "The contract
// fleetmgr gives it", plus STANDIN_FLEETD_EVENTS and FLEET_LEAD_TAB for the stand-in).
const (
	EnvName         = "FLEET_NAME"
	EnvPort         = "FLEET_PORT"
	EnvHerdrSocket  = "FLEET_HERDR_SOCKET"
	EnvHerdrSession = "FLEET_HERDR_SESSION"
	EnvWorktreeRoot = "FLEET_WORKTREE_ROOT"
	EnvProjectDir   = "FLEET_PROJECT_DIR"
	EnvLeadLaunch   = "FLEET_LEAD_LAUNCH"
	EnvLeadTab      = "FLEET_LEAD_TAB"
	EnvEvents       = "STANDIN_FLEETD_EVENTS"
	// EnvBrokerURIEnv names the variable that holds the broker URI (real
	// fleetd's broker.uriEnv); unset: EnvBrokerURI.
	EnvBrokerURIEnv = "FLEET_BROKER_URI_ENV"
	EnvBrokerURI    = "FLEET_BROKER_URI"
)

// LoadConfig builds a Config from an optional TOML file (path "" = none;
// keys name, port, herdr_socket, herdr_session, worktree_root, project_dir,
// lead_tab, lead_launch; unknown keys are refused) overlaid by environment
// variables read through getenv (a non-empty variable wins). FLEET_LEAD_LAUNCH
// "0" or "false" disables lead launch; unset or "1"/"true" enables it.
// The broker URI comes from the variable FLEET_BROKER_URI_ENV names, else
// from FLEET_BROKER_URI; empty means no broker.
// Name, Port (1–65535) and HerdrSocket are required. Errors name the file or
// variable at fault.
func LoadConfig(path string, getenv func(string) string) (Config, error) {
	var fc fileConfig
	if path != "" {
		md, err := toml.DecodeFile(path, &fc)
		if err != nil {
			return Config{}, fmt.Errorf("fleetd stand-in: config %s: %w", path, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			keys := make([]string, len(und))
			for i, k := range und {
				keys[i] = k.String()
			}
			sort.Strings(keys)
			return Config{}, fmt.Errorf("fleetd stand-in: config %s: unknown keys %s", path, strings.Join(keys, ", "))
		}
	}
	cfg := Config{
		Name:         fc.Name,
		Port:         fc.Port,
		HerdrSocket:  fc.HerdrSocket,
		HerdrSession: fc.HerdrSession,
		WorktreeRoot: fc.WorktreeRoot,
		ProjectDir:   fc.ProjectDir,
		LeadTab:      fc.LeadTab,
		LeadLaunch:   fc.LeadLaunch == nil || *fc.LeadLaunch,
		EventsFile:   getenv(EnvEvents),
	}
	overlay := func(dst *string, env string) {
		if v := getenv(env); v != "" {
			*dst = v
		}
	}
	overlay(&cfg.Name, EnvName)
	overlay(&cfg.HerdrSocket, EnvHerdrSocket)
	overlay(&cfg.HerdrSession, EnvHerdrSession)
	overlay(&cfg.WorktreeRoot, EnvWorktreeRoot)
	overlay(&cfg.ProjectDir, EnvProjectDir)
	overlay(&cfg.LeadTab, EnvLeadTab)
	if v := getenv(EnvPort); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, fmt.Errorf("fleetd stand-in: %s=%q: not a port number", EnvPort, v)
		}
		cfg.Port = p
	}
	switch v := getenv(EnvLeadLaunch); v {
	case "":
	case "0", "false":
		cfg.LeadLaunch = false
	case "1", "true":
		cfg.LeadLaunch = true
	default:
		return Config{}, fmt.Errorf("fleetd stand-in: %s=%q: want 0 or 1", EnvLeadLaunch, v)
	}
	if cfg.LeadTab == "" {
		cfg.LeadTab = DefaultLeadTab
	}
	cfg.BrokerURIEnv = getenv(EnvBrokerURIEnv)
	if cfg.BrokerURIEnv == "" {
		cfg.BrokerURIEnv = EnvBrokerURI
	}
	cfg.BrokerURI = getenv(cfg.BrokerURIEnv)
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, fmt.Errorf("%s (or name) is required", EnvName))
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		errs = append(errs, fmt.Errorf("%s (or port) must be 1–65535, got %d", EnvPort, cfg.Port))
	}
	if cfg.HerdrSocket == "" {
		errs = append(errs, fmt.Errorf("%s (or herdr_socket) is required", EnvHerdrSocket))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("fleetd stand-in: config: %w", err)
	}
	return cfg, nil
}
