package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckNamesTooLongHerdrSocket: `fleetmgr check` reports a fleet whose
// herdr socket (under this environment's XDG_CONFIG_HOME) would be longer
// than a unix socket path may be, naming fleets.toml's line, and fails.
func TestCheckNamesTooLongHerdrSocket(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", "/"+strings.Repeat("x", 80))
	body := fmt.Sprintf("[manager]\nstate_dir = %q\n\n[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nherdr_session = \"kb-session\"\n", filepath.Join(dir, "s"), dir)
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(path, "check")
	if err == nil {
		t.Fatalf("check passed:\n%s", out)
	}
	if !strings.Contains(out, path+":7") || !strings.Contains(out, "herdr-client.sock") || !strings.Contains(out, "at most 107 bytes") {
		t.Fatalf("check does not name %s:7 and the socket:\n%s", path, out)
	}
}
