package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const nobody = 65534

func TestEnsureMakesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	if err := Ensure(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("made %v (%v), want 0700", st.Mode(), err)
	}
	if err := Ensure(dir); err != nil {
		t.Fatalf("again: %v", err)
	}
	if err := Check(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func TestCheckRefusesWritableByOthers(t *testing.T) {
	base := t.TempDir()
	for _, mode := range []os.FileMode{0o770, 0o707, 0o722, os.ModeSticky | 0o777} {
		dir := filepath.Join(base, fmt.Sprintf("m%o", uint32(mode)))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		err := Ensure(dir)
		if !IsError(err) || !strings.Contains(err.Error(), "chmod 700") {
			t.Errorf("mode %v: %v", mode, err)
		}
	}
	// Readable by others but not writable: nothing can be planted.
	dir := filepath.Join(base, "r")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Check(dir); err != nil {
		t.Fatalf("0755: %v", err)
	}
	// A file is not a directory.
	f := filepath.Join(base, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(f); !IsError(err) {
		t.Fatalf("file: %v", err)
	}
}

// TestCheckRefusesForeignOwners: the squatting this package exists for. A
// directory made first by another uid (here: nobody) is refused, and so is
// one under a non-sticky directory another uid owns or may write; a sticky
// world-writable parent such as /tmp is fine.
func TestCheckRefusesForeignOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories another uid owns")
	}
	base := t.TempDir()
	squat := filepath.Join(base, "squat")
	if err := os.Mkdir(squat, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(squat, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(squat); !IsError(err) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("squatted dir: %v", err)
	}
	// A link of ours to it is judged by where it leads.
	link := filepath.Join(base, "link")
	if err := os.Symlink(squat, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(link); !IsError(err) || !strings.Contains(err.Error(), squat) {
		t.Fatalf("link to a squatted dir: %v", err)
	}
	// Ours, but inside a directory nobody owns: nobody can swap it.
	inner := filepath.Join(squat, "state")
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Check(inner); !IsError(err) || !strings.Contains(err.Error(), "could rename") {
		t.Fatalf("dir under another uid's: %v", err)
	}
	// Ours, under a root-owned world-writable directory without the sticky bit.
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	st := filepath.Join(open, "state")
	if err := Ensure(st); !IsError(err) || !strings.Contains(err.Error(), "without the sticky bit") {
		t.Fatalf("dir under a non-sticky 0777 one: %v", err)
	}
	// With the sticky bit (as /tmp): others cannot rename what is ours.
	if err := os.Chmod(open, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := Check(st); err != nil {
		t.Fatalf("dir under a sticky 1777 one: %v", err)
	}
}

// TestFileProblem: the one private-file rule refuses group or other bits, another owner
// (when this test may chown) and a non-regular file, and accepts 0600 and 0400.
func TestFileProblem(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	stat := func() os.FileInfo {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{{0o600, ""}, {0o400, ""}, {0o640, "mode 0640 lets group or others read or change it; run chmod 600 " + p}, {0o602, "mode 0602"}} {
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		got := FileProblem(p, stat())
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("mode %04o: %q, want %q", c.mode, got, c.want)
		}
	}
	d, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := FileProblem(dir, d); got != "not a regular file" {
		t.Errorf("a directory: %q", got)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if got := FileProblem(p, stat()); !strings.Contains(got, "owned by uid 65534, not by uid 0") {
			t.Errorf("another owner: %q", got)
		}
	}
}
