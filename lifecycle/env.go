package lifecycle

import (
	"sort"
	"strconv"
	"strings"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// contractEnv gives the fleetd contract variables (DESIGN.md "Contract with
// fleetd"). FLEET_LEAD_LAUNCH is always 0: fleetmgr owns lead launch.
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

// mergeEnv returns base with every HERDR_* variable removed (so a manager
// started in a pane never leaks that pane's identity) and then each layer's
// variables set, later layers winning. The result is sorted for stable logs.
func mergeEnv(base []string, layers ...map[string]string) []string {
	m := map[string]string{}
	for _, kv := range herdr.ScrubEnv(base) {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			m[k] = v
		}
	}
	for _, l := range layers {
		for k, v := range l {
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
