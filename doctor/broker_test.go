package doctor

import (
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/broker"
)

// TestEveryCapabilityDescribed: check can say what fleetmgr uses each
// probed capability for and what it does without it.
func TestEveryCapabilityDescribed(t *testing.T) {
	for _, c := range broker.AllCapabilities {
		u, ok := capabilityUse[c]
		if !ok || u.words == "" || u.usedFor == "" || u.instead == "" {
			t.Errorf("capability %q: no description for check (%+v)", c, u)
		}
	}
}

func TestBrokerFindings(t *testing.T) {
	lav := newBrokerReport("http://mq:15672", broker.Capabilities{Product: broker.LavinMQ, Version: "1.0.0",
		Supported: map[broker.Capability]bool{broker.TopicPermissions: false}})
	f := brokerFindings("http://mq:15672", lav)
	if len(f) != 2 || f[0].Severity != SevOK || !strings.Contains(f[0].Message, "(LavinMQ 1.0.0)") ||
		f[1].Severity != SevInfo || !strings.Contains(f[1].Message, "LavinMQ 1.0.0 has no topic permissions") ||
		!strings.Contains(f[1].Message, "signatures alone carry the check") {
		t.Errorf("LavinMQ findings: %+v", f)
	}
	if len(lav.Missing) != 1 || lav.Missing[0].Capability != broker.TopicPermissions || lav.Missing[0].Instead == "" {
		t.Errorf("LavinMQ missing: %+v", lav.Missing)
	}
	rabbit := newBrokerReport("http://mq:15672", broker.Capabilities{Product: broker.RabbitMQ, Version: "3.10.8", ManagementVersion: "3.10.8",
		Supported: map[broker.Capability]bool{broker.TopicPermissions: true}})
	f = brokerFindings("http://mq:15672", rabbit)
	if len(f) != 1 || !strings.Contains(f[0].Message, "(RabbitMQ 3.10.8, management plugin 3.10.8)") || len(rabbit.Missing) != 0 || rabbit.Missing == nil {
		t.Errorf("RabbitMQ findings: %+v, missing %#v", f, rabbit.Missing)
	}
	if n := newBrokerReport("u", broker.Capabilities{Supported: map[broker.Capability]bool{}}).name(); n != "an unidentified broker" {
		t.Errorf("name of an unknown broker: %q", n)
	}
}
