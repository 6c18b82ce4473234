package federation

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/privdir"
)

// The broker topology (docs/FEDERATION.md, "Topology"; the exchange and
// queue names of the fleetd design's cross-host chapter, renamed fleet.*).
const (
	// DefaultVhost is the federation vhost when [federation] vhost is not
	// set. It must not be any fleet's vhost.
	DefaultVhost = "fleetmgr"
	// ExchangeRoster (topic) carries presence; routing key roster.<host>.
	ExchangeRoster = "fleet.roster"
	// ExchangeControl (direct) carries requests; routing key = target
	// host.
	ExchangeControl = "fleet.control"
	// ExchangeDLX (fanout) is the dead-letter exchange of every control
	// queue, and where a receiver publishes what it refuses.
	ExchangeDLX = "fleet.dlx"
	// QueueDLQ (durable, capped at DLQMaxLength, oldest dropped first)
	// holds dead letters for the operator; no host may read it.
	QueueDLQ = "fleet.dlq"

	// DLQMaxLength caps fleet.dlq: anything with write access to
	// fleet.dlx could otherwise fill it.
	DLQMaxLength = 10_000
	// ControlMaxLength caps each control.<host>; the oldest overflow is
	// dead-lettered.
	ControlMaxLength = 1_000
	// RosterMaxLength caps each roster queue (presence is soft state: the
	// oldest is dropped).
	RosterMaxLength = 4_096
)

// ControlQueue is host's durable request queue, bound to ExchangeControl
// with key host.
func ControlQueue(host string) string { return "control." + host }

// RosterQueue is host's roster queue (exclusive to its connection,
// auto-deleted), bound to ExchangeRoster with key "roster.#".
func RosterQueue(host string) string { return "roster." + host }

// RosterKey is the routing key of host's presence.
func RosterKey(host string) string { return "roster." + host }

// ReplyExchange is host's reply exchange (direct, durable): answers to
// host's requests are published there with the requesting process's
// instance as routing key. One per host, so only host may bind from it
// (read permission), which keeps replies confidential on a broker without
// topic permissions.
func ReplyExchange(host string) string { return "fleet.reply." + host }

// ReplyQueue is one process's reply queue (exclusive, auto-deleted),
// bound to ReplyExchange(host) with key instance.
func ReplyQueue(host, instance string) string { return "reply." + host + "." + instance }

// BrokerUser is the broker user of host's manager: its own, so the broker
// can hold it to its own queues and presence key.
func BrokerUser(host string) string { return identity.BrokerUser(host) }

// HostPermissions returns the permissions of host's broker user on the
// federation vhost: declare only its own exclusive queues; publish to the
// shared exchanges, any host's reply exchange and fleet.dlx; consume only
// its own queues and bind only from fleet.roster and its own reply
// exchange. It cannot read another host's requests or replies, nor
// fleet.dlq, nor delete anything shared (docs/FEDERATION.md, "Least
// privilege").
func HostPermissions(host string) broker.Permissions {
	h := regexp.QuoteMeta(host)
	own := `roster\.` + h + `|reply\.` + h + `\.[0-9a-f]{16}`
	return broker.Permissions{
		Configure: `^(` + own + `)$`,
		Write:     `^(fleet\.roster|fleet\.control|fleet\.dlx|fleet\.reply\.[a-z][a-z0-9-]{0,31}|` + own + `)$`,
		Read:      `^(fleet\.roster|fleet\.reply\.` + h + `|control\.` + h + `|` + own + `)$`,
	}
}

// RosterTopicPermission is host's RabbitMQ topic permission on
// fleet.roster: publish only with routing keys roster.<host> or
// roster.<host>.…, so the broker refuses presence one host sends as
// another (channel closed, 403 ACCESS_REFUSED) before any signature is
// checked. Binding (read) is not narrowed: every host reads all presence.
func RosterTopicPermission(host string) broker.TopicPermission {
	return broker.TopicPermission{Exchange: ExchangeRoster, Write: `^roster\.` + regexp.QuoteMeta(host) + `(\..*)?$`, Read: `.*`}
}

