package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStateWatch: a state.json renamed into place in a fleet directory
// signals, in a directory that existed at start and in one made later; a
// log written beside it does not; Poke does; signals coalesce in one.
func TestStateWatch(t *testing.T) {
	state := t.TempDir()
	kb := filepath.Join(state, "fleets", "kb")
	if err := os.MkdirAll(kb, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := newStateWatch(state, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, c2 := w.Subscribe(), w.Subscribe()
	go w.Run(t.Context())
	got := func(want bool, what string) {
		t.Helper()
		wait := 100 * time.Millisecond
		if want {
			wait = 5 * time.Second
		}
		select {
		case <-c:
			if !want {
				t.Errorf("%s: a signal", what)
			}
			select { // every subscriber gets it
			case <-c2:
			case <-time.After(5 * time.Second):
				t.Errorf("%s: the second subscriber got no signal", what)
			}
		case <-time.After(wait):
			if want {
				t.Errorf("%s: no signal", what)
			}
		}
	}
	writeState := func(dir string) {
		t.Helper()
		tmp := filepath.Join(dir, ".state.json.tmp")
		if err := os.WriteFile(tmp, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
			t.Fatal(err)
		}
	}
	writeState(kb)
	got(true, "state.json in kb")
	got(false, "after the one signal")
	if err := os.WriteFile(filepath.Join(kb, "fleetd.log"), []byte("line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got(false, "a log written")
	docs := filepath.Join(state, "fleets", "docs")
	if err := os.Mkdir(docs, 0o700); err != nil {
		t.Fatal(err)
	}
	got(true, "a fleet directory made")
	writeState(docs)
	got(true, "state.json in a fleet directory made later")
	w.Poke()
	w.Poke()
	got(true, "Poke")
	got(false, "a second Poke while one was pending")
}
