package cmdutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/iostreams"
)

// TestCompleteFleets: names by prefix, not those given already, nothing
// after a one-name verb's name, never files; a file that does not load
// still completes the names it defines, and without [federation] a
// remote verb offers no NAME@HOST.
func TestCompleteFleets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte("[fleets.kb]\nport = \"not a port\"\n[fleets.kbase]\n[fleets.docs]\n[fleets.\"k\\tx\"]\n[fleets.\"k\\ny\"]\n[fleets.KB2]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ios, _, _ := iostreams.Test()
	f := &Factory{IO: ios, ConfigPath: path}
	for _, tc := range []struct {
		one, remote bool
		args        []string
		typed       string
		want        []string
	}{
		{false, false, nil, "", []string{"docs", "kb", "kbase"}},
		{false, true, nil, "k", []string{"kb", "kbase"}},
		{false, false, []string{"kb"}, "", []string{"docs", "kbase"}},
		{true, false, nil, "d", []string{"docs"}},
		{true, true, []string{"kb"}, "", nil},
		{false, false, nil, "x", nil},
	} {
		got, dir := f.CompleteFleets(tc.one, tc.remote)(&cobra.Command{}, tc.args, tc.typed)
		if !slices.Equal(got, tc.want) || dir != cobra.ShellCompDirectiveNoFileComp {
			t.Errorf("one %v remote %v args %q typed %q: %v (directive %d), want %v", tc.one, tc.remote, tc.args, tc.typed, got, dir, tc.want)
		}
	}
	if got := (&Factory{IO: ios, ConfigPath: filepath.Join(dir, "none.toml")}).FleetNames(); len(got) != 0 {
		t.Errorf("a missing file: %v", got)
	}
}

// TestCompletableRemote: NAME@HOST is offered only with a valid NAME and a
// HOST without spaces or control characters (a peer's announcement is not
// trusted to keep cobra's tab- and newline-separated protocol intact).
func TestCompletableRemote(t *testing.T) {
	for n, want := range map[string]bool{
		"kb@beta": true, "kb@host.example": true, "kb@": false, "KB@beta": false,
		"kb@be\tta": false, "kb@be\nta": false, "kb@be ta": false, "kb@be\u0085ta": false, "@beta": false,
	} {
		if got := completable(n); got != want {
			t.Errorf("completable(%q) = %v, want %v", n, got, want)
		}
	}
}
