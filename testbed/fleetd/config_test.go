package fleetd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigEnvOnly(t *testing.T) {
	cfg, err := LoadConfig("", envMap(map[string]string{
		EnvName: "kb", EnvPort: "8765", EnvHerdrSocket: "/s/herdr.sock", EnvWorktreeRoot: "/w",
		EnvProjectDir: "/p", EnvHerdrSession: "kb", EnvEvents: "/e",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Name: "kb", Port: 8765, HerdrSocket: "/s/herdr.sock", HerdrSession: "kb", WorktreeRoot: "/w",
		ProjectDir: "/p", LeadLaunch: true, LeadTab: "lead", BrokerURIEnv: EnvBrokerURI, EventsFile: "/e"}
	if cfg != want {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
}

// TestLoadConfigBrokerURI: the URI comes from the variable
// FLEET_BROKER_URI_ENV names, else FLEET_BROKER_URI.
func TestLoadConfigBrokerURI(t *testing.T) {
	base := map[string]string{EnvName: "kb", EnvPort: "8765", EnvHerdrSocket: "/s"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		env           map[string]string
		wantURI, from string
	}{
		{with(), "", EnvBrokerURI},
		{with(EnvBrokerURI, "amqp://a"), "amqp://a", EnvBrokerURI},
		{with(EnvBrokerURIEnv, "MY_URI", "MY_URI", "amqp://b", EnvBrokerURI, "amqp://a"), "amqp://b", "MY_URI"},
		{with(EnvBrokerURIEnv, "MY_URI", EnvBrokerURI, "amqp://a"), "", "MY_URI"},
	}
	for i, c := range cases {
		cfg, err := LoadConfig("", envMap(c.env))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.BrokerURI != c.wantURI || cfg.BrokerURIEnv != c.from {
			t.Errorf("case %d: URI %q from %s, want %q from %s", i, cfg.BrokerURI, cfg.BrokerURIEnv, c.wantURI, c.from)
		}
	}
}

func TestLoadConfigFileAndEnvOverlay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleetd.toml")
	body := `name = "file-name"
port = 9000
herdr_socket = "/file.sock"
worktree_root = "/file-wt"
project_dir = "/file-proj"
lead_tab = "boss"
lead_launch = false
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path, envMap(map[string]string{EnvName: "env-name", EnvPort: "9001"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "env-name" || cfg.Port != 9001 {
		t.Fatalf("env did not win: %+v", cfg)
	}
	if cfg.HerdrSocket != "/file.sock" || cfg.WorktreeRoot != "/file-wt" || cfg.ProjectDir != "/file-proj" || cfg.LeadTab != "boss" || cfg.LeadLaunch {
		t.Fatalf("file values lost: %+v", cfg)
	}
	cfg, err = LoadConfig(path, envMap(map[string]string{EnvLeadLaunch: "1", EnvLeadTab: "chief"}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.LeadLaunch || cfg.LeadTab != "chief" {
		t.Fatalf("env lead settings did not win: %+v", cfg)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	base := map[string]string{EnvName: "kb", EnvPort: "8765", EnvHerdrSocket: "/s"}
	with := func(k, v string) func(string) string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return envMap(m)
	}
	for _, tc := range []struct {
		getenv func(string) string
		want   string
	}{
		{with(EnvName, ""), EnvName},
		{with(EnvPort, ""), EnvPort},
		{with(EnvPort, "x"), EnvPort},
		{with(EnvPort, "70000"), EnvPort},
		{with(EnvHerdrSocket, ""), EnvHerdrSocket},
		{with(EnvLeadLaunch, "maybe"), EnvLeadLaunch},
	} {
		_, err := LoadConfig("", tc.getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error naming %s, got %v", tc.want, err)
		}
	}
	if cfg, err := LoadConfig("", with(EnvLeadLaunch, "0")); err != nil || cfg.LeadLaunch {
		t.Errorf("FLEET_LEAD_LAUNCH=0: %+v %v", cfg, err)
	}

	path := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(path, []byte("name = \"kb\"\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path, envMap(base))
	if err == nil || !strings.Contains(err.Error(), "bogus") || !strings.Contains(err.Error(), path) {
		t.Fatalf("unknown key: %v", err)
	}
	_, err = LoadConfig(filepath.Join(t.TempDir(), "missing.toml"), envMap(base))
	if err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("missing file: %v", err)
	}
}
