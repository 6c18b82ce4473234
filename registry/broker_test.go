package registry

import (
	"errors"
	"strings"
	"testing"
)

func TestBrokerAbsentAndDefaults(t *testing.T) {
	c, err, _ := loadBody(t, fleetA)
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker != nil {
		t.Fatalf("no [broker] table, yet Broker = %+v", c.Broker)
	}
	if f := c.Fleets["a"]; f.Vhost != "fleet-a" || f.BrokerUser != "fleet-a" || f.BrokerURIEnv != "FLEET_BROKER_URI" {
		t.Fatalf("fleet defaults: vhost %q user %q env %q", f.Vhost, f.BrokerUser, f.BrokerURIEnv)
	}
	c, err, _ = loadBody(t, "[broker]\n"+fleetA)
	if err != nil {
		t.Fatal(err)
	}
	want := Broker{ManagementURL: DefaultManagementURL, AMQPURL: DefaultAMQPURL, AdminUserEnv: DefaultAdminUserEnv, AdminPasswordEnv: DefaultAdminPasswordEnv, Line: 1}
	if c.Broker == nil || *c.Broker != want {
		t.Fatalf("Broker = %+v, want %+v", c.Broker, want)
	}
	c, err, _ = loadBody(t, "[broker]\nmanagement_url = \"https://mq.example:15671/\"\namqp_url = \"amqps://mq.example:5671\"\nadmin_user_env = \"MQ_USER\"\nadmin_password_env = \"MQ_PASS\"\n"+fleetA)
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Broker; b.ManagementURL != "https://mq.example:15671" || b.AMQPURL != "amqps://mq.example:5671" || b.AdminUserEnv != "MQ_USER" || b.AdminPasswordEnv != "MQ_PASS" {
		t.Fatalf("Broker = %+v", b)
	}
}

// TestBrokerRefusesSecrets: credentials never live in the file, and the
// refusal never echoes a value that may be one.
func TestBrokerRefusesSecrets(t *testing.T) {
	cases := []struct{ name, body, field, want string }{
		{"password key", "[broker]\npassword = \"hunter2-secret\"\n", "broker.password", "admin_password_env"},
		{"admin_password key", "[broker]\nadmin_password = \"hunter2-secret\"\n", "broker.admin_password", "secrets never go in fleets.toml"},
		{"value in env key", "[broker]\nadmin_password_env = \"hunter2-secret\"\n", "broker.admin_password_env", "does not look like an environment variable NAME"},
		{"number in env key", "[broker]\nadmin_password_env = 12345678\n", "broker.admin_password_env", "a string"},
		{"creds in management url", "[broker]\nmanagement_url = \"http://admin:hunter2-secret@h:15672\"\n", "broker.management_url", "must not carry credentials"},
		{"creds in amqp url", "[broker]\namqp_url = \"amqp://admin:hunter2-secret@h:5672\"\n", "broker.amqp_url", "must not carry credentials"},
		{"vhost in amqp url", "[broker]\namqp_url = \"amqp://h:5672/kb\"\n", "broker.amqp_url", "must not name a vhost"},
		{"unknown key", "[broker]\nmanagment_url = \"http://h\"\n", "broker.managment_url", "did you mean management_url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, _ := loadBody(t, tc.body+fleetA)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want an *Error, got %v", err)
			}
			if e.Field != tc.field || e.Line != 2 || !strings.Contains(e.Msg, tc.want) {
				t.Fatalf("got %v; want field %s on line 2 containing %q", err, tc.field, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "12345678") {
				t.Fatalf("the error repeats the secret: %v", err)
			}
		})
	}
}

// TestBrokerIsolation: a shared vhost (explicit or by default) and a shared
// broker user are refused, naming both fleets and the line of each.
func TestBrokerIsolation(t *testing.T) {
	body := "[broker]\n" + // 1
		"[fleets.kb]\n" + // 2
		"project = \"/kb\"\n" + // 3
		"command = [\"f\"]\n" + // 4
		"vhost = \"shared\"\n" + // 5
		"[fleets.docs]\n" + // 6
		"project = \"/docs\"\n" + // 7
		"command = [\"f\"]\n" + // 8
		"vhost = \"shared\"\n" + // 9
		"broker_user = \"fleet-kb\"\n" // 10
	_, err, dir := loadBody(t, body)
	if err == nil {
		t.Fatal("shared vhost and user accepted")
	}
	msg := err.Error()
	file := dir + "/fleets.toml"
	// docs sorts first, so kb (line 5) is reported against docs (line 9).
	if !strings.Contains(msg, file+`:5: fleets.kb.vhost: vhost "shared" is also fleet "docs"'s (`+file+`:9)`) {
		t.Errorf("shared vhost not reported with both lines:\n%s", msg)
	}
	if !strings.Contains(msg, `fleets.kb.broker_user: broker user "fleet-kb" (default: fleet-<name>) is also fleet "docs"'s (`+file+`:10)`) {
		t.Errorf("shared broker user not reported:\n%s", msg)
	}

	// broker_uri_env may not take over another contract variable.
	_, err, _ = loadBody(t, fleetA+"broker_uri_env = \"FLEET_BROKER_URI_ENV\"\n")
	if err == nil || !strings.Contains(err.Error(), "fleets.a.broker_uri_env") || !strings.Contains(err.Error(), "contract") {
		t.Errorf("broker_uri_env = FLEET_BROKER_URI_ENV: %v", err)
	}
	if _, err, _ := loadBody(t, fleetA+"broker_uri_env = \"KB_AMQP_URI\"\n"); err != nil {
		t.Errorf("broker_uri_env = KB_AMQP_URI: %v", err)
	}

	// A default vhost clashing with an explicit one.
	_, err, _ = loadBody(t, fleetA+"[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nvhost = \"fleet-a\"\n")
	if err == nil || !strings.Contains(err.Error(), `vhost "fleet-a"`) || !strings.Contains(err.Error(), "default") {
		t.Errorf("default vhost clash: %v", err)
	}
}
