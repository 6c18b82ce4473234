package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadStateRefusesUnknownValues: a state.json whose phase or desired
// state this fleetmgr does not know (written by a newer one, or edited)
// is refused as a corrupt record is — shown "unknown" with the reason and
// set aside by stop — instead of being shown as it is (status --json would
// then break docs/status-schema.json's enums). Records without a phase
// (older fleetmgr) still load.
func TestReadStateRefusesUnknownValues(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	cases := []struct {
		json, wantErr string
	}{
		{`{"name":"kb","desired":"running","phase":"running"}`, ""},
		{`{"name":"kb","desired":"stopped"}`, ""},
		{`{"name":"kb"}`, ""},
		{`{"name":"kb","desired":"running","phase":"hyperspace"}`, `phase "hyperspace" is not one this fleetmgr knows`},
		{`{"name":"kb","desired":"running","phase":"unknown"}`, `phase "unknown" is not one this fleetmgr knows`},
		{`{"name":"kb","desired":"flying","phase":"running"}`, `desired state "flying" is not one this fleetmgr knows`},
		{`{"name":"kb","desired":"running","phase":"running","port":70000}`, `port 70000 is not a TCP port`},
		{`[]`, "corrupt state file"},
		{`null`, "corrupt state file"},
	}
	for _, tc := range cases {
		if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := readState(path, "kb")
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.json, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "`fleetmgr stop kb`")):
			t.Errorf("%s: %+v, %v; want an error with %q naming `fleetmgr stop kb`", tc.json, st, err, tc.wantErr)
		}
	}
}

// TestReadStateRefusesForeignRecords: a state.json that is a symbolic
// link (fleetmgr only ever renames regular files into place), or that
// names another fleet, is not taken as this fleet's record (list showed
// another fleet's pid as this one's, and stop, trusting its herdr socket,
// left this fleet's herdr server running): it is refused as a corrupt
// record is.
func TestReadStateRefusesForeignRecords(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"name":"kb","desired":"running","phase":"running"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state.json")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if st, err := readState(link, "kb"); err == nil || !strings.Contains(err.Error(), "a symbolic link") || !strings.Contains(err.Error(), "`fleetmgr stop kb`") {
		t.Errorf("symlinked record: %+v, %v", st, err)
	}
	if st, err := readState(other, "docs"); err == nil || !strings.Contains(err.Error(), `record of fleet "kb", not "docs"`) {
		t.Errorf("another fleet's record: %+v, %v", st, err)
	}
	if _, err := readState(other, "kb"); err != nil {
		t.Errorf("its own record: %v", err)
	}
}

// TestReadStateGivesOldRecordsAPhase: a record older than phases (no
// "phase") was shown with state "" in list and in status --json, outside
// docs/status-schema.json's enum. It reads as running when it records a
// fleetd (shown stopped or failed when that is dead, as any record), else
// stopped.
func TestReadStateGivesOldRecordsAPhase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for js, want := range map[string]Phase{
		`{"name":"kb"}`:                     PhaseStopped,
		`{"name":"kb","desired":"stopped"}`: PhaseStopped,
		`{"name":"kb","desired":"running","fleetd":{"pid":999999999,"start_time":1}}`: PhaseRunning,
		`{"name":"kb","phase":"failed"}`:                                              PhaseFailed,
	} {
		if err := os.WriteFile(path, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := readState(path, "kb")
		if err != nil || st.Phase != want {
			t.Errorf("%s: phase %q (%v), want %q", js, st.Phase, err, want)
			continue
		}
		// What readers are shown is one of the schema's states, too.
		if v := st.show(time.Now(), facts{inConfig: true, herdrAlive: func() bool { return false },
			supervised: func() bool { return false }, busy: func() bool { return false }, spawnedPID: func() int { return 0 },
			settings: func() map[string]string { return nil }}); v.Phase == "" {
			t.Errorf("%s: shown phase empty", js)
		}
	}
}
