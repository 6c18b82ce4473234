package toolpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// The actions of an Override.
const (
	ActionHide = "hide"
	ActionShow = "show"
)

// FileName is the overrides file in the state directory.
const FileName = "tools.json"

// Override is one `fleetmgr tools hide|show FLEET TOOL`.
type Override struct {
	// Fleet is the fleet as named (NAME, or NAME@HOST for another host's).
	Fleet string `json:"fleet"`
	// Tool is a tool name or a glob (registry.CheckToolPattern).
	Tool string `json:"tool"`
	// Action is ActionHide or ActionShow.
	Action string `json:"action"`
	// At is when it was made; the newest matching override wins.
	At time.Time `json:"at"`
	// Rules is RulesFingerprint of fleets.toml's rules for Fleet when it
	// was made: once the file's rules for the fleet change, the override
	// is void.
	Rules string `json:"rules"`
}

// Overrides is the content of <state_dir>/tools.json.
type Overrides struct {
	Version int        `json:"version"`
	Entries []Override `json:"entries"`
}

// Path is the overrides file of state dir stateDir.
func Path(stateDir string) string { return filepath.Join(stateDir, FileName) }

// Load reads stateDir's overrides; a missing file is none. A file that
// cannot be read or decoded is an error naming it.
func Load(stateDir string) (*Overrides, error) {
	p := Path(stateDir)
	b, err := atomicfile.Read(p, atomicfile.MaxSmall)
	if errors.Is(err, fs.ErrNotExist) {
		return &Overrides{Version: 1}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	o := &Overrides{}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("%s: not an overrides file (%v); remove it to drop every `fleetmgr tools hide|show`", p, err)
	}
	return o, nil
}

// Update records action (ActionHide or ActionShow) of tools on fleet under
// cfg's current rules, at now, in cfg's state dir: each tool's earlier
// override on the fleet is replaced, and overrides made under rules that
// changed since are dropped. The file is replaced whole (atomicfile)
// under an exclusive lock, so concurrent updates are not lost.
func Update(cfg *registry.Config, action, fleet string, tools []string, now time.Time) error {
	if action != ActionHide && action != ActionShow {
		return fmt.Errorf("unknown action %q (hide or show)", action)
	}
	dir := cfg.Manager.StateDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(Path(dir)+".lock", os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	o, err := Load(dir)
	if err != nil {
		return err
	}
	o.Version = 1
	o.Entries = slices.DeleteFunc(o.Entries, func(e Override) bool {
		return e.Rules != RulesFingerprint(cfg, e.Fleet) || e.Fleet == fleet && slices.Contains(tools, e.Tool)
	})
	fp := RulesFingerprint(cfg, fleet)
	for _, t := range tools {
		o.Entries = append(o.Entries, Override{Fleet: fleet, Tool: t, Action: action, At: now.UTC(), Rules: fp})
	}
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(Path(dir), append(b, '\n'), 0o600)
}
