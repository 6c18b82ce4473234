// Package identity holds what names a federated fleetmgr and what it
// trusts: the host id, the ed25519 key pair kept in a file, and the trust
// lines "HOST ed25519:BASE64KEY [CAPABILITIES]" an operator pastes into
// the [federation] trust list of every peer (docs/FEDERATION.md, "Trust").
//
// It depends on nothing but the standard library, so registry (which
// decodes the [federation] table) and federation (which signs and
// verifies) share one definition of each rule.
package identity

import (
	"fmt"
	"os"
	"strings"
)

// HostPattern is the rule for host ids, quoted in errors. A host id is a
// routing key part (roster.<host>, control.<host>) and a queue name part,
// so it has no dots and nothing a broker's permission regexp must escape.
const HostPattern = `^[a-z][a-z0-9-]{0,31}$`

// MaxHostLen is the longest host id (HostPattern).
const MaxHostLen = 32

// ValidHost reports whether h matches HostPattern.
func ValidHost(h string) bool {
	if len(h) < 1 || len(h) > MaxHostLen || h[0] < 'a' || h[0] > 'z' {
		return false
	}
	for i := 1; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// CheckHost returns nil when h is a valid host id, else an error saying
// what the rule is.
func CheckHost(h string) error {
	if ValidHost(h) {
		return nil
	}
	return fmt.Errorf("host id %q is invalid: it must match %s (a lower-case letter, then up to 31 lower-case letters, digits or '-')", h, HostPattern)
}

// HostFromHostname derives the default host id from a host name: the part
// before the first dot, lower-cased. It is not mangled any further: when
// that does not match HostPattern (an underscore, a leading digit, more
// than 32 characters), the error says to set [federation] host, because a
// silently altered id could equal another host's.
func HostFromHostname(hostname string) (string, error) {
	short, _, _ := strings.Cut(hostname, ".")
	h := strings.ToLower(short)
	if !ValidHost(h) {
		return "", fmt.Errorf("this machine's host name %q gives the federation host id %q, which does not match %s; set [federation] host to an id of your choice (unique among the federated hosts)", hostname, h, HostPattern)
	}
	return h, nil
}

// DefaultHost is HostFromHostname(os.Hostname()).
func DefaultHost() (string, error) {
	hn, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("cannot read this machine's host name (%v); set [federation] host", err)
	}
	return HostFromHostname(hn)
}

// BrokerUserPrefix + host is the broker user of host's manager on the
// federation vhost (its own user, so the broker can confine it to its own
// queues and presence key). A fleet's broker_user must not take such a
// name.
const BrokerUserPrefix = "federation-"

// BrokerUser returns host's federation broker user.
func BrokerUser(host string) string { return BrokerUserPrefix + host }
