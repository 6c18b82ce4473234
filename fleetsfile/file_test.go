package fleetsfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/fleetmgr/fleetmgr/registry"
)

// env gives Load a HOME under dir and project directories that exist.
func env(t *testing.T) (dir string, proj func(string) string) {
	t.Helper()
	dir = t.TempDir()
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv("XDG_STATE_HOME", "")
	return dir, func(name string) string {
		p := filepath.Join(dir, "proj-"+name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestCreateNeverOverwrites(t *testing.T) {
	dir, _ := env(t)
	p := filepath.Join(dir, "cfg", "sub", "fleets.toml")
	cfg, err := Create(p, Template(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != p || len(cfg.Fleets) != 0 {
		t.Fatalf("Create returned %+v", cfg)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("created file: %v %v", st, err)
	}
	if st, _ := os.Stat(filepath.Dir(p)); st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", st.Mode().Perm())
	}
	if err := os.WriteFile(p, []byte("# mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Create(p, Template(), nil)
	if err == nil || !strings.Contains(err.Error(), p+" exists already") || !strings.Contains(err.Error(), "fleetmgr add") {
		t.Fatalf("second Create: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "# mine\n" {
		t.Fatalf("the existing file was changed: %q", b)
	}
	// A dangling symbolic link counts as existing too.
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(link, Template(), nil); err == nil {
		t.Fatal("Create through a dangling symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "nowhere")); err == nil {
		t.Fatal("Create wrote through a dangling symlink")
	}
	assertNoTemp(t, filepath.Dir(p))
}

// TestCreateValidates: data that does not load is not written; the
// problems name the file that would have been written, with its line.
func TestCreateValidates(t *testing.T) {
	dir, _ := env(t)
	p := filepath.Join(dir, "fleets.toml")
	_, err := Create(p, []byte("[manager]\nlisten = 5\n"), nil)
	var re *registry.Error
	if !errors.As(err, &re) || re.File != p || re.Line != 2 {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(p); err == nil {
		t.Fatal("an invalid file was written")
	}
	assertNoTemp(t, dir)
}

func TestEditAddRemove(t *testing.T) {
	dir, proj := env(t)
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, Template(), 0o640); err != nil {
		t.Fatal(err)
	}
	cfg, err := Edit(p, func(src []byte) ([]byte, error) { return Append(src, Fleet{Name: "kb", Project: proj("kb")}) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Fleets["kb"] == nil || cfg.Path != p {
		t.Fatalf("Edit returned %+v", cfg)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v after Edit, want 0640 kept", st.Mode().Perm())
	}
	b, _ := os.ReadFile(p)
	if !bytes.HasPrefix(b, Template()) {
		t.Fatal("Edit did not keep the file's bytes")
	}
	if _, err := Edit(p, func(src []byte) ([]byte, error) { return Remove(src, "kb") }, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, Template()) {
		t.Fatal("add then remove did not give the template back")
	}
	assertNoTemp(t, dir)
}

// TestEditLeavesInvalidUntouched: an edit whose result does not load is
// refused with the file's name and the problem's line; the file keeps its
// bytes, inode and mode.
func TestEditLeavesInvalidUntouched(t *testing.T) {
	dir, proj := env(t)
	p := filepath.Join(dir, "fleets.toml")
	src := append(Template(), fmt.Sprintf("\n[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nport = 8770\n", proj("kb"))...)
	if err := os.WriteFile(p, src, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p)
	// The same port as kb: Load refuses it, naming the lines of both.
	_, err := Edit(p, func(src []byte) ([]byte, error) {
		return Append(src, Fleet{Name: "docs", Project: proj("docs"), Port: 8770})
	}, nil)
	docsPort := bytes.Count(src, []byte("\n")) + 5 // a blank line, [fleets.docs], project, command, port
	if err == nil || !regexp.MustCompile(regexp.QuoteMeta(p)+`:\d+: fleets\.kb\.port: .*`+regexp.QuoteMeta(fmt.Sprintf("%s:%d", p, docsPort))).MatchString(err.Error()) ||
		!strings.Contains(err.Error(), p+" is unchanged") {
		t.Fatalf("err = %v (want %s:%d named and 'is unchanged')", err, p, docsPort)
	}
	if strings.Contains(err.Error(), ".fleetmgr-") {
		t.Errorf("the error names the temporary file: %v", err)
	}
	after, _ := os.Stat(p)
	if b, _ := os.ReadFile(p); !bytes.Equal(b, src) || !os.SameFile(before, after) {
		t.Fatal("the file was changed")
	}
	// A check refusing the loaded result leaves it too.
	_, err = Edit(p, func(src []byte) ([]byte, error) { return Append(src, Fleet{Name: "docs", Project: proj("docs")}) },
		func(c *registry.Config) error {
			if c.Path != p || c.Fleets["docs"] == nil {
				t.Errorf("check got %s with %v", c.Path, c.Names())
			}
			return errors.New("not what was asked")
		})
	if err == nil || err.Error() != "not what was asked; "+p+" is unchanged" {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, src) {
		t.Fatal("the file was changed")
	}
	// An error from the edit itself leaves it too, naming the file.
	_, err = Edit(p, func(src []byte) ([]byte, error) { return Remove(src, "nope") }, nil)
	if err == nil || !strings.HasPrefix(err.Error(), p+": no fleet nope") {
		t.Fatalf("err = %v", err)
	}
	assertNoTemp(t, dir)
}

// TestEditFollowsSymlink: the link's target is edited; the link stays.
func TestEditFollowsSymlink(t *testing.T) {
	dir, proj := env(t)
	target := filepath.Join(dir, "dotfiles", "fleets.toml")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, Template(), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "fleets.toml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Edit(link, func(src []byte) ([]byte, error) { return Append(src, Fleet{Name: "kb", Project: proj("kb")}) }, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symbolic link was replaced")
	}
	if b, _ := os.ReadFile(target); !bytes.Contains(b, []byte("[fleets.kb]")) {
		t.Fatal("the target was not edited")
	}
}

// TestEditConcurrent: fleetmgr processes editing at once take turns;
// every fleet ends up in the file.
func TestEditConcurrent(t *testing.T) {
	dir, proj := env(t)
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, Template(), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 8
	projs := make([]string, n)
	for i := range n {
		projs[i] = proj(fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = Edit(p, func(src []byte) ([]byte, error) {
				return Append(src, Fleet{Name: fmt.Sprintf("f%d", i), Project: projs[i]})
			}, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("edit %d: %v", i, err)
		}
	}
	b, _ := os.ReadFile(p)
	names, err := Names(b)
	if err != nil || len(names) != n {
		t.Fatalf("after %d concurrent adds: %v %v", n, names, err)
	}
}

// TestEditNoticesForeignWrite: a change by another program between the
// read and the replace makes Edit fail and keeps that change.
func TestEditNoticesForeignWrite(t *testing.T) {
	dir, proj := env(t)
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, Template(), 0o600); err != nil {
		t.Fatal(err)
	}
	theirs := append(Template(), "# an editor saved this\n"...)
	_, err := Edit(p, func(src []byte) ([]byte, error) {
		if err := os.WriteFile(p, theirs, 0o600); err != nil {
			return nil, err
		}
		return Append(src, Fleet{Name: "kb", Project: proj("kb")})
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "changed while fleetmgr was editing it") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, theirs) {
		t.Fatal("the other program's change was lost")
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".fleetmgr-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}
