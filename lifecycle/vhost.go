package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/registry"
)

// The vhost step of a fleet's start (docs/ARCHITECTURE.md "Lifecycle of
// one fleet": validate isolation → ensure vhost (+ user, permissions) →
// herdr session → …). It runs before anything is started, so a broker that
// does not answer fails the start with nothing to roll back.

// ErrNoBroker is returned by VhostHealth when fleets.toml has no [broker]
// table; status shows it as "no broker configured".
var ErrNoBroker = errors.New("no broker configured")

// EnvBrokerURIEnv is the contract variable that carries the NAME of the
// variable holding the broker URI (the fleet's broker_uri_env), so a
// fleetd (or the stand-in) need not be configured with it separately.
const EnvBrokerURIEnv = "FLEET_BROKER_URI_ENV"

// brokerPasswordFile is the file, in the fleet's state directory, holding
// the generated password of the fleet's broker user (0600).
const brokerPasswordFile = "broker-password"

// BrokerPasswordPath is where the fleet's broker user's password is kept:
// <state_dir>/fleets/<name>/broker-password, mode 0600, created on the
// first start with a broker and reused on every later one.
func (m *Manager) BrokerPasswordPath(name string) string {
	return filepath.Join(m.FleetDir(name), brokerPasswordFile)
}

// BrokerAdmin returns a management API client for [broker], with the
// administrator credentials read from the environment variables
// admin_user_env and admin_password_env name (in the Manager's
// environment). It fails with ErrNoBroker without a [broker] table, and
// with a message naming the variable when one is unset.
func (m *Manager) BrokerAdmin() (*broker.Admin, error) {
	cfg := m.Config()
	b := cfg.Broker
	if b == nil {
		return nil, ErrNoBroker
	}
	user, pass := m.getenv(b.AdminUserEnv), m.getenv(b.AdminPasswordEnv)
	var missing []string
	if user == "" {
		missing = append(missing, b.AdminUserEnv)
	}
	if pass == "" {
		missing = append(missing, b.AdminPasswordEnv)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("broker admin credentials: %s not set in fleetmgr's environment ([broker] admin_user_env / admin_password_env in %s name them); export the broker administrator's user and password there",
			strings.Join(missing, " and "), cfg.Path)
	}
	return broker.NewAdmin(b.ManagementURL, user, pass, broker.AdminOptions{Log: m.log})
}

