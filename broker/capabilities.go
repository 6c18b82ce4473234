package broker

import (
	"context"
	"net/http"
)

// Capability names one broker feature beyond the shared management API
// (vhosts, users, permissions, queues) that fleetmgr uses or will use, as
// `fleetmgr check --json` reports it.
type Capability string

// The capabilities Capabilities probes.
const (
	// TopicPermissions: per user and vhost, regular expressions limiting
	// the routing keys the user may publish with to (write) or bind from
	// (read) a topic exchange; RabbitMQ's /api/topic-permissions (since
	// RabbitMQ 3.7). LavinMQ has none: the endpoint answers 404 in 1.0.0
	// and in its current source. Federation uses them to let each host's
	// broker user publish only under its own routing keys.
	TopicPermissions Capability = "topic_permissions"
)

// AllCapabilities lists every Capability, in the order reports show them.
var AllCapabilities = []Capability{TopicPermissions}

// Capabilities is which broker answers and what it supports.
type Capabilities struct {
	// Product is RabbitMQ, LavinMQ or, for another broker, its
	// product_name (possibly empty); see Overview.Product.
	Product string `json:"product"`
	// Version is the broker's version (rabbitmq_version, lavinmq_version
	// or product_version); may be empty.
	Version string `json:"version"`
	// ManagementVersion is RabbitMQ's management plugin version; empty on
	// LavinMQ.
	ManagementVersion string `json:"management_version,omitempty"`
	// Supported maps each of AllCapabilities to whether the broker has it.
	Supported map[Capability]bool `json:"capabilities"`
}

// Has reports whether the broker has capability c (false for a c the
// probe does not know).
func (c Capabilities) Has(k Capability) bool { return c.Supported[k] }

// Missing returns the capabilities of AllCapabilities the broker lacks, in
// that order; nil when it has them all.
func (c Capabilities) Missing() []Capability {
	var out []Capability
	for _, k := range AllCapabilities {
		if !c.Supported[k] {
			out = append(out, k)
		}
	}
	return out
}

// Capabilities asks the broker which it is (GET /api/overview, see
// Overview.Product) and probes what it supports. Capabilities are probed,
// not inferred from the product name, so a broker that gains one is used
// as such:
//   - TopicPermissions: GET /api/topic-permissions answers 200 with the
//     list (RabbitMQ ≥ 3.7; the admin user needs the "administrator"
//     tag) or 404 when the broker has no such endpoint (LavinMQ, whose 404
//     is text/plain "404 Not Found", and RabbitMQ before 3.7).
//
// Any other answer is an error (*HTTPError, *UnreachableError), as from
// every Admin call.
//
// The overview and the probe are sent at once, so a slow broker costs one
// round trip, not two.
func (a *Admin) Capabilities(ctx context.Context) (Capabilities, error) {
	var (
		ov    Overview
		ovErr error
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		ov, ovErr = a.Overview(ctx)
	}()
	st, _, err := a.do(ctx, http.MethodGet, a.endpoint("api", "topic-permissions"), nil, http.StatusOK, http.StatusNotFound)
	<-done
	if ovErr != nil {
		return Capabilities{}, ovErr
	}
	if err != nil {
		return Capabilities{}, err
	}
	c := Capabilities{ManagementVersion: ov.ManagementVersion, Supported: map[Capability]bool{}}
	c.Product, c.Version = ov.Product()
	c.Supported[TopicPermissions] = st == http.StatusOK
	return c, nil
}
