package proxy

import (
	"context"
	"encoding/json"

	"github.com/fleetmgr/fleetmgr/federation"
)

// Remote is this manager's membership of the federation as the proxy
// uses it (docs/FEDERATION.md; *federation.Federation implements it):
// the union view of the other hosts, its change signal, and the two
// requests remote fleets' tools need.
type Remote interface {
	// Host is this manager's host id.
	Host() string
	// View is the union view: every trusted host with its state, last
	// beat and fleets (each with its catalogue hash).
	View() []federation.HostView
	// Changes signals (coalesced) that the view changed.
	Changes() <-chan struct{}
	// Call forwards one tools/call to fleet on host (federation.Call).
	Call(ctx context.Context, host, fleet, tool string, args json.RawMessage, o federation.CallOptions) (json.RawMessage, error)
	// Catalogue fetches fleet's tools array on host and its SHA-256.
	Catalogue(ctx context.Context, host, fleet string) (json.RawMessage, string, error)
}
