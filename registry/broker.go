package registry

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleetmgr/fleetmgr/broker"
)

// Defaults of the [broker] keys and of the per-fleet broker keys.
const (
	DefaultManagementURL    = "http://127.0.0.1:15672"   // [broker] management_url
	DefaultAMQPURL          = "amqp://127.0.0.1:5672"    // [broker] amqp_url
	DefaultAdminUserEnv     = "FLEETMGR_BROKER_USER"     // [broker] admin_user_env
	DefaultAdminPasswordEnv = "FLEETMGR_BROKER_PASSWORD" // [broker] admin_password_env
	// DefaultVhostPrefix + NAME is a fleet's default vhost, and also its
	// default broker user.
	DefaultVhostPrefix = "fleet-"
)

// Broker is the [broker] table: the AMQP broker (RabbitMQ or LavinMQ) in
// which every fleet gets a vhost of its own. Config.Broker is nil when the
// file has no [broker] table; fleets then start without a vhost step.
type Broker struct {
	// ManagementURL is the management HTTP API base, http(s)://host:port
	// (a path prefix is allowed; credentials are not). Default
	// DefaultManagementURL.
	ManagementURL string
	// AMQPURL is amqp(s)://host:port: no credentials (each fleet gets its
	// own user) and no vhost (each fleet has its own). Default
	// DefaultAMQPURL.
	AMQPURL string
	// AdminUserEnv and AdminPasswordEnv are the NAMES of the environment
	// variables holding the administrator credentials fleetmgr uses on the
	// management API. The values never appear in fleets.toml. Defaults
	// DefaultAdminUserEnv and DefaultAdminPasswordEnv.
	AdminUserEnv, AdminPasswordEnv string
	// Line is the line of the [broker] header.
	Line int
}

// secretKeys are keys an operator might write to put a credential in the
// file; each is refused with a pointer to the *_env key to use instead.
var secretKeys = map[string]string{
	"admin_user": "admin_user_env", "admin_password": "admin_password_env", "user": "admin_user_env",
	"username": "admin_user_env", "password": "admin_password_env", "admin_pass": "admin_password_env",
	"pass": "admin_password_env",
}

// brokerTable decodes [broker] (v, at path) into c.Broker.
func (ld *loader) brokerTable(c *Config, path []string, v any) {
	t, ok := ld.table(path, v)
	if !ok {
		return
	}
	b := &Broker{ManagementURL: DefaultManagementURL, AMQPURL: DefaultAMQPURL,
		AdminUserEnv: DefaultAdminUserEnv, AdminPasswordEnv: DefaultAdminPasswordEnv}
	b.Line = ld.loc.line(path)
	url := func(dst *string, parse func(string) error) func([]string, any) {
		return func(p []string, v any) {
			if s, ok := ld.nonEmpty(p, v); ok {
				*dst = strings.TrimSuffix(s, "/")
				if err := parse(s); err != nil {
					ld.fail(p, "%v", err)
				}
			}
		}
	}
	envName := func(dst *string, example string) func([]string, any) {
		return func(p []string, v any) {
			s, ok := v.(string)
			if !ok {
				// Not describe(v): the value may be a secret.
				ld.fail(p, "expected the name of an environment variable (a string), got a %s", typeName(v))
				return
			}
			if !envVarNameLike(s) {
				// The value is not echoed: it may be the secret itself.
				ld.fail(p, "this does not look like an environment variable NAME (upper-case letters, digits and '_', e.g. %q); if it is the credential itself, remove it from the file (and change it, it has been written down), export it as an environment variable and name that variable here", example)
				return
			}
			*dst = s
		}
	}
	fields := []field{
		{key: "management_url", set: url(&b.ManagementURL, func(s string) error { _, err := broker.ParseManagementURL(s); return err })},
		{key: "amqp_url", set: url(&b.AMQPURL, func(s string) error { _, err := broker.ParseAMQPURL(s); return err })},
		{key: "admin_user_env", set: envName(&b.AdminUserEnv, DefaultAdminUserEnv)},
		{key: "admin_password_env", set: envName(&b.AdminPasswordEnv, DefaultAdminPasswordEnv)},
	}
	for _, k := range slices.Sorted(maps.Keys(secretKeys)) {
		use := secretKeys[k]
		example := map[string]string{"admin_user_env": DefaultAdminUserEnv, "admin_password_env": DefaultAdminPasswordEnv}[use]
		fields = append(fields, field{key: k, shared: true, set: func(p []string, _ any) {
			ld.fail(p, "secrets never go in fleets.toml: export the value in an environment variable and write its NAME in %s (e.g. %s = %q)", use, use, example)
		}})
	}
	ld.decodeTable(path, t, fields)
	c.Broker = b
	ld.secrets = secretEnvNames(b)
}

