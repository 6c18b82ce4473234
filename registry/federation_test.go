package registry

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// loadFed loads body with the machine's host name set to hostname.
//
//lint:ignore ST1008 the error sits beside the value it qualifies and before the file name, as at every call site of loadBody
func loadFed(t *testing.T, body, hostname string) (*Config, error, string) {
	t.Helper()
	dir := t.TempDir()
	p := writeFile(t, dir, "fleets.toml", body)
	e := fakeEnv(map[string]string{"HOME": dir})
	e.hostname = func() (string, error) { return hostname, nil }
	c, err := load(p, e)
	return c, err, dir
}

func fedKey(seed byte) ed25519.PublicKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return identity.PublicKey(ed25519.NewKeyFromSeed(s))
}

func TestFederationAbsentAndDefaults(t *testing.T) {
	c, err, _ := loadFed(t, "[broker]\n"+fleetA, "box")
	if err != nil || c.Federation != nil {
		t.Fatalf("no [federation]: %+v %v", c.Federation, err)
	}
	c, err, dir := loadFed(t, "[broker]\n[federation]\n"+fleetA, "Fleet01.example.com")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Federation
	if f.Host != "fleet01" || !f.HostFromHostname || f.Vhost != "fleetmgr" || f.Heartbeat.Duration != 2*time.Second ||
		f.ControlTimeout.Duration != 15*time.Second || len(f.Trust) != 0 || f.Line != 2 ||
		f.KeyFile != filepath.Join(dir, ".local", "state", "fleetmgr", "federation.key") {
		t.Fatalf("defaults: %+v", f)
	}
}

func TestFederationKeys(t *testing.T) {
	beta := identity.FormatTrustLine("beta", fedKey(2), identity.CapAll)
	gamma := identity.FormatTrustLine("gamma", fedKey(3), identity.CapRead|identity.CapCalls)
	body := "[broker]\n[federation]\nhost = \"alpha\"\nvhost = \"fed\"\nheartbeat = \"500ms\"\ncontrol_timeout = \"5s\"\n" +
		"key_file = \"keys/fed.key\"\ntrust = [\n  \"" + beta + "\",\n  \"" + gamma + "\",\n]\n" + fleetA
	c, err, dir := loadFed(t, body, "ignored_name")
	if err != nil {
		t.Fatal(err)
	}
	f := c.Federation
	if f.Host != "alpha" || f.HostFromHostname || f.Vhost != "fed" || f.Heartbeat.Duration != 500*time.Millisecond ||
		f.ControlTimeout.Duration != 5*time.Second || f.KeyFile != filepath.Join(dir, "keys", "fed.key") {
		t.Fatalf("keys: %+v", f)
	}
	if hs := f.Peers.Hosts(); strings.Join(hs, ",") != "beta,gamma" {
		t.Fatalf("peers %v", hs)
	}
	if p, _ := f.Peers.ByKey(fedKey(3)); p.Caps != identity.CapRead|identity.CapCalls {
		t.Fatalf("gamma caps %v", p.Caps)
	}
}

// TestFederationErrors: each bad value is refused naming file, line and
// key.
func TestFederationErrors(t *testing.T) {
	beta := identity.FormatTrustLine("beta", fedKey(2), identity.CapAll)
	cases := []struct {
		name, body, hostname string
		line                 int
		field, want          string
	}{
		{"hostname does not fit", "[broker]\n[federation]\n", "my_box", 2, "federation.host", "set [federation] host"},
		{"bad host", "[broker]\n[federation]\nhost = \"Alpha\"\n", "x", 3, "federation.host", "must match ^[a-z][a-z0-9-]{0,31}$"},
		{"unknown key", "[broker]\n[federation]\nheartbeats = \"1s\"\n", "x", 3, "federation.heartbeats", "did you mean heartbeat"},
		{"heartbeat too short", "[broker]\n[federation]\nheartbeat = \"10ms\"\n", "x", 3, "federation.heartbeat", "out of range"},
		{"control timeout too long", "[broker]\n[federation]\ncontrol_timeout = \"2h\"\n", "x", 3, "federation.control_timeout", "out of range"},
		{"trust not a list", "[broker]\n[federation]\ntrust = \"" + beta + "\"\n", "x", 3, "federation.trust", "expected array of strings"},
		{"trust entry", "[broker]\n[federation]\ntrust = [\n\"" + beta + "\",\n\"gamma ed25519:AAAA\",\n]\n", "x", 5, "federation.trust[1]", "3 bytes"},
		{"trust duplicate", "[broker]\n[federation]\ntrust = [\n\"" + beta + "\",\n\"" + beta + "\",\n]\n", "x", 5, "federation.trust[1]", "already trust[0]"},
		{"trust lists self", "[broker]\n[federation]\nhost = \"beta\"\ntrust = [\"" + beta + "\"]\n", "x", 4, "federation.trust", "lists this host"},
		{"no broker", "[federation]\nhost = \"alpha\"\n", "x", 1, "federation", "needs a [broker] table"},
		{"vhost is a fleet's", "[broker]\n[federation]\nvhost = \"fleet-a\"\n", "x", 3, "federation.vhost", "also fleet \"a\"'s"},
		{"vhost slash", "[broker]\n[federation]\nvhost = \"/\"\n", "x", 3, "federation.vhost", "shared default vhost"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, _ := loadFed(t, tc.body+fleetA, tc.hostname)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want an *Error, got %v", err)
			}
			if e.Field != tc.field || e.Line != tc.line || !strings.Contains(e.Msg, tc.want) {
				t.Fatalf("got %v; want %s on line %d containing %q", err, tc.field, tc.line, tc.want)
			}
		})
	}
	// A fleet whose broker user is the federation's.
	_, err, _ := loadFed(t, "[broker]\n[federation]\nhost = \"alpha\"\n"+fleetA+"broker_user = \"federation-alpha\"\n", "x")
	if err == nil || !strings.Contains(err.Error(), "fleets.a.broker_user") || !strings.Contains(err.Error(), "federation's user") {
		t.Fatalf("broker user clash: %v", err)
	}
}

// TestExampleFederation: the example's [federation] table loads and sets
// every key.
func TestExampleFederation(t *testing.T) {
	src, err := os.ReadFile("../fleets.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	writeFile(t, home, "src/fleetd/fleetd.conf.tmpl", "name = \"{{.Name}}\"\n")
	p := writeFile(t, home, "fleets.toml", string(src))
	e := fakeEnv(map[string]string{"HOME": home})
	e.hostname = func() (string, error) { return "not_used", nil }
	c, err := load(p, e)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Federation
	if f == nil || f.Host != "alpha" || len(f.Trust) != 2 || f.KeyFile != filepath.Join(home, ".local/state/fleetmgr/federation.key") {
		t.Fatalf("example federation: %+v", f)
	}
	if p, _ := f.Peers.ByKey(mustKey(t, f.Trust[1])); p.Host != "build2" || p.Caps != identity.CapRead {
		t.Fatalf("build2: %+v", p)
	}
	for _, key := range []string{"host", "vhost", "heartbeat", "control_timeout", "trust", "key_file"} {
		if !strings.Contains(string(src), "\n"+key+" = ") {
			t.Errorf("example does not set %s", key)
		}
	}
}

func mustKey(t *testing.T, line string) ed25519.PublicKey {
	p, err := identity.ParseTrustLine(line)
	if err != nil {
		t.Fatal(err)
	}
	return p.Key
}
