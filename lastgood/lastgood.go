// Package lastgood keeps, in the state dir, a copy of the last fleets.toml
// that loaded, so that a file broken by an edit does not lock the operator
// out of the fleets that run (issue 24 item 1): the verbs that read or act
// on existing fleets (list, status, logs, stop, restart, and start through
// a serve that knows the fleet) load the copy instead, with one warning.
//
// Two records, both JSON files of mode 0600 in the state dir:
//
//   - config.serve.json: the configuration a running serve has in force,
//     written by serve when it starts and after each reload it applies;
//   - config.last-good.json: the last file any fleetmgr process loaded.
//
// Find prefers serve's record while that serve runs (its configuration is
// what supervises the fleets), else the last good one, if it is a copy of
// the same file.
package lastgood

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Record is one kept copy of fleets.toml.
type Record struct {
	// Path is the absolute path of the file the copy was read from.
	Path string `json:"path"`
	// SavedAt is when it loaded (and was saved).
	SavedAt time.Time `json:"saved_at"`
	// By names who loaded it: "cli", or "serve" (PID set).
	By  string `json:"by"`
	PID int    `json:"pid,omitempty"`
	// TOML is the file's bytes as they loaded.
	TOML string `json:"toml"`
}

// File names in the state dir.
const (
	ServeFile    = "config.serve.json"
	LastGoodFile = "config.last-good.json"
)

// maxRecord bounds a record read back: fleets.toml's 1 MiB, escaped.
const maxRecord = 8 << 20

// Save records data, the bytes of the file at path that just loaded, in
// stateDir (file: ServeFile or LastGoodFile). A record with the same path
// and bytes is left as it is (no write per command); a state dir that does
// not exist yet is not made (nothing runs to be locked out of).
func Save(stateDir, file, path string, data []byte, by string, pid int) error {
	if stateDir == "" {
		return nil
	}
	if st, err := os.Stat(stateDir); err != nil || !st.IsDir() {
		return nil
	}
	p := filepath.Join(stateDir, file)
	if old, err := read(p); err == nil && old.Path == path && old.TOML == string(data) && old.By == by && old.PID == pid {
		return nil
	}
	b, err := json.Marshal(Record{Path: path, SavedAt: time.Now().UTC(), By: by, PID: pid, TOML: string(data)})
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b, 0o600)
}

func read(p string) (*Record, error) {
	b, err := atomicfile.Read(p, maxRecord)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &r, nil
}

// ErrNone: the state dir keeps no usable copy.
var ErrNone = errors.New("no last good copy of fleets.toml in the state dir")

// Find returns the configuration to use in place of the file at path,
// which does not load, from stateDir: with servePID > 0 (a serve of that
// state dir runs) serve's record when that serve wrote it, else the last
// good copy of the same file. The Config is loaded from the copy as the
// file at path (relative paths, Config.Path).
func Find(stateDir, path string, servePID int) (*registry.Config, *Record, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, err
	}
	var tried []error
	if servePID > 0 {
		r, err := read(filepath.Join(stateDir, ServeFile))
		switch {
		case err != nil:
			tried = append(tried, err)
		case r.PID != servePID:
			tried = append(tried, fmt.Errorf("%s was written by serve pid %d, not the running %d", ServeFile, r.PID, servePID))
		default:
			cfg, err := registry.LoadData(r.Path, []byte(r.TOML))
			if err == nil {
				return cfg, r, nil
			}
			tried = append(tried, err)
		}
	}
	r, err := read(filepath.Join(stateDir, LastGoodFile))
	switch {
	case err != nil:
		tried = append(tried, err)
	case !samePath(r.Path, abs):
		tried = append(tried, fmt.Errorf("the last good copy is of %s, not %s", r.Path, abs))
	default:
		cfg, err := registry.LoadData(abs, []byte(r.TOML))
		if err == nil {
			return cfg, r, nil
		}
		tried = append(tried, err)
	}
	return nil, nil, fmt.Errorf("%w (%v)", ErrNone, errors.Join(tried...))
}

// samePath reports whether a and b name one file (os.SameFile), or are
// the same string.
func samePath(a, b string) bool {
	if a == b {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