// Protections says which checks are in force on the broker for a host, as
// Provision found them (for `fleetmgr check`).
type Protections struct {
	// TopicPermissions: the broker refuses presence published under
	// another host's key (RabbitMQ topic permissions). False on brokers
	// without them (LavinMQ 1.0): then only signatures stop a host
	// speaking as another, and a host could flood others' roster queues
	// with forged presence that receivers drop.
	TopicPermissions bool
	// Permissions: the host's user is confined to its own queues (always
	// true after a successful Provision).
	Permissions bool
	// Signatures: every message is signed and verified (always true).
	Signatures bool
	// Replaced is the key another host had registered under this host id
	// when provisioning took it over (ProvisionOptions.TakeOver); nil
	// otherwise.
	Replaced ed25519.PublicKey
}

// String says it in words.
func (p Protections) String() string {
	parts := []string{"signatures: every message signed and verified"}
	if p.Permissions {
		parts = append(parts, "broker permissions: this host's user reads only its own queues")
	}
	if p.TopicPermissions {
		parts = append(parts, "topic permissions: the broker refuses presence sent as another host")
	} else {
		parts = append(parts, "no topic permissions on this broker: only signatures stop presence sent as another host")
	}
	return strings.Join(parts, "; ")
}

// ProvisionOptions are the inputs of Provision.
type ProvisionOptions struct {
	// Vhost is the federation vhost (DefaultVhost when empty).
	Vhost string
	// Host is this manager's host id.
	Host string
	// Password is the password to give BrokerUser(Host) (HostPassword).
	Password string
	// Key is this host's public key: recorded on BrokerUser(Host) as the
	// tag KeyTag(Key), and compared with the tag found there (the
	// take-over rule, docs/FEDERATION.md "Identity"). Required.
	Key ed25519.PublicKey
	// TakeOver lets provisioning re-provision a host whose broker user
	// carries another key (`fleetmgr serve --take-over-host`): the
	// user's password and key tag become this host's, and the host that
	// registered the other key is locked out.
	TakeOver bool
}

// KeyTagPrefix starts the broker-user tag that records the public key of
// the host that provisioned the user; the rest is the 32-byte ed25519 key
// in unpadded base64url (43 characters, no comma: one tag). RabbitMQ
// gives no rights to unknown tags, and a public key is no secret.
const KeyTagPrefix = "fleetmgr-key-"

// KeyTag returns the tag that records key on a host's broker user.
func KeyTag(key ed25519.PublicKey) string {
	return KeyTagPrefix + base64.RawURLEncoding.EncodeToString(key)
}

// RegisteredKey returns the key recorded in tags (KeyTag); ok is false
// when there is no such tag (a user provisioned before issue 27, or made
// by hand). A tag with the prefix that does not decode to 32 bytes is an
// error: someone wrote it by hand, and it must not be read as "no key".
func RegisteredKey(tags []string) (key ed25519.PublicKey, ok bool, err error) {
	for _, t := range tags {
		rest, found := strings.CutPrefix(t, KeyTagPrefix)
		if !found {
			continue
		}
		b, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, false, fmt.Errorf("broker user tag %q: not an ed25519 public key in base64url", t)
		}
		return ed25519.PublicKey(b), true, nil
	}
	return nil, false, nil
}

// KeyConflictError is Provision's refusal to re-provision a host whose
// broker user was registered with another key (issue 27 item 2): either
// a second manager is configured with this host id by mistake, or this
// host replaces the old one and the operator must say so.
type KeyConflictError struct {
	// Host is the host id; User its broker user.
	Host, User string
	// Registered is the key recorded on the broker user; Own this
	// manager's.
	Registered, Own ed25519.PublicKey
}

// Error names both keys and both ways out.
func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("host id %s is registered on the broker with another key: broker user %s carries %s, this manager's key is %s; "+
		"nothing was changed (the host using that key keeps its password). If this manager really replaces the old %s, start it once with "+
		"`fleetmgr serve --take-over-host` and give peers its new trust line; "+
		"otherwise set [federation] host to this machine's own id",
		e.Host, e.User, identity.FormatPublicKey(e.Registered), identity.FormatPublicKey(e.Own), e.Host)
}

