package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/doctor"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestFederationHostTakeOver (issue 27 item 2): a second serve configured
// with beta's host id, another key and the shared administrator
// credentials is refused provisioning: its log, `status` and `check` name
// both keys and --take-over-host; the real beta's broker password still
// works, and beta restarted connects again. Started with
// --take-over-host, the second serve takes the id over and the old
// password is refused by the broker.
func TestFederationHostTakeOver(t *testing.T) { brokertest.Each(t, testFederationHostTakeOver) }

func testFederationHostTakeOver(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{sameNetwork: true})
	wait.LogLine(t, 30*time.Second, p.beta.serve.Log, "federation: connected")
	betaKey := identity.FormatPublicKey(identity.PublicKey(p.beta.key))

	imp := newRemoteHostEnv(t, b, nil, p.beta.host, brokertest.Unique("imp"), "", nil)
	impKey := identity.FormatPublicKey(identity.PublicKey(imp.key))
	imp.federate(t, p.vhost, "500ms", []string{identity.FormatTrustLine(p.alpha.host, identity.PublicKey(p.alpha.key), identity.CapAll)})
	imp.startServe()
	log := wait.LogLine(t, 30*time.Second, imp.serve.Log, "refused to provision this host")
	for _, want := range []string{betaKey, impKey, "--take-over-host", "reason=host_key_conflict"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the impostor's refusal does not name %q:\n%s", want, log)
		}
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(imp.MustRun("status", "--json").Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Federation == nil || !strings.Contains(rep.Federation.Error, "registered on the broker with another key") ||
		!strings.Contains(rep.Federation.Error, "--take-over-host") {
		t.Fatalf("the impostor's status: %+v", rep.Federation)
	}
	var chk doctor.Report
	if err := json.Unmarshal([]byte(imp.Run("check", "--json").Stdout), &chk); err != nil {
		t.Fatal(err)
	}
	if chk.Federation == nil || chk.Federation.KeyConflict != betaKey {
		t.Fatalf("the impostor's check: %+v", chk.Federation)
	}

	// Nothing changed for the real beta: its password works, and a new
	// serve of it provisions and connects.
	betaPW := readPW(t, p.beta.StateDir)
	if err := dialAs(b, p.beta.host, betaPW, p.vhost); err != nil {
		t.Fatalf("beta's own password after the refused impostor: %v", err)
	}
	p.beta.stopServe(t)
	p.beta.startServe()
	wait.LogLine(t, 30*time.Second, p.beta.serve.Log, "federation: connected")

	// --take-over-host: the second serve takes the id; the old password
	// is refused.
	imp.stopServe(t)
	imp.serve = imp.StartServe("--take-over-host")
	log = wait.LogLine(t, 30*time.Second, imp.serve.Log, "took over this host id")
	if !strings.Contains(log, `replaced_key="`+betaKey+`"`) {
		t.Fatalf("take-over log does not name the replaced key %s:\n%s", betaKey, log)
	}
	if err := dialAs(b, p.beta.host, betaPW, p.vhost); err == nil {
		t.Fatal("the old beta's password still works after the take-over")
	}
	if err := dialAs(b, p.beta.host, readPW(t, imp.StateDir), p.vhost); err != nil {
		t.Fatalf("the new holder's password: %v", err)
	}
}

// readPW reads the federation broker password in stateDir.
func readPW(t *testing.T, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, federation.PasswordFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// dialAs opens (and closes) an AMQP connection as host's broker user.
func dialAs(b *brokertest.Broker, host, password, vhost string) error {
	uri, err := broker.VhostURI(b.AMQPURL, federation.BrokerUser(host), password, vhost)
	if err != nil {
		return err
	}
	c, err := amqp.Dial(uri)
	if err != nil {
		return err
	}
	return c.Close()
}
