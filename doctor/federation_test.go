package doctor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// fedConfig writes a fleets.toml with [broker] and [federation] (trust as
// given) in a fresh directory and loads it.
func fedConfig(t *testing.T, trust string) *registry.Config {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	src := fmt.Sprintf(`[manager]
state_dir = %q

[broker]
management_url = "http://127.0.0.1:1"
amqp_url = "amqp://127.0.0.1:1"

[federation]
host = "alpha"
trust = [%s]
`, filepath.Join(dir, "state"), trust)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func findings(fs []Finding, sev, substr string) int {
	n := 0
	for _, f := range fs {
		if f.Check == "federation" && f.Severity == sev && strings.Contains(f.Message, substr) {
			n++
		}
	}
	return n
}

// TestCheckFederation: without a key, that it will be created (check
// creates nothing); an empty trust list is a warning; a good key gives
// its trust line; the protections follow the broker's capabilities
// (topic permissions, or signatures alone), an unprovisioned host is
// said so; a key readable by others is an error saying what to do.
func TestCheckFederation(t *testing.T) {
	ctx := context.Background()
	cfg := fedConfig(t, "")
	e := &checkEnv{cfg: cfg, m: lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)}
	out := checkFederation(ctx, e)
	if findings(out, SevOK, `host id "alpha"`) != 1 || findings(out, SevInfo, "does not exist yet") != 1 ||
		findings(out, SevWarn, "trusts no peer") != 1 || findings(out, SevInfo, "protections not checked") != 1 {
		t.Errorf("no key, no trust, no broker answer: %+v", out)
	}
	if e.federation == nil || e.federation.Key != "" || e.federation.Protections != nil {
		t.Errorf("report %+v", e.federation)
	}
	if _, err := os.Stat(cfg.Federation.KeyFile); err == nil {
		t.Fatal("check created the key file")
	}

	peer, _, err := identity.LoadOrCreateKey(filepath.Join(t.TempDir(), "peer.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = fedConfig(t, fmt.Sprintf("%q", identity.FormatTrustLine("beta", identity.PublicKey(peer), identity.CapRead)))
	key, _, err := identity.LoadOrCreateKey(cfg.Federation.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	line := identity.FormatTrustLine("alpha", identity.PublicKey(key), identity.CapAll)
	e = &checkEnv{cfg: cfg, m: lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil),
		broker: newBrokerReport("u", broker.Capabilities{Product: broker.LavinMQ, Supported: map[broker.Capability]bool{broker.TopicPermissions: false}})}
	out = checkFederation(ctx, e)
	if findings(out, SevOK, "this host's trust line is "+line) != 1 || findings(out, SevOK, "trusts 1 peer(s): beta (read)") != 1 ||
		findings(out, SevInfo, "not provisioned") != 1 || findings(out, SevInfo, "only signatures stop presence sent as another host") != 1 {
		t.Errorf("a key, a read-only peer, LavinMQ: %+v", out)
	}
	if p := e.federation.Protections; p == nil || p.TopicPermissions || p.Permissions || !p.Signatures || e.federation.TrustLine != line {
		t.Errorf("report %+v %+v", e.federation, p)
	}
	e.broker = newBrokerReport("u", broker.Capabilities{Product: broker.RabbitMQ, Supported: map[broker.Capability]bool{broker.TopicPermissions: true}})
	if out = checkFederation(ctx, e); findings(out, SevOK, "topic permissions: the broker refuses presence sent as another host") != 1 {
		t.Errorf("RabbitMQ: %+v", out)
	}

	if err := os.Chmod(cfg.Federation.KeyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range checkFederation(ctx, e) {
		if f.Severity == SevError && strings.Contains(f.Fix, "chmod 600 "+cfg.Federation.KeyFile) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("a key others can read gives no error with its fix")
	}
}

// TestCheckPeerClocks (issue 27 item 3): check says, from the running
// serve's view, a peer whose clock is off — an error when requests
// between the hosts are refused for it — and nothing for one in step.
func TestCheckPeerClocks(t *testing.T) {
	ctx := context.Background()
	cfg := fedConfig(t, "")
	words := federation.SkewWords("beta", 10*time.Minute, federation.DefaultClockSkew)
	e := &checkEnv{cfg: cfg, m: lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil),
		peers: func(context.Context, *registry.Config) *peerview.Federation {
			return &peerview.Federation{Host: "alpha", Connected: true, Hosts: []peerview.Host{
				{Host: "beta", State: "online", ClockSkewMS: (10 * time.Minute).Milliseconds(), Clock: words},
				{Host: "gamma", State: "online", Clock: federation.SkewWords("gamma", -2*time.Second, federation.DefaultClockSkew)},
				{Host: "delta", State: "online"},
			}}
		}}
	out := checkFederation(ctx, e)
	if findings(out, SevError, "beta's clock is 10m0s ahead: its requests are refused") != 1 ||
		findings(out, SevWarn, "gamma's clock is 2s behind") != 1 || len(out) == 0 {
		t.Errorf("peer clocks: %+v", out)
	}
}
