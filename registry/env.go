package registry

import "slices"

// ReservedEnvPrefix starts the names of fleetmgr's own variables (the broker
// administrator's credentials by default, federation keys, test settings).
// No fleet gets one: pass_env and env refuse them at load.
const ReservedEnvPrefix = "FLEETMGR_"

// secretEnvNames returns the environment variable names that must never
// reach a fleet, each with the reason: the broker administrator's, by the
// names b gives (b may be nil) and by the default names whatever b says.
// ReservedEnvPrefix covers fleetmgr's other variables.
func secretEnvNames(b *Broker) map[string]string {
	m := map[string]string{
		DefaultAdminUserEnv:     "the broker administrator's user (default name of [broker] admin_user_env)",
		DefaultAdminPasswordEnv: "the broker administrator's password (default name of [broker] admin_password_env)",
	}
	if b != nil {
		m[b.AdminUserEnv] = "the broker administrator's user ([broker] admin_user_env)"
		m[b.AdminPasswordEnv] = "the broker administrator's password ([broker] admin_password_env)"
	}
	return m
}

// SecretEnv says why the environment variable name may never reach a
// fleet's processes under the broker settings b (nil: no [broker]), ""
// when it may: the broker administrator's variables (the names b gives,
// and the default names whatever b says) and every FLEETMGR_* name
// (ReservedEnvPrefix, compared ignoring case). Load refuses such names in
// pass_env and env; lifecycle drops them from a child's environment
// whatever the configuration says.
func SecretEnv(b *Broker, name string) string {
	if why, ok := secretEnvNames(b)[name]; ok {
		return why
	}
	if hasPrefixFold(name, ReservedEnvPrefix) {
		return "one of fleetmgr's own variables (FLEETMGR_*: the broker administrator's, federation keys)"
	}
	return ""
}

// secretEnv is SecretEnv under the [broker] being loaded.
func (ld *loader) secretEnv(name string) string {
	if ld.secrets == nil {
		ld.secrets = secretEnvNames(nil)
	}
	if why, ok := ld.secrets[name]; ok {
		return why
	}
	return SecretEnv(nil, name)
}

// refuseSecret records the refusal of a secret variable name at path.
func (ld *loader) refuseSecret(path []string, name, why string) {
	ld.fail(path, "%s is %s: it never reaches a fleet's processes (a fleet gets a broker user of its own, in its broker_uri_env)", name, why)
}

// passEnvField is the pass_env key, accepted in [manager] (for every
// fleet) and in every [fleets.NAME] (for that fleet, f): the names of
// variables of fleetmgr's own environment that a fleet's processes get as
// they are (docs/SECURITY.md "What a fleet's processes get"). Each must be
// a valid name, not HERDR_* (removed from every child), not FLEET_*
// (fleetmgr's contract with fleetd), no secret of the manager (secretEnv)
// and not the fleet's broker_uri_env; duplicates are dropped. dst stays
// nil when the key is absent or not a list of strings.
func (ld *loader) passEnvField(dst *[]string, f *Fleet) field {
	return field{key: "pass_env", shared: true, set: func(p []string, v any) {
		names, ok := ld.strs(p, v)
		if !ok {
			return
		}
		out := make([]string, 0, len(names))
		for i, n := range names {
			ip := appendPath(p, indexPart(i))
			switch {
			case !validEnvName(n):
				ld.fail(ip, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", n)
			case hasPrefixFold(n, "HERDR_"):
				ld.fail(ip, "%s: HERDR_* variables are removed from every fleet process: they would tie it to a herdr pane or session other than its own", n)
			case hasPrefixFold(n, "FLEET_"):
				ld.fail(ip, "%s: FLEET_* variables are fleetmgr's contract with fleetd; it sets them itself", n)
			case ld.secretEnv(n) != "":
				ld.refuseSecret(ip, n, ld.secretEnv(n))
			case !slices.Contains(out, n):
				out = append(out, n)
			}
		}
		if f != nil {
			if i := slices.Index(out, f.BrokerURIEnv); i >= 0 {
				ld.fail(p, "%s is this fleet's broker_uri_env: fleetmgr sets it to the broker URI", f.BrokerURIEnv)
				out = slices.Delete(out, i, i+1)
			}
		}
		*dst = out
	}}
}
