// Package service makes the operating system's service manager supervise
// `fleetmgr serve`: a systemd user unit on Linux, a launchd agent on macOS.
// It renders the definition (SystemdUnit, LaunchdPlist), and installs,
// uninstalls and reports it (Install, Uninstall, Status in install.go)
// through the manager's own tools (systemctl --user, launchctl).
//
// The one rule the obvious definition breaks: fleets outlive the manager.
// fleetd and herdr are started by serve as leaders of their own sessions,
// so a signal to serve never reaches them; but systemd stops a service by
// signalling every process of its control group, which fleets started by
// serve belong to (cgroup membership is inherited and survives setsid).
// The unit therefore sets KillMode=process: stop and restart send SIGTERM
// (then, after TimeoutStopSec, SIGKILL) to serve alone, and the next serve
// adopts the fleets it finds running. docs/ARCHITECTURE.md "Supervised by
// the service manager" gives the consequences and the alternative not
// taken. launchd signals only the job's process, and its process group
// when the job exits; fleets lead their own sessions, so they are not in
// it, and AbandonProcessGroup says the same explicitly.
//
// Secrets (the broker administrator's credentials) never go in the
// definition: systemd reads them from EnvironmentFile=, launchd runs
// `fleetmgr serve --env-file PATH`; the file is private (package envfile).
package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unicode/utf8"
)

// Kind is a service manager.
type Kind string

// The service managers fleetmgr writes definitions for.
const (
	Systemd Kind = "systemd" // systemd user unit (Linux)
	Launchd Kind = "launchd" // launchd agent (macOS)
)

// DefaultKind is launchd on macOS and systemd elsewhere.
func DefaultKind() Kind {
	if runtime.GOOS == "darwin" {
		return Launchd
	}
	return Systemd
}

// ParseKind accepts "systemd" or "launchd".
func ParseKind(s string) (Kind, error) {
	switch Kind(s) {
	case Systemd, Launchd:
		return Kind(s), nil
	}
	return "", fmt.Errorf("unknown service manager %q: systemd or launchd", s)
}

// UnitName is the systemd unit's name.
const UnitName = "fleetmgr.service"

// Label is the launchd job's label (and the plist's base name).
const Label = "io.github.fleetmgr.serve"

// PassEnv lists the variables of the installing shell that the definition
// carries over to serve, when set: where commands are looked up (fleetd,
// herdr_bin, lead_command), and the directories fleetmgr and herdr derive
// the state dir and herdr sockets from. A service manager starts serve with
// an environment of its own, so without them serve could look for fleets
// in another state dir than the CLI, or not find fleetd. None is a secret.
var PassEnv = []string{"PATH", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "TMPDIR"}

// Spec is what a service definition runs.
type Spec struct {
	// Exe is the absolute path of the fleetmgr executable.
	Exe string
	// Config is the absolute path of fleets.toml.
	Config string
	// EnvFile is the absolute path of the private file with serve's
	// secrets (package envfile).
	EnvFile string
	// Env holds NAME=value pairs for serve (from PassEnv), in order.
	Env []string
	// Log is where launchd writes serve's stdout and stderr (systemd's
	// journal takes them otherwise).
	Log string
}

// NewSpec builds a Spec from the fleetmgr executable, the config and the
// env file, taking Env from getenv (PassEnv) and HOME for Log. It refuses
// relative paths, paths a definition cannot carry (not UTF-8, control
// characters), an executable that is not one, and one that `go run` built
// in its temporary go-build directory (gone once it exits).
func NewSpec(exe, config, envFile string, getenv func(string) string) (Spec, error) {
	for what, p := range map[string]string{"the fleetmgr executable": exe, "the config": config, "the environment file": envFile} {
		if !filepath.IsAbs(p) {
			return Spec{}, fmt.Errorf("%s %q is not an absolute path", what, p)
		}
		if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return Spec{}, fmt.Errorf("%s %q holds characters a service definition cannot carry", what, p)
		}
	}
	if strings.ContainsAny(exe, "\"'\\") {
		return Spec{}, fmt.Errorf("%s: systemd refuses an executable path holding quotes or backslashes; install fleetmgr under another path", exe)
	}
	st, err := os.Stat(exe)
	if err != nil {
		return Spec{}, fmt.Errorf("the fleetmgr executable: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return Spec{}, fmt.Errorf("%s is not an executable file", exe)
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return Spec{}, fmt.Errorf("%s is a temporary build (go run?): install fleetmgr first (go install, or go build -o ~/bin/fleetmgr ./cmd/fleetmgr) and run service install with that binary", exe)
	}
	if strings.ContainsAny(envFile, " \t\"'\\") {
		return Spec{}, fmt.Errorf("environment file %q: a path with blanks, quotes or backslashes cannot be named in a systemd unit; choose another with --env-file", envFile)
	}
	s := Spec{Exe: exe, Config: config, EnvFile: envFile}
	for _, k := range PassEnv {
		if v := getenv(k); v != "" {
			if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				return Spec{}, fmt.Errorf("$%s holds characters a service definition cannot carry", k)
			}
			s.Env = append(s.Env, k+"="+v)
		}
	}
	if home := getenv("HOME"); filepath.IsAbs(home) {
		s.Log = filepath.Join(home, "Library", "Logs", "fleetmgr.log")
	}
	return s, nil
}

