// Package fleetsfile edits fleets.toml in place: the commented file
// `fleetmgr init` writes, a [fleets.NAME] table appended by `fleetmgr
// add`, one removed by `fleetmgr remove`.
//
// Edits are byte-preserving: every byte outside the appended or removed
// lines stays as it was, comments included. Each edit is checked by
// decoding the result with BurntSushi/toml and comparing the tree with the
// one expected (the old tree plus or minus exactly that fleet), so a text
// the package cannot edit safely is refused, never written. Values are
// written by BurntSushi/toml's encoder, so they are quoted as TOML requires
// whatever characters they hold.
//
// The functions on []byte are pure; Create and Edit (file.go) write files:
// atomically, validated with registry.Load, and leaving the file as it was
// on any error.
package fleetsfile

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/fleetmgr/fleetmgr/registry"
)

//go:embed template.toml
var template []byte

// Template returns the commented fleets.toml `fleetmgr init` writes: every
// key of [manager], [guard], [status], [broker] and [fleets.NAME]
// commented out at its default (or an example), no fleet, no broker. It
// loads as the defaults. fleets.example.toml at the repository root
// documents the same keys at length (TestTemplateCoversExample keeps them
// in step).
func Template() []byte { return bytes.Clone(template) }

// DefaultCommand is the command of a fleet added without one: fleetd
// reading the config fleetmgr renders for it, as in fleets.example.toml.
func DefaultCommand() []string { return []string{"fleetd", "--config", "{{.ConfigPath}}"} }

// Fleet is the [fleets.NAME] table `fleetmgr add` writes.
type Fleet struct {
	// Name is NAME; it must match registry.FleetNamePattern.
	Name string
	// Project is the project directory as it is to be written: an
	// absolute path, or "~/…". It must not hold '$' (fleets.toml expands
	// $VARIABLES in paths and has no escape for a literal one).
	Project string
	// Command is fleetd's argv, each element a Go text/template (see
	// registry.TemplateData); nil or empty writes DefaultCommand.
	Command []string
	// Port is fleetd's fixed port; 0 leaves it out (allocated from
	// [manager] port_range).
	Port int
	// Lead writes lead = true (fleetmgr launches the fleet's lead).
	Lead bool
}

// table is the encoded form of a Fleet; the field order is the order the
// keys are written in.
type table struct {
	Project string   `toml:"project"`
	Command []string `toml:"command"`
	Port    int      `toml:"port,omitzero"`
	Lead    bool     `toml:"lead,omitempty"`
}

// check reports what in f cannot be written.
func (f Fleet) check() error {
	if !registry.ValidFleetName(f.Name) {
		return fmt.Errorf("fleet name %q is invalid: it must match %s", f.Name, registry.FleetNamePattern)
	}
	if f.Project == "" {
		return errors.New("the project directory is empty")
	}
	if strings.Contains(f.Project, "$") {
		return fmt.Errorf("project directory %q holds '$': fleets.toml expands $VARIABLES in paths and has no escape for a literal '$'; use a path without one (a symbolic link, say)", f.Project)
	}
	if !filepath.IsAbs(f.Project) && f.Project != "~" && !strings.HasPrefix(f.Project, "~/") {
		return fmt.Errorf("project directory %q is relative; write it absolute (relative paths in fleets.toml are relative to the file's directory)", f.Project)
	}
	if f.Port < 0 || f.Port > 65535 {
		return fmt.Errorf("port %d is not a TCP port", f.Port)
	}
	for i, a := range f.Command {
		if a == "" && i == 0 {
			return errors.New("the command's first element (the program) is empty")
		}
	}
	return nil
}

// NameFromDir derives a fleet name from a project directory's base name:
// lower-cased, every run of characters a name cannot hold turned into one
// '-', leading characters other than a letter dropped, cut to 32, trailing
// '-' and '_' trimmed ("My Project.v2" → "my-project-v2"). It fails when
// nothing valid is left ("/", "2024", "日本"), saying to pass a name.
func NameFromDir(dir string) (string, error) {
	base := filepath.Base(filepath.Clean(dir))
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(base) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
			dash = false
		case r == '-' || unicode.IsSpace(r) || unicode.IsPunct(r) || unicode.IsSymbol(r) || r > unicode.MaxASCII || r < ' ':
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
		}
	}
	name := strings.TrimLeftFunc(b.String(), func(r rune) bool { return r < 'a' || r > 'z' })
	if len(name) > 32 {
		name = name[:32]
	}
	name = strings.TrimRight(name, "-_")
	if !registry.ValidFleetName(name) {
		return "", fmt.Errorf("cannot derive a fleet name from directory %q (a name must match %s): pass --name", dir, registry.FleetNamePattern)
	}
	return name, nil
}

// Names returns the fleet names src (fleets.toml text) defines, sorted,
// from the decoded tree alone: a file that is valid TOML but fails
// validation (a project directory that is gone, say) still lists its
// fleets. Shell completion uses it.
func Names(src []byte) ([]string, error) {
	tree, err := decode(src)
	if err != nil {
		return nil, err
	}
	fleets, _ := tree["fleets"].(map[string]any)
	names := make([]string, 0, len(fleets))
	for n := range fleets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// NamesIn is Names of the file at path, for shell completion: nil when it
// is not a regular file (a FIFO would block the shell), cannot be read or
// is not TOML.
func NamesIn(path string) []string {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	names, _ := Names(src)
	return names
}

// decode parses src into a generic tree.
func decode(src []byte) (map[string]any, error) {
	tree := map[string]any{}
	if _, err := toml.Decode(string(src), &tree); err != nil {
		return nil, fmt.Errorf("not valid TOML: %w", err)
	}
	return tree, nil
}
