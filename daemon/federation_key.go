package daemon

import (
	"fmt"

	"github.com/fleetmgr/fleetmgr/federation/membership"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// Serve's membership of the federation is federation/membership's; the
// proxy reaches other hosts through it.
var _ proxy.Remote = (*membership.Membership)(nil)

// FederationKey returns this host's trust line, creating the key file
// (0600) when there is none yet (membership.Key). Without [federation] it
// is a *UsageError saying what to add.
func FederationKey(cfg *registry.Config) (*membership.KeyInfo, error) {
	if cfg.Federation == nil {
		return nil, &serveapi.UsageError{Err: fmt.Errorf("%s has no [federation] table: add one (fleets.example.toml shows it; it needs [broker]), then run this again", cfg.Path)}
	}
	return membership.Key(cfg.Federation, cfg.Path)
}