// brokerPassword returns the fleet's broker password, generating and
// storing it (0600, atomically) when there is none yet.
func (m *Manager) brokerPassword(name string) (string, error) {
	path := m.BrokerPasswordPath(name)
	b, err := atomicfile.Read(path, atomicfile.MaxSmall)
	if err == nil {
		if pw := strings.TrimSpace(string(b)); pw != "" {
			return pw, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var r [24]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(r[:])
	if err := writeFileAtomic(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

// ensureVhost is the vhost step: the fleet's vhost, its user (password
// from brokerPassword) and that user's permissions on that vhost only. It
// returns the step's detail. Without [broker] it does nothing.
func (m *Manager) ensureVhost(ctx context.Context, f *registry.Fleet) (string, error) {
	if m.Config().Broker == nil {
		return "skipped: no broker configured", nil
	}
	admin, err := m.BrokerAdmin()
	if err != nil {
		return "", fmt.Errorf("fleet %s: %w", f.Name, err)
	}
	created, err := admin.EnsureVhost(ctx, f.Vhost)
	if err != nil {
		return "", fmt.Errorf("fleet %s: vhost %q at %s: %w", f.Name, f.Vhost, admin.URL(), err)
	}
	pw, err := m.brokerPassword(f.Name)
	if err != nil {
		return "", fmt.Errorf("fleet %s: broker password file: %w", f.Name, err)
	}
	if _, err := admin.EnsureUser(ctx, f.BrokerUser, pw, ""); err != nil {
		return "", fmt.Errorf("fleet %s: broker user %q at %s: %w", f.Name, f.BrokerUser, admin.URL(), err)
	}
	if err := admin.SetPermissions(ctx, f.Vhost, f.BrokerUser); err != nil {
		return "", fmt.Errorf("fleet %s: permissions of %q on vhost %q at %s: %w", f.Name, f.BrokerUser, f.Vhost, admin.URL(), err)
	}
	how := "exists"
	if created {
		how = "created"
	}
	return fmt.Sprintf("vhost %s %s, user %s (permissions on it only) at %s", f.Vhost, how, f.BrokerUser, admin.URL()), nil
}

// brokerEnv is the broker part of fleetd's environment:
// FLEET_BROKER_URI_ENV = the fleet's broker_uri_env, and that variable =
// amqp://user:password@host:port/<escaped vhost>. Without [broker] the URI
// variable is set empty, so no URI leaks in from the manager's own
// environment. It only reads the password file (ensureVhost writes it).
func (m *Manager) brokerEnv(f *registry.Fleet) (map[string]string, error) {
	env := map[string]string{EnvBrokerURIEnv: f.BrokerURIEnv, f.BrokerURIEnv: ""}
	if m.Config().Broker == nil {
		return env, nil
	}
	uri, err := m.fleetURI(f)
	if err != nil {
		return nil, err
	}
	env[f.BrokerURIEnv] = uri
	return env, nil
}

// fleetURI is the fleet's own AMQP URI (its user, its vhost).
func (m *Manager) fleetURI(f *registry.Fleet) (string, error) {
	b, err := atomicfile.Read(m.BrokerPasswordPath(f.Name), atomicfile.MaxSmall)
	if err != nil {
		return "", fmt.Errorf("fleet %s: broker password: %w (the vhost step of `fleetmgr start %s` creates it)", f.Name, err, f.Name)
	}
	bt := m.Config().Broker // one snapshot: a reload may have dropped [broker] since the caller looked
	if bt == nil {
		return "", fmt.Errorf("fleet %s: %w", f.Name, ErrNoBroker)
	}
	return broker.VhostURI(bt.AMQPURL, f.BrokerUser, strings.TrimSpace(string(b)), f.Vhost)
}

// VhostHealth reports whether fleet name's vhost is reachable over AMQP
// with the fleet's own credentials, and the exact depth of every queue in
// it (names from the management API, depths by passive declare). err is
// ErrNoBroker without [broker]; otherwise it says what failed. reachable
// may be true with a non-nil err (AMQP answers, the management API does
// not), in which case depths is nil. Bounded by ctx and about 5 s.
func (m *Manager) VhostHealth(ctx context.Context, name string) (reachable bool, depths map[string]int, err error) {
	f, err := m.Fleet(name)
	if err != nil {
		return false, nil, err
	}
	if m.Config().Broker == nil {
		return false, nil, ErrNoBroker
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	uri, err := m.fleetURI(f)
	if err != nil {
		return false, nil, err
	}
	conn, err := broker.Dial(ctx, uri)
	if err != nil {
		return false, nil, fmt.Errorf("fleet %s: vhost %q: %w", name, f.Vhost, err)
	}
	defer conn.Close()
	admin, err := m.BrokerAdmin()
	if err != nil {
		return true, nil, err
	}
	qs, err := admin.ListQueues(ctx, f.Vhost)
	if err != nil {
		return true, nil, err
	}
	depths = make(map[string]int, len(qs))
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	for _, q := range qs {
		n, _, err := broker.QueueDepth(conn, q.Name)
		if errors.Is(err, broker.ErrQueueMissing) {
			continue // deleted since the listing
		}
		if err != nil {
			return true, depths, err
		}
		depths[q.Name] = n
	}
	return true, depths, nil
}

// DeleteVhost deletes fleet name's vhost and every message in it. It is
// never part of stop; it refuses while the fleet runs (or starts), under
// the fleet's lock so no start can race it. deleted is false when the
// vhost did not exist. The fleet's user and password file are kept, so a
// later start recreates an empty vhost for the same user.
func (m *Manager) DeleteVhost(ctx context.Context, name string) (deleted bool, err error) {
	cfg := m.Config()
	f, err := cfg.Fleet(name)
	if err != nil {
		return false, err
	}
	if cfg.Broker == nil {
		return false, fmt.Errorf("fleet %s: %w in %s", name, ErrNoBroker, cfg.Path)
	}
	unlock, err := m.lock(ctx, name)
	if err != nil {
		return false, err
	}
	defer unlock()
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return false, err
	}
	if alive(st.Fleetd) || st.Phase == PhaseStarting || st.Phase == PhaseRestarting {
		return false, fmt.Errorf("fleet %s is %s: stop it first (`fleetmgr stop %s`); a running fleet's vhost is never deleted", name, st.Phase, name)
	}
	admin, err := m.BrokerAdmin()
	if err != nil {
		return false, err
	}
	deleted, err = admin.DeleteVhost(ctx, f.Vhost)
	if err != nil {
		return false, fmt.Errorf("fleet %s: delete vhost %q: %w", name, f.Vhost, err)
	}
	m.log.Warn("vhost deleted", "fleet", name, "vhost", f.Vhost, "existed", deleted)
	return deleted, nil
}
