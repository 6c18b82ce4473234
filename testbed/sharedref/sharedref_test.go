package sharedref

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	pkg := filepath.Join(repo, "a", "b")
	ref := filepath.Join(root, "shared", "ref")
	for _, d := range []string{pkg, ref} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvDir, "")
	if _, err := Path(pkg, HerdrSchema); err == nil || !strings.Contains(err.Error(), "bare clone") {
		t.Fatalf("missing schema: %v", err)
	}
	want := filepath.Join(ref, "herdr-api.schema.json")
	if err := os.WriteFile(want, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Path(pkg, HerdrSchema); err != nil || got != want {
		t.Fatalf("Path = %q, %v; want %q", got, err, want)
	}
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(want, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Path(pkg, HerdrSchema); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory in its place: %v", err)
	}
	other := t.TempDir()
	t.Setenv(EnvDir, other)
	if _, err := Path(pkg, HerdrSchema); err == nil || !strings.Contains(err.Error(), other) {
		t.Fatalf("%s set: %v", EnvDir, err)
	}
}