// CheckRegisteredKey reads host's broker user and compares the key it
// carries with own: nil when the user does not exist, carries no key, or
// carries own; a *KeyConflictError when it carries another; other errors
// as the management API gave them.
func CheckRegisteredKey(ctx context.Context, admin *broker.Admin, host string, own ed25519.PublicKey) error {
	user := BrokerUser(host)
	u, err := admin.GetUser(ctx, user)
	if broker.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	reg, ok, err := RegisteredKey(u.Tags)
	if err != nil {
		return fmt.Errorf("broker user %s: %w", user, err)
	}
	if ok && !reg.Equal(own) {
		return &KeyConflictError{Host: host, User: user, Registered: reg, Own: own}
	}
	return nil
}

// Provision prepares the broker for host with the administrator's
// management API, idempotently: the federation vhost; full permissions on
// it for the administrator (who declares the shared topology); the
// exchanges fleet.roster, fleet.control, fleet.dlx and host's reply
// exchange; fleet.dlq bound to fleet.dlx; control.<host> (dead-lettering
// to fleet.dlx, capped) bound to fleet.control with key host; the user
// BrokerUser(host) with HostPermissions; and, where the broker has them,
// the topic permission RosterTopicPermission. The user carries the tag
// KeyTag(opt.Key); if it exists already with another key's tag, nothing
// is changed and the error is a *KeyConflictError, unless opt.TakeOver.
// A user without a key tag (provisioned before the rule) is adopted.
// Errors name the step and the broker. A queue that exists with other arguments (an older layout)
// is reported with what to delete.
func Provision(ctx context.Context, admin *broker.Admin, opt ProvisionOptions) (Protections, error) {
	vhost := opt.Vhost
	if vhost == "" {
		vhost = DefaultVhost
	}
	if err := identity.CheckHost(opt.Host); err != nil {
		return Protections{}, err
	}
	if opt.Password == "" {
		return Protections{}, errors.New("federation provisioning: empty broker password")
	}
	if len(opt.Key) != ed25519.PublicKeySize {
		return Protections{}, errors.New("federation provisioning: no ed25519 public key for the host")
	}
	step := func(what string, err error) error {
		if err == nil {
			return nil
		}
		// RabbitMQ says "inequivalent arg", LavinMQ "declared with other
		// arguments".
		if he := (*broker.HTTPError)(nil); errors.As(err, &he) && he.Status == 400 && strings.HasPrefix(what, "queue") &&
			(strings.Contains(he.Body, "inequivalent arg") || strings.Contains(he.Body, "other arguments")) {
			return fmt.Errorf("federation provisioning at %s: %s: %w (the queue exists with other arguments, from an older fleetmgr: delete it in vhost %q and start again)", admin.URL(), what, err, vhost)
		}
		return fmt.Errorf("federation provisioning at %s: %s: %w", admin.URL(), what, err)
	}
	// The take-over rule first, so a refused provisioning changes nothing.
	var conflict *KeyConflictError
	var replaced ed25519.PublicKey
	switch err := CheckRegisteredKey(ctx, admin, opt.Host, opt.Key); {
	case errors.As(err, &conflict) && opt.TakeOver:
		replaced = conflict.Registered
	case errors.As(err, &conflict):
		return Protections{}, err
	case err != nil:
		return Protections{}, step("broker user "+BrokerUser(opt.Host), err)
	}
	if _, err := admin.EnsureVhost(ctx, vhost); err != nil {
		return Protections{}, step("vhost "+vhost, err)
	}
	if err := admin.SetPermissions(ctx, vhost, admin.User()); err != nil {
		return Protections{}, step("administrator permissions on vhost "+vhost, err)
	}
	for _, e := range []struct{ name, kind string }{
		{ExchangeRoster, "topic"}, {ExchangeControl, "direct"}, {ExchangeDLX, "fanout"}, {ReplyExchange(opt.Host), "direct"},
	} {
		if err := admin.DeclareExchange(ctx, vhost, e.name, e.kind); err != nil {
			return Protections{}, step("exchange "+e.name, err)
		}
	}
	if err := whenVhostReady(ctx, func() error {
		return admin.DeclareQueue(ctx, vhost, QueueDLQ, map[string]any{"x-max-length": DLQMaxLength})
	}); err != nil {
		return Protections{}, step("queue "+QueueDLQ, err)
	}
	if err := admin.BindQueue(ctx, vhost, ExchangeDLX, QueueDLQ, ""); err != nil {
		return Protections{}, step("binding "+ExchangeDLX+" → "+QueueDLQ, err)
	}
	cq := ControlQueue(opt.Host)
	if err := whenVhostReady(ctx, func() error {
		return admin.DeclareQueue(ctx, vhost, cq, map[string]any{"x-dead-letter-exchange": ExchangeDLX, "x-max-length": ControlMaxLength})
	}); err != nil {
		return Protections{}, step("queue "+cq, err)
	}
	if err := admin.BindQueue(ctx, vhost, ExchangeControl, cq, opt.Host); err != nil {
		return Protections{}, step("binding "+ExchangeControl+" → "+cq, err)
	}
	user := BrokerUser(opt.Host)
	if _, err := admin.EnsureUser(ctx, user, opt.Password, KeyTag(opt.Key)); err != nil {
		return Protections{}, step("broker user "+user, err)
	}
	if err := admin.SetPermissionsTo(ctx, vhost, user, HostPermissions(opt.Host)); err != nil {
		return Protections{}, step("permissions of "+user, err)
	}
	p := Protections{Permissions: true, Signatures: true, Replaced: replaced}
	ok, err := admin.TopicPermissionsSupported(ctx)
	if err != nil {
		return Protections{}, step("topic permissions probe", err)
	}
	if ok {
		if err := admin.SetTopicPermission(ctx, vhost, user, RosterTopicPermission(opt.Host)); err != nil {
			return Protections{}, step("topic permission of "+user+" on "+ExchangeRoster, err)
		}
		p.TopicPermissions = true
	}
	return p, nil
}

