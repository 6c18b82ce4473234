package lifecycle

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fleetmgr/fleetmgr/registry"
)

// What a fleet's processes get of fleetmgr's environment
// (docs/SECURITY.md "What a fleet's processes get"). fleetmgr's own
// environment holds the broker administrator's credentials and, later,
// federation keys; a fleet's processes run agents, and herdr hands its
// server's environment on to every pane (until 0.9.2, herdr issue #4104),
// so nothing reaches a child unless it is named here:
//
//   - AllowedEnv / AllowedEnvPrefixes: the login basics, from fleetmgr's
//     environment as they are;
//   - pass_env ([manager] and the fleet's): further names, as they are;
//   - the fleet's [fleets.NAME.env]: fleetd and the lead only;
//   - the contract variables (contractEnv, and the broker URI in
//     broker_uri_env): fleetd only.
//
// Later layers win. Whatever the configuration says, HERDR_* (a manager
// started in a pane must not leak that pane's identity) and the manager's
// secrets (registry.SecretEnv) are never passed.

// AllowedEnv are the variables every fleet child (herdr server, fleetd,
// their log pipes, and through herdr every pane, the lead's included) gets
// from fleetmgr's environment when they are set there: what a login
// session has and a tool expects to find.
var AllowedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL",
	"LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
	"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
}

// AllowedEnvPrefixes are name prefixes passed like AllowedEnv: the locale
// categories (LC_ALL, LC_CTYPE, …).
var AllowedEnvPrefixes = []string{"LC_"}

