package doctor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/privdir"
)

// FederationReport is the "federation" object of `fleetmgr check --json`
// (docs/FEDERATION.md): this host's identity, whom it trusts, and which
// protections the broker puts in force. Absent without [federation].
type FederationReport struct {
	// Host is this manager's host id; HostFromHostname is true when it is
	// the default (the short host name).
	Host             string `json:"host"`
	HostFromHostname bool   `json:"host_from_hostname,omitempty"`
	// Vhost is the federation vhost.
	Vhost string `json:"vhost"`
	// KeyFile is the private key's file; Key and TrustLine its public
	// half and this host's trust line, empty while the file does not
	// exist (serve or `fleetmgr federation key` creates it).
	KeyFile   string `json:"key_file"`
	Key       string `json:"key,omitempty"`
	TrustLine string `json:"trust_line,omitempty"`
	// Trust lists the trusted peers, one "HOST ed25519:KEY [CAPS]" each.
	Trust []string `json:"trust"`
	// Provisioned is true when this host's control queue exists on the
	// federation vhost (serve provisions it at start).
	Provisioned bool `json:"provisioned"`
	// KeyConflict is the key ("ed25519:BASE64") the broker has this host
	// id registered with, when it is not this host's key: provisioning
	// is then refused (docs/FEDERATION.md "Identity"). Empty otherwise.
	KeyConflict string `json:"key_conflict,omitempty"`
	// Protections is what the broker enforces besides signatures
	// (federation.Protections); absent when the management API did not
	// answer.
	Protections *Protections `json:"protections,omitempty"`
}

// Protections are federation.Protections as `check --json` shows them.
type Protections struct {
	// Signatures: every message signed and verified (always).
	Signatures bool `json:"signatures"`
	// Permissions: the host's broker user reads only its own queues
	// (once provisioned).
	Permissions bool `json:"permissions"`
	// TopicPermissions: the broker refuses presence sent as another host
	// (RabbitMQ); false on a broker without them (LavinMQ 1.0), where
	// signatures alone carry that check.
	TopicPermissions bool `json:"topic_permissions"`
	// Words says it in a sentence (federation.Protections.String).
	Words string `json:"words"`
}

