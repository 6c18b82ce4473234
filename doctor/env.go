package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// checkEnvNames says, per fleet, which environment variables its processes
// will get and from where (allowlist, pass_env, env, contract): names only,
// never values (docs/SECURITY.md "What a fleet's processes get"). A pass_env
// name this environment does not set is a warning: nothing is passed for it.
func checkEnvNames(_ context.Context, e *checkEnv) []Finding {
	out := []Finding{{Check: "env", Severity: SevInfo, Subject: e.cfg.Path,
		Message: "what each fleet's processes get from fleetmgr's environment, by name (never values), computed from this process's environment; a running `fleetmgr serve` starts fleets with its own",
		Fix:     "export pass_env variables (and the broker administrator's) where `fleetmgr serve` runs too"}}
	for _, n := range e.cfg.Names() {
		plan, err := e.m.EnvPlan(n)
		if err != nil {
			out = append(out, Finding{Check: "env", Severity: SevError, Subject: n, Message: err.Error()})
			continue
		}
		lead := "nothing more"
		if len(plan.Lead) > 0 {
			lead = bySource(plan.Lead, nil)
		}
		out = append(out, Finding{Check: "env", Severity: SevOK, Subject: n, Env: plan,
			Message: fmt.Sprintf("herdr server and every pane get %s; fleetd also gets %s; the lead's tab also gets %s",
				bySource(plan.Herdr, nil), bySource(plan.Fleetd, plan.Herdr), lead)})
		for _, name := range plan.MissingPassEnv {
			out = append(out, Finding{Check: "env", Severity: SevWarn, Subject: n,
				Message: fmt.Sprintf("pass_env names %s, which is not set in this environment: the fleet's processes will not get it", name),
				Fix:     fmt.Sprintf("export %s before `fleetmgr start %s` / `fleetmgr serve`, or remove it from pass_env", name, n)})
		}
	}
	return out
}

// bySource renders vars not in except as "allowlist (HOME, PATH), pass_env
// (GH_TOKEN)", sources in the order they apply; "nothing" when empty.
func bySource(vars, except []lifecycle.EnvVar) string {
	skip := map[string]bool{}
	for _, v := range except {
		skip[v.Name] = true
	}
	groups := map[lifecycle.EnvSource][]string{}
	for _, v := range vars {
		if !skip[v.Name] {
			groups[v.Source] = append(groups[v.Source], v.Name)
		}
	}
	var parts []string
	for _, s := range []lifecycle.EnvSource{lifecycle.FromAllowlist, lifecycle.FromPassEnv, lifecycle.FromEnv, lifecycle.FromContract} {
		if names := groups[s]; len(names) > 0 {
			parts = append(parts, fmt.Sprintf("%s (%s)", s, strings.Join(names, ", ")))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