// whenVhostReady runs declare, again while RabbitMQ answers that the
// vhost's queue supervisor is not running yet (HTTP 400
// vhost_supervisor_not_running or queue_supervisor_not_found: a vhost
// just created, on a busy node, takes a moment before it takes queues),
// every 100 ms for at most 15 s.
func whenVhostReady(ctx context.Context, declare func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := declare()
		var he *broker.HTTPError
		if err == nil || !errors.As(err, &he) || he.Status != 400 || !strings.Contains(he.Body, "supervisor") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PasswordFile is the file in the state directory that keeps the
// federation broker user's password (0600), like each fleet's
// broker-password.
const PasswordFile = "federation-broker-password"

// HostPassword returns the password kept in <stateDir>/PasswordFile,
// generating 24 random bytes (hex) and writing them 0600 (temporary file,
// sync, link into place: never a half-written or replaced password) when
// there is none yet. A file with group or other permissions is refused.
func HostPassword(stateDir string) (string, error) {
	path := filepath.Join(stateDir, PasswordFile)
	if pw, err := readPassword(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return pw, err
	}
	var r [24]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(r[:])
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", err
	}
	created, err := atomicfile.Create(path, []byte(pw+"\n"), 0o600)
	if err != nil {
		return "", err
	}
	if !created {
		return readPassword(path)
	}
	return pw, nil
}

func readPassword(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if p := privdir.FileProblem(path, st); p != "" {
		return "", fmt.Errorf("%s: %s (it holds the federation broker password: if others could read it, delete it so a new one is made)", path, p)
	}
	b, err := atomicfile.Read(path, atomicfile.MaxSmall)
	if err != nil {
		return "", err
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("%s: empty; delete it so a new password is made", path)
	}
	return pw, nil
}
