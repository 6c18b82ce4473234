package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorktreeRootThroughSymlink: two worktree roots reaching one
// directory (or one inside the other) through a symlink are refused
// .
func TestWorktreeRootThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	wt := filepath.Join(dir, "wt")
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "wtlink")
	if err := os.Symlink(wt, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ b, want string }{
		{link, `also fleet "a"'s`},
		{filepath.Join(link, "sub"), `inside fleet "a"'s worktree root`},
	} {
		body := "[fleets.a]\nproject = \"/a\"\ncommand = [\"f\"]\nworktree_root = \"" + wt + "\"\n" +
			"[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nworktree_root = \"" + tc.b + "\"\n"
		_, err := load(writeFile(t, dir, "fleets.toml", body), fakeEnv(map[string]string{"HOME": dir}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("worktree_root %s next to %s: %v, want %q", tc.b, wt, err, tc.want)
		}
	}
}
