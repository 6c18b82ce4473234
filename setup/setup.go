// Package setup carries out `fleetmgr init`, `fleetmgr add` and `fleetmgr
// remove`: it turns their options into edits of fleets.toml (package
// fleetsfile), checks what a fleet's state allows (package lifecycle), and
// asks a running `fleetmgr serve` to re-read the file through a Reloader
// the caller supplies. Nothing here parses flags or prints: each verb is an
// options struct and a function returning a result, which says what it did
// in words (Lines) and as JSON (MarshalJSON) for the CLI to print.
package setup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fleetmgr/fleetmgr/fleetsfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Reloader asks the `fleetmgr serve` running for cfg (if any) to re-read
// cfg.Path. It returns one sentence for the operator: what it did, or what
// to run. An error means a daemon runs and refused or failed the reload.
type Reloader func(ctx context.Context, cfg *registry.Config) (string, error)

// InitPath returns where `fleetmgr init` writes by default:
// $XDG_CONFIG_HOME/fleetmgr/fleets.toml when XDG_CONFIG_HOME is absolute,
// else $HOME/.config/fleetmgr/fleets.toml — the second and third places
// registry.DefaultPath looks (the first, ./fleets.toml, is a per-directory
// override init never writes unless told to with --config).
func InitPath(getenv func(string) string) (string, error) {
	if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "fleetmgr", "fleets.toml"), nil
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("neither $XDG_CONFIG_HOME nor $HOME is an absolute path: name the file with --config")
	}
	return filepath.Join(home, ".config", "fleetmgr", "fleets.toml"), nil
}

// FleetOptions describe the fleet `init --project` or `add` writes.
type FleetOptions struct {
	// Name is the fleet's name. Empty (init only): derived from the
	// project directory's base name (fleetsfile.NameFromDir).
	Name string
	// Project is the project directory as the operator gave it; a
	// relative one is taken from the working directory. It must exist.
	Project string
	// Port is a fixed port for fleetd; 0 allocates one.
	Port int
	// Lead launches the fleet's lead once fleetd is healthy.
	Lead bool
	// Command is fleetd's argv (Go templates); empty writes
	// fleetsfile.DefaultCommand.
	Command []string
}

// fleet resolves o into what fleetsfile writes. getenv gives HOME: a
// project under it is written "~/…", which Load expands back.
func (o FleetOptions) fleet(getenv func(string) string) (fleetsfile.Fleet, string, error) {
	if o.Project == "" {
		return fleetsfile.Fleet{}, "", errors.New("no project directory: pass --project DIR")
	}
	abs, err := filepath.Abs(o.Project)
	if err != nil {
		return fleetsfile.Fleet{}, "", err
	}
	st, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return fleetsfile.Fleet{}, "", fmt.Errorf("project directory %s: %w; create it first (mkdir -p %q), or give --project a directory that exists", abs, err, abs)
	}
	if err != nil {
		return fleetsfile.Fleet{}, "", fmt.Errorf("project directory %s: %w", abs, err)
	}
	if !st.IsDir() {
		return fleetsfile.Fleet{}, "", fmt.Errorf("project %s is not a directory", abs)
	}
	name := o.Name
	if name == "" {
		if name, err = fleetsfile.NameFromDir(abs); err != nil {
			return fleetsfile.Fleet{}, "", err
		}
	}
	written := abs
	if home := filepath.Clean(getenv("HOME")); filepath.IsAbs(home) && home != "/" && !strings.Contains(home, "$") {
		if rel, err := filepath.Rel(home, abs); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			written = "~/" + filepath.ToSlash(rel)
		}
	}
	return fleetsfile.Fleet{Name: name, Project: written, Command: o.Command, Port: o.Port, Lead: o.Lead}, abs, nil
}

// checkWritten verifies that the fleet as loaded from the file is the one
// asked for: the project directory Load resolves is abs, the command, port
// and lead are as given.
func checkWritten(cfg *registry.Config, f fleetsfile.Fleet, abs string) (*registry.Fleet, error) {
	got, ok := cfg.Fleets[f.Name]
	if !ok {
		return nil, fmt.Errorf("%s: fleet %s is not in the file after writing it", cfg.Path, f.Name)
	}
	cmd := f.Command
	if len(cmd) == 0 {
		cmd = fleetsfile.DefaultCommand()
	}
	switch {
	case got.Project != filepath.Clean(abs):
		return got, fmt.Errorf("%s: fleet %s's project loads as %s, not %s", cfg.Path, f.Name, got.Project, abs)
	case !slices.Equal(got.Command, cmd):
		return got, fmt.Errorf("%s: fleet %s's command loads as %q, not %q", cfg.Path, f.Name, got.Command, cmd)
	case f.Port != 0 && got.Port != f.Port, got.Lead != f.Lead:
		return got, fmt.Errorf("%s: fleet %s loads with port %d lead %v, not port %d lead %v", cfg.Path, f.Name, got.Port, got.Lead, f.Port, f.Lead)
	}
	return got, nil
}
