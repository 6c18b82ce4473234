package main

import (
	"fmt"
	"strings"

	"github.com/fleetmgr/fleetmgr/broker"
)

// brokerReport is the "broker" object of `fleetmgr check --json`: which
// broker answers at the management URL and what it supports.
type brokerReport struct {
	// ManagementURL is [broker] management_url.
	ManagementURL string `json:"management_url"`
	// Product ("RabbitMQ", "LavinMQ", or another broker's product_name;
	// may be empty), Version, ManagementVersion (RabbitMQ's plugin only)
	// and Capabilities (each broker.Capability → supported) are
	// broker.Admin.Capabilities' answer.
	broker.Capabilities
	// Missing lists the capabilities fleetmgr uses that this broker lacks,
	// each with what fleetmgr does instead; empty when none.
	Missing []missingCapability `json:"missing"`
}

// missingCapability is a capability the broker lacks and how fleetmgr
// does without it.
type missingCapability struct {
	// Capability is e.g. "topic_permissions".
	Capability broker.Capability `json:"capability"`
	// UsedFor says what fleetmgr uses it for.
	UsedFor string `json:"used_for"`
	// Instead says what fleetmgr relies on without it.
	Instead string `json:"instead"`
}

// capabilityUse describes, per capability, its name in words, what fleetmgr
// uses it for and what it does on a broker without it
// (docs/ARCHITECTURE.md, "Brokers"). Every broker.AllCapabilities entry
// has one.
var capabilityUse = map[broker.Capability]struct{ words, usedFor, instead string }{
	broker.TopicPermissions: {
		words:   "topic permissions",
		usedFor: "federation uses them so the broker itself limits each host's broker user to publishing under its own routing keys",
		instead: "signatures alone carry the check: a federation message counts only when signed by the trusted key of the host its routing key names",
	},
}

// newBrokerReport builds the report of the broker at url from its
// capabilities.
func newBrokerReport(url string, caps broker.Capabilities) *brokerReport {
	r := &brokerReport{ManagementURL: url, Capabilities: caps, Missing: []missingCapability{}}
	for _, c := range caps.Missing() {
		u := capabilityUse[c]
		r.Missing = append(r.Missing, missingCapability{Capability: c, UsedFor: u.usedFor, Instead: u.instead})
	}
	return r
}

// name is the broker and its version in words ("LavinMQ 1.0.0",
// "RabbitMQ 3.10.8"), or "an unidentified broker" when the overview named
// none.
func (r *brokerReport) name() string {
	if r.Product == "" {
		return strings.TrimSpace("an unidentified broker " + r.Version)
	}
	return strings.TrimSpace(r.Product + " " + r.Version)
}

// brokerFindings are the broker's identity (ok) and one info finding per
// capability it lacks, saying what fleetmgr does instead.
func brokerFindings(url string, r *brokerReport) []finding {
	what := r.name()
	if r.ManagementVersion != "" {
		what += ", management plugin " + r.ManagementVersion
	}
	out := []finding{{Check: "broker", Severity: sevOK, Subject: url,
		Message: fmt.Sprintf("management API answers (%s) and accepts the admin credentials", what)}}
	for _, m := range r.Missing {
		out = append(out, finding{Check: "broker", Severity: sevInfo, Subject: url,
			Message: fmt.Sprintf("%s has no %s (%s): %s; without them, %s",
				r.name(), capabilityUse[m.Capability].words, m.Capability, m.UsedFor, m.Instead)})
	}
	return out
}
