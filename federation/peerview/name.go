package peerview

import (
	"strings"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// A fleet of another host is shown and addressed as NAME@HOST
// (docs/FEDERATION.md), in the CLI, the manager tools, the catalogue and
// status alike.

// SplitRemote splits "NAME@HOST" into the fleet's name and its host: ok
// when s has one "@" with a fleet name before it (^[a-z][a-z0-9_-]{0,31}$)
// and a host id after it (^[a-z][a-z0-9-]{0,31}$). A name without "@" is
// not remote (ok false, fleet = s).
func SplitRemote(s string) (fleet, host string, ok bool) {
	fleet, host, found := strings.Cut(s, "@")
	if !found {
		return s, "", false
	}
	if !wire.ValidFleetName(fleet) || !identity.ValidHost(host) {
		return s, "", false
	}
	return fleet, host, true
}

// RemoteName is the name another host's fleet is shown and addressed by:
// "NAME@HOST".
func RemoteName(fleet, host string) string { return fleet + "@" + host }
