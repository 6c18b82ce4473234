package registry

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestPassEnvDecodes: pass_env in [manager] and per fleet, duplicates
// dropped, absent keys nil.
func TestPassEnvDecodes(t *testing.T) {
	body := "[manager]\npass_env = [\"GH_TOKEN\", \"SSH_AUTH_SOCK\", \"GH_TOKEN\"]\n" + fleetA +
		"pass_env = [\"ANTHROPIC_API_KEY\"]\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\n"
	c, err, _ := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"GH_TOKEN", "SSH_AUTH_SOCK"}; !reflect.DeepEqual(c.Manager.PassEnv, want) {
		t.Errorf("manager pass_env %q, want %q", c.Manager.PassEnv, want)
	}
	if want := []string{"ANTHROPIC_API_KEY"}; !reflect.DeepEqual(c.Fleets["a"].PassEnv, want) {
		t.Errorf("fleet a pass_env %q, want %q", c.Fleets["a"].PassEnv, want)
	}
	if c.Fleets["b"].PassEnv != nil {
		t.Errorf("fleet b pass_env %q, want nil", c.Fleets["b"].PassEnv)
	}
}

// TestEnvRefusesManagerSecrets: the broker administrator's variables (the
// configured names and the defaults, whatever [broker] says), FLEETMGR_*,
// HERDR_* and FLEET_* are refused in pass_env and env, each on its own
// line, without the value.
func TestEnvRefusesManagerSecrets(t *testing.T) {
	broker := "[broker]\nadmin_user_env = \"RMQ_ADMIN\"\nadmin_password_env = \"RMQ_ADMIN_PW\"\n"
	cases := []struct {
		name, body, at, field, msg string
	}{
		{"manager pass_env default password", "[manager]\npass_env = [\n  \"OK_VAR\",\n  \"FLEETMGR_BROKER_PASSWORD\",\n]\n" + fleetA,
			"  \"FLEETMGR_BROKER_PASSWORD\"", "manager.pass_env[1]", "broker administrator's password"},
		{"manager pass_env configured user", broker + "[manager]\npass_env = [\"RMQ_ADMIN\"]\n" + fleetA,
			"pass_env", "manager.pass_env[0]", "([broker] admin_user_env)"},
		{"fleet pass_env configured password", broker + fleetA + "pass_env = [\"X\",\n \"RMQ_ADMIN_PW\"]\n",
			" \"RMQ_ADMIN_PW\"]", "fleets.a.pass_env[1]", "broker administrator's password ([broker] admin_password_env)"},
		{"default name refused though broker names others", broker + fleetA + "pass_env = [\"FLEETMGR_BROKER_USER\"]\n",
			"pass_env", "fleets.a.pass_env[0]", "default name of [broker] admin_user_env"},
		{"default name refused without broker", fleetA + "[fleets.a.env]\nFLEETMGR_BROKER_PASSWORD = \"s3cret-value\"\n",
			"FLEETMGR_BROKER_PASSWORD =", "fleets.a.env.FLEETMGR_BROKER_PASSWORD", "never reaches a fleet"},
		{"env configured password", broker + fleetA + "[fleets.a.env]\nRMQ_ADMIN_PW = \"s3cret-value\"\n",
			"RMQ_ADMIN_PW =", "fleets.a.env.RMQ_ADMIN_PW", "([broker] admin_password_env)"},
		{"federation key in pass_env", "[manager]\npass_env = [\"FLEETMGR_FEDERATION_KEY\"]\n" + fleetA,
			"pass_env", "manager.pass_env[0]", "FLEETMGR_*"},
		{"any FLEETMGR_ in env", fleetA + "[fleets.a.env]\nfleetmgr_token = \"s3cret-value\"\n",
			"fleetmgr_token", "fleets.a.env.fleetmgr_token", "FLEETMGR_*"},
		{"HERDR_ in pass_env", fleetA + "pass_env = [\"HERDR_SOCKET_PATH\"]\n", "pass_env", "fleets.a.pass_env[0]", "HERDR_*"},
		{"FLEET_ in pass_env", "[manager]\npass_env = [\"FLEET_NAME\"]\n" + fleetA, "pass_env", "manager.pass_env[0]", "FLEET_*"},
		{"bad name in pass_env", fleetA + "pass_env = [\"A-B\"]\n", "pass_env", "fleets.a.pass_env[0]", "not an environment variable name"},
		{"pass_env not a list", fleetA + "pass_env = \"GH_TOKEN\"\n", "pass_env", "fleets.a.pass_env", "expected array of strings"},
		{"broker_uri_env a secret name", fleetA + "broker_uri_env = \"FLEETMGR_BROKER_PASSWORD\"\n", "broker_uri_env", "fleets.a.broker_uri_env", "broker administrator's password"},
		{"broker_uri_env in pass_env", fleetA + "broker_uri_env = \"KB_URI\"\npass_env = [\"KB_URI\"]\n", "pass_env", "fleets.a.pass_env", "broker_uri_env"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, _ := loadBody(t, tc.body)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			want := fmt.Sprintf("fleets.toml:%d: %s: ", lineOf(t, tc.body, tc.at), tc.field)
			found := false
			for _, l := range strings.Split(err.Error(), "\n") {
				found = found || strings.Contains(l, want) && strings.Contains(l, tc.msg)
			}
			if !found {
				t.Fatalf("no error line with %q and %q:\n%v", want, tc.msg, err)
			}
			if strings.Contains(err.Error(), "s3cret-value") {
				t.Fatalf("the error repeats a value: %v", err)
			}
		})
	}
}

// TestEnvAllowsOrdinaryNames: a name that merely contains BROKER or
// PASSWORD is the operator's business.
func TestEnvAllowsOrdinaryNames(t *testing.T) {
	body := "[broker]\n[manager]\npass_env = [\"MY_BROKER_PASSWORD\", \"GH_TOKEN\"]\n" + fleetA + "[fleets.a.env]\nDB_PASSWORD = \"x\"\n"
	c, err, _ := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.Fleets["a"].Env["DB_PASSWORD"] != "x" || len(c.Manager.PassEnv) != 2 {
		t.Fatalf("env %v pass_env %v", c.Fleets["a"].Env, c.Manager.PassEnv)
	}
}

// TestHerdrLabels: [manager] herdr_labels defaults to true, false turns it
// off, and a non-boolean names the key.
func TestHerdrLabels(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{{fleetA, true}, {"[manager]\nherdr_labels = false\n" + fleetA, false}, {"[manager]\nherdr_labels = true\n" + fleetA, true}} {
		cfg, err, _ := loadBody(t, c.body)
		if err != nil {
			t.Fatalf("%q: %v", c.body, err)
		}
		if cfg.Manager.HerdrLabels != c.want {
			t.Errorf("%q: herdr_labels = %v, want %v", c.body, cfg.Manager.HerdrLabels, c.want)
		}
	}
	if _, err, _ := loadBody(t, "[manager]\nherdr_labels = \"no\"\n"+fleetA); err == nil || !strings.Contains(err.Error(), "manager.herdr_labels") {
		t.Fatalf("string herdr_labels: %v", err)
	}
}
