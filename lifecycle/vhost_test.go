package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
)

// loadCfg writes a fleets.toml with one fleet kb and brokerTable (may be
// "") and loads it.
func loadCfg(t *testing.T, brokerTable, fleetExtra string) *registry.Config {
	t.Helper()
	dir := t.TempDir()
	body := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n" + brokerTable +
		"\n[fleets.kb]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\nport = 8770\n" + fleetExtra
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestBrokerEnvWithoutBroker: no [broker] → the URI variable is set empty
// (nothing leaks in from the manager's environment), its name is passed,
// the vhost step is skipped, VhostHealth says ErrNoBroker.
func TestBrokerEnvWithoutBroker(t *testing.T) {
	cfg := loadCfg(t, "", "broker_uri_env = \"KB_AMQP\"\n")
	m := New(cfg, quiet(), []string{"KB_AMQP=amqp://leaked@elsewhere/x"})
	f := cfg.Fleets["kb"]
	env, err := m.brokerEnv(f)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := env["KB_AMQP"]; !ok || v != "" || env[EnvBrokerURIEnv] != "KB_AMQP" {
		t.Fatalf("brokerEnv = %v", env)
	}
	merged := mergeEnv(m.environ, env)
	for _, kv := range merged {
		if strings.HasPrefix(kv, "KB_AMQP=") && kv != "KB_AMQP=" {
			t.Fatalf("manager's URI leaked into fleetd: %s", kv)
		}
	}
	if d, err := m.ensureVhost(context.Background(), f); err != nil || !strings.Contains(d, "no broker configured") {
		t.Fatalf("ensureVhost = %q, %v", d, err)
	}
	if _, _, err := m.VhostHealth(context.Background(), "kb"); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("VhostHealth = %v, want ErrNoBroker", err)
	}
}

// TestBrokerAdminNamesMissingVariables: unset admin credentials are an
// error naming the variables, and nothing is attempted.
func TestBrokerAdminNamesMissingVariables(t *testing.T) {
	cfg := loadCfg(t, "[broker]\nmanagement_url = \"http://127.0.0.1:1\"\nadmin_user_env = \"MQ_ADMIN\"\nadmin_password_env = \"MQ_ADMIN_PW\"\n", "")
	m := New(cfg, quiet(), []string{"MQ_ADMIN=root"})
	_, err := m.ensureVhost(context.Background(), cfg.Fleets["kb"])
	if err == nil || !strings.Contains(err.Error(), "MQ_ADMIN_PW not set") || strings.Contains(err.Error(), "MQ_ADMIN and") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(m.BrokerPasswordPath("kb")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("password file written before the broker answered: %v", err)
	}
}

// TestVhostStepAgainstBroker, against each broker: the vhost step creates
// vhost + user with a 0600 password file, reuses the password on the next
// start, and the URI it hands fleetd opens the vhost.
func TestVhostStepAgainstBroker(t *testing.T) {
	brokertest.Each(t, testVhostStepAgainstBroker)
}

func testVhostStepAgainstBroker(t *testing.T, b *brokertest.Broker) {
	vhost, user := brokertest.Unique("fmlc")+"/kb", brokertest.Unique("fmlc-kb")
	b.Cleanup(t, []string{vhost}, []string{user})
	cfg := loadCfg(t, "[broker]\nmanagement_url = \""+b.MgmtURL+"\"\namqp_url = \""+b.AMQPURL+"\"\n",
		"vhost = \""+vhost+"\"\nbroker_user = \""+user+"\"\n")
	m := New(cfg, quiet(), []string{registry.DefaultAdminUserEnv + "=" + b.User, registry.DefaultAdminPasswordEnv + "=" + b.Password})
	f := cfg.Fleets["kb"]
	ctx := context.Background()
	d1, err := m.ensureVhost(ctx, f)
	if err != nil || !strings.Contains(d1, "created") {
		t.Fatalf("first ensureVhost: %q %v", d1, err)
	}
	st, err := os.Stat(m.BrokerPasswordPath("kb"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v %v", st, err)
	}
	env1, err := m.brokerEnv(f)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := m.ensureVhost(ctx, f)
	if err != nil || !strings.Contains(d2, "exists") {
		t.Fatalf("second ensureVhost: %q %v", d2, err)
	}
	env2, _ := m.brokerEnv(f)
	if env1["FLEET_BROKER_URI"] != env2["FLEET_BROKER_URI"] || env1["FLEET_BROKER_URI"] == "" {
		t.Fatal("the URI changed between starts")
	}
	conn, err := broker.Dial(ctx, env2["FLEET_BROKER_URI"])
	if err != nil {
		t.Fatalf("fleetd's URI does not open the vhost: %v", err)
	}
	conn.Close()
	ok, depths, err := m.VhostHealth(ctx, "kb")
	if !ok || err != nil || len(depths) != 0 {
		t.Fatalf("VhostHealth = %v %v %v", ok, depths, err)
	}
}
