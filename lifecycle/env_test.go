package lifecycle

import (
	"slices"
	"strings"
	"testing"
)

// TestChildEnvAllowlist: children get the login basics, pass_env and (for
// fleetd and the lead) the fleet's env; never the broker administrator's
// variables, other FLEETMGR_* or HERDR_* variables, nor anything unlisted.
func TestChildEnvAllowlist(t *testing.T) {
	cfg := loadCfg(t, "[broker]\nadmin_user_env = \"MQ_ADMIN\"\nadmin_password_env = \"MQ_ADMIN_PW\"\n",
		"pass_env = [\"KB_TOKEN\", \"UNSET_ONE\"]\n[fleets.kb.env]\nRUST_LOG = \"debug\"\n")
	cfg.Manager.PassEnv = []string{"GH_TOKEN"}
	environ := []string{"PATH=/usr/bin", "HOME=/home/op", "LC_ALL=C.UTF-8", "LC_=x", "TERM=xterm",
		"MQ_ADMIN=root", "MQ_ADMIN_PW=admin-secret", "FLEETMGR_BROKER_PASSWORD=default-secret",
		"FLEETMGR_FEDERATION_KEY=fed-secret", "SOME_TOKEN=unlisted-secret", "HERDR_PANE_ID=w1:p1",
		"GH_TOKEN=gh", "KB_TOKEN=kb", "RUST_LOG=trace"}
	m := New(cfg, quiet(), environ)
	f := cfg.Fleets["kb"]
	h := m.herdrEnv(f).environ()
	fd := m.fleetdEnv(f, m.templateData(f), map[string]string{EnvBrokerURIEnv: "FLEET_BROKER_URI", "FLEET_BROKER_URI": "amqp://u:p@h/v"}).environ()
	for _, want := range []string{"PATH=/usr/bin", "HOME=/home/op", "LC_ALL=C.UTF-8", "TERM=xterm", "GH_TOKEN=gh", "KB_TOKEN=kb"} {
		if !slices.Contains(h, want) || !slices.Contains(fd, want) {
			t.Errorf("%s missing: herdr %v fleetd %v", want, h, fd)
		}
	}
	for _, env := range [][]string{h, fd} {
		for _, kv := range env {
			for _, bad := range []string{"secret", "LC_=", "MQ_ADMIN", "UNSET_ONE"} {
				if strings.Contains(kv, bad) || strings.HasPrefix(kv, "HERDR_") {
					t.Errorf("child environment holds %q: %s", bad, kv)
				}
			}
		}
	}
	if slices.Contains(h, "RUST_LOG=debug") || slices.Contains(h, "RUST_LOG=trace") || slices.ContainsFunc(h, func(kv string) bool { return strings.HasPrefix(kv, "FLEET_") }) {
		t.Errorf("herdr got the fleet's env or the contract: %v", h)
	}
	for _, want := range []string{"RUST_LOG=debug", "FLEET_NAME=kb", "FLEET_LEAD_LAUNCH=0", "FLEET_BROKER_URI=amqp://u:p@h/v"} {
		if !slices.Contains(fd, want) {
			t.Errorf("fleetd lacks %s: %v", want, fd)
		}
	}
	if le := m.leadEnv(f); len(le) != 1 || le["RUST_LOG"] != "debug" {
		t.Errorf("lead env %v", le)
	}

	plan, err := m.EnvPlan("kb")
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]EnvSource{}
	for _, v := range plan.Fleetd {
		src[v.Name] = v.Source
	}
	for n, want := range map[string]EnvSource{"PATH": FromAllowlist, "GH_TOKEN": FromPassEnv, "KB_TOKEN": FromPassEnv,
		"RUST_LOG": FromEnv, "FLEET_PORT": FromContract, "FLEET_BROKER_URI": FromContract} {
		if src[n] != want {
			t.Errorf("plan: %s from %q, want %q (%v)", n, src[n], want, plan.Fleetd)
		}
	}
	if !slices.Equal(plan.MissingPassEnv, []string{"UNSET_ONE"}) {
		t.Errorf("missing pass_env %v", plan.MissingPassEnv)
	}
	if len(plan.Lead) != 1 || plan.Lead[0] != (EnvVar{"RUST_LOG", FromEnv}) {
		t.Errorf("plan lead %v", plan.Lead)
	}
}

// TestChildEnvDropsSecretsWhateverTheConfig: a configuration built in code
// (not loaded, so not checked) still cannot pass the manager's secrets.
func TestChildEnvDropsSecretsWhateverTheConfig(t *testing.T) {
	cfg := loadCfg(t, "", "")
	f := cfg.Fleets["kb"]
	cfg.Manager.PassEnv = []string{"FLEETMGR_BROKER_PASSWORD", "HERDR_SOCKET_PATH"}
	f.PassEnv = []string{"FLEETMGR_BROKER_USER"}
	f.Env["FLEETMGR_FEDERATION_KEY"] = "x"
	m := New(cfg, quiet(), []string{"FLEETMGR_BROKER_PASSWORD=pw", "FLEETMGR_BROKER_USER=u", "HERDR_SOCKET_PATH=/s"})
	all := append(m.herdrEnv(f).environ(), m.fleetdEnv(f, m.templateData(f), nil).environ()...)
	for _, kv := range all {
		if strings.HasPrefix(kv, "FLEETMGR_") || strings.HasPrefix(kv, "HERDR_") {
			t.Errorf("passed: %s", kv)
		}
	}
	if len(m.leadEnv(f)) != 0 {
		t.Errorf("lead env %v", m.leadEnv(f))
	}
}
