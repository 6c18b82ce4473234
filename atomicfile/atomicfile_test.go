package atomicfile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteModeAndContents: the mode is the one asked for whatever the
// umask and the replaced file's mode; contents replaced whole; no temporary
// file left in the directory.
func TestWriteModeAndContents(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 4096), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, perm := range []os.FileMode{0o600, 0o644} {
		if err := Write(path, []byte("new\n"), perm); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != perm {
			t.Fatalf("mode %v, want %v", st.Mode().Perm(), perm)
		}
		if b, _ := os.ReadFile(path); string(b) != "new\n" {
			t.Fatalf("contents %q", b)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(ents))
	}
}

// TestWriteFailureLeavesFile: a write that cannot happen (the directory is
// read-only) returns an error and leaves the old file as it was.
func TestWriteFailureLeavesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("y"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	if os.Geteuid() != 0 { // root writes through a read-only mode
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if err := Write(path, []byte("new"), 0o600); err == nil {
			t.Fatal("write into a read-only directory succeeded")
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("contents %q after failed writes", b)
	}
}

// TestWriteReplacesALinkNotItsTarget: a symbolic link planted at the
// target's name (docs/SECURITY.md "Files") is replaced by the new file;
// the file it points to is never written through.
func TestWriteReplacesALinkNotItsTarget(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "bashrc")
	if err := os.WriteFile(victim, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.json")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "mine\n" {
		t.Fatalf("written through the link: %q", b)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("target: %v %v", st.Mode(), err)
	}
}

// TestCreateNeverReplaces: the first Create makes the file whole with the
// mode asked for; a second finds it there, reports created false and
// leaves it as the first wrote it; no temporary name is left behind.
func TestCreateNeverReplaces(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "federation.key")
	created, err := Create(path, []byte("first"), 0o600)
	if err != nil || !created {
		t.Fatalf("first Create: created %v, %v", created, err)
	}
	created, err = Create(path, []byte("second"), 0o644)
	if err != nil || created {
		t.Fatalf("second Create: created %v, %v; want false, nil", created, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" || st.Mode().Perm() != 0o600 {
		t.Fatalf("after two Creates: %q mode %v; want the first's", b, st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(ents))
	}
}

// TestStage: a staged file can be read by its name before it is in place, leaves nothing
// behind when cleaned up unused, and is put in place by Replace (over a file) or Link (only
// where nothing is).
func TestStage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	s, err := Stage(path, []byte("one"), 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(s.Name()); err != nil || string(b) != "one" {
		t.Fatalf("staged file reads %q, %v", b, err)
	}
	if filepath.Dir(s.Name()) != dir {
		t.Fatalf("staged in %s, not beside %s", s.Name(), path)
	}
	s.Cleanup()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("Cleanup left %v", ents)
	}
	s, err = Stage(path, []byte("two"), 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.Link(); !created || err != nil {
		t.Fatalf("Link onto nothing: %v, %v", created, err)
	}
	s.Cleanup()
	s, err = Stage(path, []byte("three"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.Link(); created || err != nil {
		t.Fatalf("Link onto a file: %v, %v; want false, nil", created, err)
	}
	if err := s.Replace(); err != nil {
		t.Fatal(err)
	}
	s.Cleanup()
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	if err != nil || string(b) != "three" || st.Mode().Perm() != 0o600 {
		t.Fatalf("after Replace: %q %v %v", b, err, st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}
