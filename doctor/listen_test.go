package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/registry"
)

// TestCheckListen: a [manager] listen beyond loopback, which serve refuses
// unless started with --allow-remote and --token-file, is a warning
// saying so (check used to say "no errors" of a file serve then refused
// to serve); loopback addresses are fine.
func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		listen string
		sev    string
		want   string
	}{
		{"127.0.0.1:18760", SevOK, "loopback"},
		{"[::1]:18760", SevOK, "loopback"},
		{"localhost:18760", SevOK, "loopback"},
		{"0.0.0.0:18760", SevWarn, "--allow-remote and --token-file"},
		{"192.0.2.7:18760", SevWarn, "--allow-remote and --token-file"},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "fleets.toml")
		src := fmt.Sprintf("[manager]\nstate_dir = %q\nlisten = %q\n", filepath.Join(dir, "state"), tc.listen)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := registry.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		out := checkListen(context.Background(), &checkEnv{cfg: cfg})
		if len(out) != 1 || out[0].Check != "listen" || out[0].Severity != tc.sev || !strings.Contains(out[0].Message, tc.want) || !strings.Contains(out[0].Message, tc.listen) {
			t.Errorf("listen %q: %+v; want one %s finding with %q", tc.listen, out, tc.sev, tc.want)
		}
	}
}
