package doctor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/registry"
)

// BrokerReport is the "broker" object of `fleetmgr check --json`: which
// broker answers at the management URL and what it supports.
type BrokerReport struct {
	// ManagementURL is [broker] management_url.
	ManagementURL string `json:"management_url"`
	// Product ("RabbitMQ", "LavinMQ", or another broker's product_name;
	// may be empty), Version, ManagementVersion (RabbitMQ's plugin only)
	// and Capabilities (each broker.Capability → supported) are
	// broker.Admin.Capabilities' answer.
	broker.Capabilities
	// Missing lists the capabilities fleetmgr uses that this broker lacks,
	// each with what fleetmgr does instead; empty when none.
	Missing []MissingCapability `json:"missing"`
}

// MissingCapability is a capability the broker lacks and how fleetmgr
// does without it.
type MissingCapability struct {
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
func newBrokerReport(url string, caps broker.Capabilities) *BrokerReport {
	r := &BrokerReport{ManagementURL: url, Capabilities: caps, Missing: []MissingCapability{}}
	for _, c := range caps.Missing() {
		u := capabilityUse[c]
		r.Missing = append(r.Missing, MissingCapability{Capability: c, UsedFor: u.usedFor, Instead: u.instead})
	}
	return r
}

// name is the broker and its version in words ("LavinMQ 1.0.0",
// "RabbitMQ 3.10.8"), or "an unidentified broker" when the overview named
// none.
func (r *BrokerReport) name() string {
	if r.Product == "" {
		return strings.TrimSpace("an unidentified broker " + r.Version)
	}
	return strings.TrimSpace(r.Product + " " + r.Version)
}

// brokerFindings are the broker's identity (ok) and one info finding per
// capability it lacks, saying what fleetmgr does instead.
func brokerFindings(url string, r *BrokerReport) []Finding {
	what := r.name()
	if r.ManagementVersion != "" {
		what += ", management plugin " + r.ManagementVersion
	}
	out := []Finding{{Check: "broker", Severity: SevOK, Subject: url,
		Message: fmt.Sprintf("management API answers (%s) and accepts the admin credentials", what)}}
	for _, m := range r.Missing {
		out = append(out, Finding{Check: "broker", Severity: SevInfo, Subject: url,
			Message: fmt.Sprintf("%s has no %s (%s): %s; without them, %s",
				r.name(), capabilityUse[m.Capability].words, m.Capability, m.UsedFor, m.Instead)})
	}
	return out
}

// checkBroker reaches the management API and the AMQP port with the admin
// credentials, and looks up each fleet's vhost.
func checkBroker(ctx context.Context, e *checkEnv) []Finding {
	b := e.cfg.Broker
	if b == nil {
		return []Finding{{Check: "broker", Severity: SevInfo, Subject: e.cfg.Path,
			Message: "no broker configured: fleets start without a vhost and fleetd gets an empty broker URI",
			Fix:     "add a [broker] table (see fleets.example.toml) to give each fleet its own vhost"}}
	}
	var out []Finding
	admin, err := e.m.BrokerAdmin()
	if err != nil {
		return append(out, Finding{Check: "broker", Severity: SevError, Subject: e.cfg.Path, Message: err.Error(),
			Fix: fmt.Sprintf("export %s and %s with the broker administrator's user and password", b.AdminUserEnv, b.AdminPasswordEnv)})
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	mgmtOK := false
	if caps, err := admin.Capabilities(cctx); err != nil {
		fix := "start the broker, or correct [broker] management_url; RabbitMQ needs its management plugin enabled (rabbitmq-plugins enable rabbitmq_management), LavinMQ has it built in"
		if broker.IsAuth(err) {
			fix = fmt.Sprintf("set %s / %s to an administrator of this broker", b.AdminUserEnv, b.AdminPasswordEnv)
		}
		out = append(out, Finding{Check: "broker", Severity: SevError, Subject: b.ManagementURL, Message: err.Error(), Fix: fix})
	} else {
		mgmtOK = true
		e.broker = newBrokerReport(b.ManagementURL, caps)
		out = append(out, brokerFindings(b.ManagementURL, e.broker)...)
	}
	out = append(out, checkAMQP(cctx, b))
	if !mgmtOK {
		return out
	}
	for _, n := range e.cfg.Names() {
		f := e.cfg.Fleets[n]
		ok, err := admin.VhostExists(cctx, f.Vhost)
		switch {
		case err != nil:
			out = append(out, Finding{Check: "vhost", Severity: SevError, Subject: n, Message: err.Error()})
		case ok:
			out = append(out, Finding{Check: "vhost", Severity: SevOK, Subject: n,
				Message: fmt.Sprintf("vhost %q exists", f.Vhost)})
		default:
			out = append(out, Finding{Check: "vhost", Severity: SevInfo, Subject: n,
				Message: fmt.Sprintf("vhost %q does not exist yet", f.Vhost),
				Fix:     fmt.Sprintf("`fleetmgr start %s` creates it with user %q", n, f.BrokerUser)})
		}
	}
	return out
}

// checkAMQP opens an AMQP connection to the default vhost with the admin
// credentials. A refusal of that vhost alone (530 NOT_ALLOWED) still
// proves the port answers and the login works.
func checkAMQP(ctx context.Context, b *registry.Broker) Finding {
	f := Finding{Check: "broker", Subject: b.AMQPURL}
	uri, err := broker.VhostURI(b.AMQPURL, os.Getenv(b.AdminUserEnv), os.Getenv(b.AdminPasswordEnv), "/")
	if err != nil {
		f.Severity, f.Message = SevError, err.Error()
		return f
	}
	conn, err := broker.Dial(ctx, uri)
	switch {
	case err == nil:
		conn.Close()
		f.Severity, f.Message = SevOK, "AMQP answers and accepts the admin credentials"
	case broker.IsAccessRefused(err) && strings.Contains(err.Error(), "NOT_ALLOWED"):
		f.Severity, f.Message = SevOK, "AMQP answers and accepts the admin credentials (the admin has no access to vhost \"/\", which fleetmgr does not need)"
	case broker.IsAccessRefused(err):
		f.Severity, f.Message = SevError, err.Error()
		f.Fix = fmt.Sprintf("set %s / %s to a user the broker accepts over AMQP", b.AdminUserEnv, b.AdminPasswordEnv)
	default:
		f.Severity, f.Message = SevError, err.Error()
		f.Fix = "start the broker, or correct [broker] amqp_url (amqp://host:port)"
	}
	return f
}
