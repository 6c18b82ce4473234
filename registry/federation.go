package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// Defaults of the [federation] keys (docs/FEDERATION.md).
const (
	DefaultFederationVhost = "fleetmgr"       // [federation] vhost
	DefaultHeartbeat       = 2 * time.Second  // [federation] heartbeat
	DefaultControlTimeout  = 15 * time.Second // [federation] control_timeout
	// DefaultKeyFile is the key file's name in the state directory.
	DefaultKeyFile = "federation.key" // [federation] key_file
	// MinHeartbeat and MaxHeartbeat bound [federation] heartbeat (the
	// range a presence message may announce).
	MinHeartbeat = 100 * time.Millisecond
	MaxHeartbeat = time.Minute
	// MaxControlTimeout bounds [federation] control_timeout (the longest
	// life a signed message may have).
	MaxControlTimeout = time.Hour
)

// Federation is the [federation] table: this manager's identity among the
// managers sharing a broker, and whom it trusts (docs/FEDERATION.md).
// Config.Federation is nil when the file has none: nothing federates.
type Federation struct {
	// Host is this manager's host id (identity.HostPattern). Default: the
	// short host name, lower-cased, when it fits the pattern (else Load
	// asks for host to be set).
	Host string
	// HostFromHostname is true when Host is the default.
	HostFromHostname bool
	// Vhost is the shared federation vhost. Default
	// DefaultFederationVhost; never a fleet's vhost.
	Vhost string
	// Heartbeat is the presence interval (MinHeartbeat to MaxHeartbeat).
	// Default DefaultHeartbeat.
	Heartbeat Duration
	// ControlTimeout bounds a control request sent from here (its expiry
	// and the wait for the reply). Default DefaultControlTimeout.
	ControlTimeout Duration
	// Trust are the trust lines as written ("HOST ed25519:KEY [CAPS]"),
	// each already parsed without error; Peers is the parsed list.
	Trust []string
	// Peers is Trust parsed, in the same order.
	Peers *identity.Trust
	// KeyFile is the absolute path of the ed25519 key. Default
	// <state_dir>/DefaultKeyFile.
	KeyFile string
	// Line is the line of the [federation] header.
	Line int
}

// federationTable decodes [federation] (v, at path) into c.Federation.
func (ld *loader) federationTable(c *Config, path []string, v any) {
	t, ok := ld.table(path, v)
	if !ok {
		return
	}
	f := &Federation{Vhost: DefaultFederationVhost, Line: ld.loc.line(path), Trust: []string{}}
	f.Heartbeat.Duration, f.ControlTimeout.Duration = DefaultHeartbeat, DefaultControlTimeout
	// The trust lines are parsed whether given or not (an empty list).
	parseTrust := func(p []string) {
		peers, err := identity.ParseTrust(f.Trust)
		if err != nil {
			var tle *identity.TrustLineError
			for _, e := range unwrapAll(err) {
				if errors.As(e, &tle) {
					ld.fail(appendPath(p, indexPart(tle.Index)), "%q: %s", tle.Entry, tle.Msg)
				}
			}
		}
		f.Peers = peers
	}
	ld.decodeTable(path, t, []field{
		{key: "host", set: func(p []string, v any) {
			if s, ok := ld.str(p, v); ok {
				f.Host = s
				if err := identity.CheckHost(s); err != nil {
					ld.fail(p, "%v", err)
				}
			}
		}, unset: func(p []string) {
			hostname := ld.env.hostname
			if hostname == nil {
				hostname = os.Hostname
			}
			hn, err := hostname()
			if err == nil {
				f.Host, err = identity.HostFromHostname(hn)
			}
			if err != nil {
				ld.fail(p, "no default: %v", err)
			}
			f.HostFromHostname = true
		}},
		{key: "vhost", set: func(p []string, v any) {
			if s, ok := ld.str(p, v); ok {
				f.Vhost = s
				if err := checkVhost(s); err != nil {
					ld.fail(p, "%v", err)
				}
			}
		}},
		{key: "heartbeat", set: func(p []string, v any) {
			if d, ok := ld.duration(p, v); ok {
				if d.Duration < MinHeartbeat || d.Duration > MaxHeartbeat {
					ld.fail(p, "%s is out of range: want %s to %s", d.Duration, MinHeartbeat, MaxHeartbeat)
				} else {
					f.Heartbeat = d
				}
			}
		}},
		{key: "control_timeout", set: func(p []string, v any) {
			if d, ok := ld.duration(p, v); ok {
				if d.Duration > MaxControlTimeout {
					ld.fail(p, "%s is out of range: at most %s", d.Duration, MaxControlTimeout)
				} else {
					f.ControlTimeout = d
				}
			}
		}},
		{key: "trust", set: func(p []string, v any) {
			if lines, ok := ld.strs(p, v); ok {
				f.Trust = lines
			}
			parseTrust(p)
		}, unset: parseTrust},
		{key: "key_file", set: ld.setPath(&f.KeyFile), unset: func([]string) {
			if c.Manager.StateDir != "" {
				f.KeyFile = filepath.Join(c.Manager.StateDir, DefaultKeyFile)
			}
		}},
	})
	c.Federation = f
}

// unwrapAll returns the errors joined in err, or err alone.
func unwrapAll(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	return []error{err}
}

// validateFederation checks [federation] against the rest of the file: it
// needs [broker]; its vhost is no fleet's; its broker user is no fleet's;
// its host is not a trusted peer's (a host does not list itself).
func (ld *loader) validateFederation(c *Config) {
	f := c.Federation
	if f == nil {
		return
	}
	if c.Broker == nil {
		ld.fail([]string{"federation"}, "needs a [broker] table: the federation's presence and control travel over the broker")
	}
	for _, n := range c.Names() {
		fl := c.Fleets[n]
		if fl.Vhost == f.Vhost {
			ld.fail([]string{"federation", "vhost"}, "vhost %q is also fleet %q's (%s); the federation needs a vhost no fleet uses",
				f.Vhost, n, ld.whereKey(n, "vhost"))
		}
		if f.Host != "" && fl.BrokerUser == identity.BrokerUser(f.Host) {
			ld.fail([]string{"fleets", n, "broker_user"}, "broker user %q is the federation's user for host %q; give the fleet another broker_user",
				fl.BrokerUser, f.Host)
		}
	}
	if f.Peers != nil && f.Host != "" && len(f.Peers.Peers(f.Host)) > 0 {
		ld.fail([]string{"federation", "trust"}, "lists this host (%q) itself; a manager always trusts its own key, and another key under its name would let that key speak as this host", f.Host)
	}
}

// String describes the federation for messages.
func (f *Federation) String() string {
	return fmt.Sprintf("host %s, vhost %s, %d trusted peers", f.Host, f.Vhost, len(f.Peers.Hosts()))
}