// Args is serve's argv under the service manager of kind k: systemd reads
// EnvFile itself; launchd cannot, so serve is told to (--env-file).
func (s Spec) Args(k Kind) []string {
	args := []string{s.Exe, "serve", "--config", s.Config}
	if k == Launchd {
		args = append(args, "--env-file", s.EnvFile)
	}
	return args
}

// Render returns the definition of kind k for s.
func Render(k Kind, s Spec) ([]byte, error) {
	switch k {
	case Systemd:
		return SystemdUnit(s)
	case Launchd:
		return LaunchdPlist(s)
	}
	return nil, fmt.Errorf("unknown service manager %q", k)
}

// DefinitionPath is where the definition of kind k is installed:
// $XDG_CONFIG_HOME/systemd/user/fleetmgr.service (~/.config when
// XDG_CONFIG_HOME is not absolute) for systemd — the directory systemd's
// user manager reads — and ~/Library/LaunchAgents/<Label>.plist for
// launchd.
func DefinitionPath(k Kind, getenv func(string) string) (string, error) {
	home := getenv("HOME")
	if k == Systemd {
		if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
			return filepath.Join(x, "systemd", "user", UnitName), nil
		}
	}
	if !filepath.IsAbs(home) {
		return "", errors.New("$HOME is not an absolute path")
	}
	if k == Launchd {
		return filepath.Join(home, "Library", "LaunchAgents", Label+".plist"), nil
	}
	return filepath.Join(home, ".config", "systemd", "user", UnitName), nil
}

// EnvFilePath is the default environment file: broker.env beside the
// default fleets.toml, $XDG_CONFIG_HOME/fleetmgr/broker.env or
// ~/.config/fleetmgr/broker.env.
func EnvFilePath(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "fleetmgr", "broker.env"), nil
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("$HOME is not an absolute path: name the file with --env-file")
	}
	return filepath.Join(home, ".config", "fleetmgr", "broker.env"), nil
}

// UsageError is a request `fleetmgr service` cannot carry out as given: an
// unknown --manager, or paths a definition cannot carry (NewSpec).
// fleetmgr exits 2 on it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string   { return e.Err.Error() }
func (e *UsageError) Unwrap() error   { return e.Err }
func (e *UsageError) ExitStatus() int { return 2 }

// Flags are `fleetmgr service`'s flags, which Resolve turns into Options.
type Flags struct {
	// Kind is --manager: "systemd", "launchd", or "" for DefaultKind.
	Kind string
	// EnvFile is --env-file; "" is EnvFilePath. A relative one is made
	// absolute.
	EnvFile string
	// Config is the absolute path of the fleets.toml serve is to run, which
	// the caller has loaded (a service that cannot start would only crash
	// loop); "" (uninstall) resolves a Spec holding EnvFile alone.
	Config string
	// Exe is the fleetmgr executable; "" is this one (os.Executable).
	Exe string
	// Getenv reads HOME, XDG_CONFIG_HOME and PassEnv; nil is os.Getenv.
	Getenv func(string) string
}

// Resolve returns the Options Install, Uninstall, Status and Render act on
// for f, for this user (os.Getuid). An unknown Kind, and what NewSpec
// refuses, are a *UsageError.
func Resolve(f Flags) (Options, error) {
	getenv := f.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	kind := DefaultKind()
	if f.Kind != "" {
		k, err := ParseKind(f.Kind)
		if err != nil {
			return Options{}, &UsageError{err}
		}
		kind = k
	}
	path, err := DefinitionPath(kind, getenv)
	if err != nil {
		return Options{}, err
	}
	o := Options{Kind: kind, Path: path, UID: os.Getuid()}
	envFile := f.EnvFile
	if envFile == "" {
		if envFile, err = EnvFilePath(getenv); err != nil {
			return Options{}, err
		}
	}
	if envFile, err = filepath.Abs(envFile); err != nil {
		return Options{}, err
	}
	if f.Config == "" {
		o.Spec.EnvFile = envFile
		return o, nil
	}
	exe := f.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return Options{}, err
		}
	}
	if o.Spec, err = NewSpec(exe, f.Config, envFile, getenv); err != nil {
		return Options{}, &UsageError{err}
	}
	return o, nil
}
