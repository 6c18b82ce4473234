package serveclient

import (
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
)

// TestMergeRemote: a fleet declared on another host is replaced by its
// remote row, peers' fleets are added, all sorted by name.
func TestMergeRemote(t *testing.T) {
	local := []ListRow{{Name: "docs"}, {Name: "kb", Host: ""}}
	remote := []ListRow{{Name: "wiki@beta", Host: "beta", Remote: &peerview.Fleet{HostState: "online"}},
		{Name: "kb", Host: "beta", Remote: &peerview.Fleet{HostState: "expired"}}, {Name: "a@gamma", Host: "gamma", Remote: &peerview.Fleet{}}}
	got := MergeRemote(local, remote)
	var names []string
	for _, r := range got {
		names = append(names, r.Name+"/"+r.Host)
	}
	if strings.Join(names, " ") != "a@gamma/gamma docs/ kb/beta wiki@beta/beta" {
		t.Fatalf("merged: %v", names)
	}
}
