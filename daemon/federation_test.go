package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// TestFederationKey: the key is created once, 0600, and the trust line is
// "HOST ed25519:KEY" as trust lines parse; without [federation] the
// answer is a usage error naming the file.
func TestFederationKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	src := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n\n[broker]\n\n[federation]\nhost = \"alpha\"\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := FederationKey(cfg)
	if err != nil || !k.Created || k.Host != "alpha" || k.TrustLine != "alpha "+k.Key || k.KeyFile != filepath.Join(dir, "state", "federation.key") {
		t.Fatalf("first: %+v %v", k, err)
	}
	if st, err := os.Stat(k.KeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if p, err := identity.ParseTrustLine(k.TrustLine); err != nil || p.Host != "alpha" {
		t.Fatalf("the line does not parse as a trust line: %v", err)
	}
	again, err := FederationKey(cfg)
	if err != nil || again.Created || again.TrustLine != k.TrustLine {
		t.Fatalf("second: %+v %v", again, err)
	}

	if err := os.WriteFile(path, []byte("[manager]\nstate_dir = \""+filepath.Join(dir, "state")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = registry.Load(path); err != nil {
		t.Fatal(err)
	}
	_, err = FederationKey(cfg)
	var ue *serveapi.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), path+" has no [federation] table") {
		t.Fatalf("without [federation]: %v", err)
	}
}