// checkFederation reports [federation]: the host id, the key file (its
// trust line, or that it will be created; a key file others can read is
// an error), the broker password file's mode, the trust list, whether
// this host is provisioned on the federation vhost, and the protections
// in force: topic permissions on a broker that has them (RabbitMQ), or
// signatures alone (LavinMQ). Nothing is created or changed.
func checkFederation(ctx context.Context, e *checkEnv) []Finding {
	fc := e.cfg.Federation
	if fc == nil {
		return nil
	}
	rep := &FederationReport{Host: fc.Host, HostFromHostname: fc.HostFromHostname, Vhost: fc.Vhost, KeyFile: fc.KeyFile, Trust: []string{}}
	e.federation = rep
	subj := fmt.Sprintf("%s:%d", e.cfg.Path, fc.Line)
	var out []Finding
	add := func(sev, msg, fix string) {
		out = append(out, Finding{Check: "federation", Severity: sev, Subject: subj, Message: msg, Fix: fix})
	}
	from := ""
	if fc.HostFromHostname {
		from = " (the short host name; set [federation] host to choose another)"
	}
	add(SevOK, fmt.Sprintf("host id %q%s, vhost %q, heartbeat %s, control timeout %s", fc.Host, from, fc.Vhost, fc.Heartbeat.Duration, fc.ControlTimeout.Duration), "")

	key, err := identity.LoadKey(fc.KeyFile)
	var pub ed25519.PublicKey
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add(SevInfo, "key file "+fc.KeyFile+" does not exist yet", "`fleetmgr federation key` creates it (so does serve) and prints the trust line to give the peers")
	case err != nil:
		add(SevError, err.Error(), "chmod 600 "+fc.KeyFile+" (owned by you, a regular file); if others could read it, make a new key and rotate it on every peer (docs/SECURITY.md)")
	default:
		pub = identity.PublicKey(key)
		rep.Key = identity.FormatPublicKey(pub)
		rep.TrustLine = identity.FormatTrustLine(fc.Host, pub, identity.CapAll)
		add(SevOK, "key file "+fc.KeyFile+": this host's trust line is "+rep.TrustLine, "")
	}
	pwFile := filepath.Join(e.cfg.Manager.StateDir, federation.PasswordFile)
	if st, err := os.Stat(pwFile); err == nil {
		if p := privdir.FileProblem(pwFile, st); p != "" {
			add(SevError, fmt.Sprintf("%s: %s (it holds the federation broker user's password)", pwFile, p), "chmod 600 "+pwFile)
		}
	}

	hosts := fc.Peers.Hosts()
	for _, h := range hosts {
		for _, p := range fc.Peers.Peers(h) {
			rep.Trust = append(rep.Trust, p.String())
		}
	}
	if len(hosts) == 0 {
		add(SevWarn, "trusts no peer: this host's fleets are announced, but no other host's are shown and no request is obeyed",
			"add each peer's `fleetmgr federation key` line to [federation] trust")
	} else {
		var parts []string
		for _, h := range hosts {
			for _, p := range fc.Peers.Peers(h) {
				parts = append(parts, fmt.Sprintf("%s (%s)", h, p.Caps))
			}
		}
		add(SevOK, fmt.Sprintf("trusts %d peer(s): %s", len(hosts), strings.Join(parts, ", ")), "")
	}

	out = append(out, checkPeerClocks(ctx, e, subj)...)

	if e.broker == nil || e.cfg.Broker == nil {
		add(SevInfo, "broker protections not checked: the broker's management API did not answer (see the broker findings)", "")
		return out
	}
	prot := federation.Protections{Signatures: true, TopicPermissions: e.broker.Has(broker.TopicPermissions)}
	admin, err := e.m.BrokerAdmin()
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var qs []broker.Queue
		qs, err = admin.ListQueues(cctx, fc.Vhost)
		cancel()
		for _, q := range qs {
			if q.Name == federation.ControlQueue(fc.Host) {
				rep.Provisioned, prot.Permissions = true, true
			}
		}
	}
	if err == nil && pub != nil { // the management API answered
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kerr := federation.CheckRegisteredKey(cctx, admin, fc.Host, pub)
		cancel()
		var conflict *federation.KeyConflictError
		switch {
		case errors.As(kerr, &conflict):
			rep.KeyConflict = identity.FormatPublicKey(conflict.Registered)
			add(SevError, kerr.Error(), "if this manager replaces the old "+fc.Host+": `fleetmgr serve --take-over-host` once; else set [federation] host to this machine's own id")
		case kerr != nil:
			add(SevWarn, "could not read broker user "+federation.BrokerUser(fc.Host)+" to compare its registered key: "+kerr.Error(), "")
		}
	}
	if !rep.Provisioned {
		msg := fmt.Sprintf("host %s is not provisioned on vhost %q yet", fc.Host, fc.Vhost)
		if err != nil && !broker.IsNotFound(err) {
			msg += " (" + err.Error() + ")"
		}
		add(SevInfo, msg, "`fleetmgr serve` provisions it at start (its broker user "+federation.BrokerUser(fc.Host)+", queue "+federation.ControlQueue(fc.Host)+")")
	}
	rep.Protections = &Protections{Signatures: true, Permissions: prot.Permissions, TopicPermissions: prot.TopicPermissions, Words: prot.String()}
	sev := SevOK
	if !prot.TopicPermissions {
		sev = SevInfo
	}
	add(sev, "protections in force: "+prot.String(), "")
	return out
}

// checkPeerClocks says, from the running serve's view, each peer whose
// clock is off by a second or more (issue 27): an error when requests
// between the two hosts are refused for it ("beta's clock is 10m0s ahead:
// its requests are refused …"), a warning otherwise.
func checkPeerClocks(ctx context.Context, e *checkEnv, subj string) []Finding {
	if e.peers == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fed := e.peers(cctx, e.cfg)
	if fed == nil {
		return nil
	}
	var out []Finding
	for _, h := range fed.Hosts {
		if h.Clock == "" {
			continue
		}
		sev := SevWarn
		if strings.Contains(h.Clock, "refused") {
			sev = SevError
		}
		out = append(out, Finding{Check: "federation", Severity: sev, Subject: subj, Message: h.Clock,
			Fix: "set the clocks of this host and " + h.Host + " right (NTP: `timedatectl set-ntp true` on each)"})
	}
	return out
}