// envVarNameLike reports whether s looks like an environment variable
// name as operators write them: [A-Z_][A-Z0-9_]*, at most 128 bytes. It is
// stricter than validEnvName on purpose: a lower-case or mixed string in
// an *_env key is more likely a pasted secret than a variable name.
func envVarNameLike(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// brokerURIEnvField is a fleet's broker_uri_env key: the variable that
// carries the broker URI to fleetd. Decoded first (pass_env and env refuse
// its name); it must be a valid name, not HERDR_*, not one of the other
// FLEET_* contract variables, and no secret of the manager's (checked on
// the default too).
func (ld *loader) brokerURIEnvField(f *Fleet) field {
	secret := func(p []string) {
		if why := ld.secretEnv(f.BrokerURIEnv); why != "" {
			ld.fail(p, "%s is %s; name a variable of the fleet's own, e.g. %s", f.BrokerURIEnv, why, DefaultBrokerURIEnv)
		}
	}
	return field{key: "broker_uri_env", first: true, unset: secret, set: func(p []string, v any) {
		if s, ok := ld.str(p, v); ok {
			f.BrokerURIEnv = s
			if !validEnvName(s) {
				ld.fail(p, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", s)
			} else if hasPrefixFold(s, "HERDR_") {
				ld.fail(p, "%q: HERDR_* variables are removed from every fleet's environment", s)
			}
		}
		secret(p)
		if f.BrokerURIEnv != DefaultBrokerURIEnv && hasPrefixFold(f.BrokerURIEnv, "FLEET_") {
			ld.fail(p, "%q: FLEET_* names are fleetmgr's contract variables (FLEET_NAME, FLEET_PORT, FLEET_BROKER_URI_ENV, ...); use %s or a name of your own", f.BrokerURIEnv, DefaultBrokerURIEnv)
		}
	}}
}

// brokerUserField is a fleet's broker_user key: the broker user fleetmgr
// creates for it (default DefaultVhostPrefix + NAME).
func (ld *loader) brokerUserField(f *Fleet) field {
	return field{key: "broker_user", set: func(p []string, v any) {
		s, ok := ld.nonEmpty(p, v)
		if !ok {
			return
		}
		f.BrokerUser = s
		switch {
		case len(s) > 255:
			ld.fail(p, "%d bytes, more than 255", len(s))
		case strings.ContainsFunc(s, isControl):
			ld.fail(p, "%q contains control characters", s)
		}
	}}
}

// validateBroker refuses two fleets sharing a broker user (a shared user
// would carry each fleet's permissions to the other's vhost), naming both
// fleets and the line of each, like the other isolation rules.
func (ld *loader) validateBroker(c *Config) {
	users := map[string]string{}
	for _, bn := range c.Names() {
		b := c.Fleets[bn]
		if b.BrokerUser == "" {
			continue
		}
		if an, ok := users[b.BrokerUser]; ok {
			ld.fail([]string{"fleets", bn, "broker_user"}, "broker user %q%s is also fleet %q's (%s); two fleets cannot share a broker user",
				b.BrokerUser, ld.dflt(bn, "broker_user", DefaultVhostPrefix+"<name>"), an, ld.whereKey(an, "broker_user"))
			continue
		}
		users[b.BrokerUser] = bn
	}
}

// String describes the broker for messages (no credentials: there are
// none in the file).
func (b *Broker) String() string {
	return fmt.Sprintf("management %s, AMQP %s", b.ManagementURL, b.AMQPURL)
}
