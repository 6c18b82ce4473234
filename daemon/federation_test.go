package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/registry"
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
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), path+" has no [federation] table") {
		t.Fatalf("without [federation]: %v", err)
	}
}

// TestMergeRemote: a fleet declared on another host is replaced by its
// remote row, peers' fleets are added, all sorted by name.
func TestMergeRemote(t *testing.T) {
	local := []ListRow{{Name: "docs"}, {Name: "kb", Host: ""}}
	remote := []ListRow{{Name: "wiki@beta", Host: "beta", Remote: &RemoteListInfo{HostState: "online"}},
		{Name: "kb", Host: "beta", Remote: &RemoteListInfo{HostState: "expired"}}, {Name: "a@gamma", Host: "gamma", Remote: &RemoteListInfo{}}}
	got := MergeRemote(local, remote)
	var names []string
	for _, r := range got {
		names = append(names, r.Name+"/"+r.Host)
	}
	if strings.Join(names, " ") != "a@gamma/gamma docs/ kb/beta wiki@beta/beta" {
		t.Fatalf("merged: %v", names)
	}
}