// allowed reports whether name is on the allowlist.
func allowed(name string) bool {
	if slices.Contains(AllowedEnv, name) {
		return true
	}
	for _, p := range AllowedEnvPrefixes {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}

// EnvSource says where a child's variable comes from.
type EnvSource string

// The sources of a child's variables, weakest first.
const (
	FromAllowlist EnvSource = "allowlist" // AllowedEnv, from fleetmgr's environment
	FromPassEnv   EnvSource = "pass_env"  // [manager] or [fleets.NAME] pass_env, from fleetmgr's environment
	FromEnv       EnvSource = "env"       // [fleets.NAME.env]
	FromContract  EnvSource = "contract"  // FLEET_* and the broker URI variable, set by fleetmgr
)

// EnvVar is one variable of a child's environment: its name and where it
// comes from. It never carries the value.
type EnvVar struct {
	Name   string    `json:"name"`
	Source EnvSource `json:"source"`
}

// EnvPlan is what a fleet's processes will get, by name and source, from
// the Manager's environment and the configuration. Values are left out on
// purpose: it is for `fleetmgr check`.
type EnvPlan struct {
	// Herdr is the herdr server's environment (and its log pipe's); every
	// pane inherits it, herdr adding its own HERDR_*, TERM and COLORTERM.
	Herdr []EnvVar `json:"herdr"`
	// Fleetd is fleetd's environment (and its log pipe's).
	Fleetd []EnvVar `json:"fleetd"`
	// Lead is what the lead's tab is created with on top of Herdr.
	Lead []EnvVar `json:"lead"`
	// MissingPassEnv lists pass_env names not set in the Manager's
	// environment (nothing is passed for them).
	MissingPassEnv []string `json:"missing_pass_env,omitempty"`
}

// childEnv is one child's environment being built: values and sources.
type childEnv struct {
	vals map[string]string
	src  map[string]EnvSource
	drop func(name string) bool // never set these
}

func (c *childEnv) set(name, value string, src EnvSource) {
	if c.drop(name) {
		return
	}
	c.vals[name], c.src[name] = value, src
}

func (c *childEnv) layer(vars map[string]string, src EnvSource) {
	for k, v := range vars {
		c.set(k, v, src)
	}
}

// environ renders the environment as sorted KEY=value entries.
func (c *childEnv) environ() []string {
	out := make([]string, 0, len(c.vals))
	for k, v := range c.vals {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// vars lists the names and sources, sorted by name.
func (c *childEnv) vars() []EnvVar {
	out := make([]EnvVar, 0, len(c.src))
	for k, s := range c.src {
		out = append(out, EnvVar{Name: k, Source: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// forbidden reports the names no child gets whatever the configuration:
// HERDR_* and the manager's secrets.
func (m *Manager) forbidden(name string) bool {
	return strings.HasPrefix(name, "HERDR_") || registry.SecretEnv(m.Config().Broker, name) != ""
}

// baseEnv is what every child of fleet f starts from: the allowlisted
// variables of the Manager's environment, then f's pass_env names
// ([manager]'s and the fleet's) as they are there. missing lists pass_env
// names the environment does not set.
func (m *Manager) baseEnv(f *registry.Fleet) (c *childEnv, missing []string) {
	c = &childEnv{vals: map[string]string{}, src: map[string]EnvSource{}, drop: m.forbidden}
	for _, kv := range m.environ {
		if k, v, ok := strings.Cut(kv, "="); ok && allowed(k) {
			c.set(k, v, FromAllowlist)
		}
	}
	for _, n := range slices.Concat(m.Config().Manager.PassEnv, f.PassEnv) {
		if v, ok := m.lookupEnv(n); ok {
			c.set(n, v, FromPassEnv)
		} else if !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return c, missing
}

// lookupEnv is os.LookupEnv on the Manager's environment (the last entry
// wins, as getenv).
func (m *Manager) lookupEnv(k string) (string, bool) {
	for i := len(m.environ) - 1; i >= 0; i-- {
		if kk, v, ok := strings.Cut(m.environ[i], "="); ok && kk == k {
			return v, true
		}
	}
	return "", false
}

// herdrEnv is the herdr server's environment: baseEnv only. Not the
// fleet's env table nor the contract: every pane inherits the server's
// environment, and a pane carrying FLEET_NAME and FLEET_HERDR_SOCKET would
// be taken for a fleetd by discovery (discover.go). Every value comes from
// the Manager's own environment, so herdr resolves its config dir (and the
// session's socket) exactly as HerdrSocket does.
func (m *Manager) herdrEnv(f *registry.Fleet) *childEnv {
	c, _ := m.baseEnv(f)
	return c
}

// fleetdEnv is fleetd's environment: baseEnv, the fleet's env table, then
// the contract variables and brokerEnv's broker URI.
func (m *Manager) fleetdEnv(f *registry.Fleet, d registry.TemplateData, benv map[string]string) *childEnv {
	c, _ := m.baseEnv(f)
	c.layer(f.Env, FromEnv)
	c.layer(contractEnv(f, d), FromContract)
	c.layer(benv, FromContract)
	return c
}

// leadEnv is the env the lead's tab is created with (herdr applies it over
// the server's environment, then its own HERDR_* variables): the fleet's
// env table, minus anything forbidden.
func (m *Manager) leadEnv(f *registry.Fleet) map[string]string {
	out := map[string]string{}
	for k, v := range f.Env {
		if !m.forbidden(k) {
			out[k] = v
		}
	}
	return out
}

// EnvPlan says, by name and source, what fleet name's processes will get
// from this Manager's environment (the CLI's for a start it makes itself,
// the daemon's for one made through `fleetmgr serve`). The broker URI
// variable is listed whether or not a broker password exists yet.
func (m *Manager) EnvPlan(name string) (*EnvPlan, error) {
	f, err := m.Config().Fleet(name)
	if err != nil {
		return nil, err
	}
	h, missing := m.baseEnv(f)
	benv := map[string]string{EnvBrokerURIEnv: f.BrokerURIEnv, f.BrokerURIEnv: ""}
	fd := m.fleetdEnv(f, m.templateData(f), benv)
	lead := make([]EnvVar, 0, len(f.Env))
	for _, k := range sortedKeys(m.leadEnv(f)) {
		lead = append(lead, EnvVar{Name: k, Source: FromEnv})
	}
	return &EnvPlan{Herdr: h.vars(), Fleetd: fd.vars(), Lead: lead, MissingPassEnv: missing}, nil
}

// sortedKeys returns m's keys, sorted.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// contractEnv gives the fleetd contract variables (docs/ARCHITECTURE.md
// "Lifecycle of one fleet"). FLEET_LEAD_LAUNCH is always 0: fleetmgr owns
// lead launch.
func contractEnv(f *registry.Fleet, d registry.TemplateData) map[string]string {
	return map[string]string{
		"FLEET_NAME":          f.Name,
		"FLEET_PORT":          strconv.Itoa(d.Port),
		"FLEET_HERDR_SESSION": d.HerdrSession,
		"FLEET_HERDR_SOCKET":  d.HerdrSocket,
		"FLEET_WORKTREE_ROOT": d.WorktreeRoot,
		"FLEET_PROJECT_DIR":   d.ProjectDir,
		"FLEET_LEAD_LAUNCH":   "0",
		"FLEET_LEAD_TAB":      f.LeadTab,
	}
}

// mergeEnv returns the allowlisted variables of base (never HERDR_*) with
// each layer's variables set over them, later layers winning, sorted. It
// is the environment a child of a Manager without configuration-dependent
// layers would get; Manager methods use herdrEnv and fleetdEnv.
func mergeEnv(base []string, layers ...map[string]string) []string {
	c := &childEnv{vals: map[string]string{}, src: map[string]EnvSource{},
		drop: func(k string) bool { return strings.HasPrefix(k, "HERDR_") }}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && allowed(k) {
			c.set(k, v, FromAllowlist)
		}
	}
	for _, l := range layers {
		c.layer(l, FromContract)
	}
	return c.environ()
}
