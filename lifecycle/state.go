package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"
)

// Desired is what the operator asked for; the supervisor acts on it.
type Desired string

// Desired states recorded in the state dir.
const (
	DesiredRunning Desired = "running"
	DesiredStopped Desired = "stopped"
)

// Proc identifies one process we started: pid plus its start time in clock
// ticks since boot (/proc/PID/stat field 22), so a reused pid is never
// mistaken for ours, plus what is checked before it is signalled (pid and
// start time name one process for one boot only, and a state file can be
// forged): the boot it was recorded under and its executable. Records
// written before these fields existed have them empty, which means
// "unknown": such a record is then checked by its identity alone (argv or
// environment, see identity.go). Two Procs name the same process when
// their pid and start time are equal (sameProc).
type Proc struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// BootID is /proc/sys/kernel/random/boot_id when the process was
	// spawned; a record from another boot is never signalled.
	BootID string `json:"boot_id,omitempty"`
	// Exe is the process's /proc/PID/exe once it was ready (its herdr
	// socket or /healthz answered), after any exec of a wrapper.
	Exe string `json:"exe,omitempty"`
}

// State is one fleet's persisted record, stored as JSON at
// <state_dir>/fleets/<name>/state.json and rewritten atomically.
type State struct {
	Name    string  `json:"name"`
	Desired Desired `json:"desired"`
	// Phase is the stored phase; it changes only through transition
	// (fsm.go), which records why and when in PhaseReason and PhaseAt.
	// Readers display Shown.Phase.
	Phase       Phase     `json:"phase"`
	PhaseReason string    `json:"phase_reason,omitempty"`
	PhaseAt     time.Time `json:"phase_at,omitzero"`
	Port        int       `json:"port"`
	HerdrSocket string    `json:"herdr_socket"`
	Herdr       *Proc     `json:"herdr,omitempty"`
	HerdrOwned  bool      `json:"herdr_owned"`
	Fleetd      *Proc     `json:"fleetd,omitempty"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	Restarts    int       `json:"restarts"`
	LastExit    string    `json:"last_exit,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// The supervisor's record (supervise.go).
	Supervision
	// Launch is what the fleet's last start was made from (config.go).
	Launch    *Launch   `json:"launch,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`

	// Shown is what readers are shown of the fleet: the stored phase
	// corrected by what is alive now and by the config in force. It is
	// never stored: Manager.State computes it (shown.go); it is zero in a
	// record read any other way.
	Shown Shown `json:"-"`
}

// readState loads a fleet's state; a missing file yields a zero State named
// name, desired stopped. The phase of a record that stores none (missing,
// or older than phases) is settled by the phase table (State.settlePhase,
// fsm.go); readState sets no phase itself. It only reads: a change of the
// record goes through Manager.Mutate (record.go).
func readState(path, name string) (*State, error) {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		// fleetmgr only ever renames a regular file into place: a link
		// (to another fleet's record, say) is not this fleet's record.
		return nil, fmt.Errorf("%s: corrupt state file (%s, not a regular file); `fleetmgr stop %s` stops the fleet's processes (found by their environment) and sets the file aside", path, fileKind(fi.Mode()), name)
	}
	b, err := atomicfile.Read(path, atomicfile.MaxSmall)
	if errors.Is(err, fs.ErrNotExist) {
		st := &State{Name: name, Desired: DesiredStopped}
		st.settlePhase()
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	st := &State{}
	err = json.Unmarshal(b, st)
	if err == nil && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		err = errors.New("not a JSON object")
	}
	if err == nil {
		err = st.known()
	}
	if err == nil && st.Name != "" && st.Name != name {
		err = fmt.Errorf("the record of fleet %q, not %q", st.Name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: corrupt state file (%v); `fleetmgr stop %s` stops the fleet's processes (found by their environment) and sets the file aside", path, err, name)
	}
	st.Name = name
	st.settlePhase()
	return st, nil
}

// known checks what a record says against the values this fleetmgr
// knows: its stored phase (none, in a record older than phases, is
// allowed), its desired state and its port. A record from a newer
// fleetmgr, or edited by hand, is thereby refused as a corrupt one is,
// not shown with words no reader of its states expects
// (docs/status-schema.json's enums).
func (st *State) known() error {
	switch st.Phase {
	case "", PhaseStopped, PhaseStarting, PhaseRunning, PhaseRestarting, PhaseStopping, PhaseFailed:
	default:
		return fmt.Errorf("phase %q is not one this fleetmgr knows (written by a newer fleetmgr, or edited)", st.Phase)
	}
	switch st.Desired {
	case "", DesiredRunning, DesiredStopped:
	default:
		return fmt.Errorf("desired state %q is not one this fleetmgr knows (written by a newer fleetmgr, or edited)", st.Desired)
	}
	if st.Port < 0 || st.Port > 65535 {
		return fmt.Errorf("port %d is not a TCP port", st.Port)
	}
	return nil
}

// writeFileAtomic writes b to path via a temp file and rename, so a crash
// never leaves a half-written file.
func writeFileAtomic(path string, b []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b, perm)
}

// writeState writes st as the record at path. Its one caller outside
// tests is Manager.writeRecord (reserve.go), which only Manager.mutate
// (record.go) calls: every change of a fleet's record goes through Mutate.
func writeState(path string, st *State) error {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// fileKind names a non-regular file's type in words.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
