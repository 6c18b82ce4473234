package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmgr/fleetmgr/proxy"
)

// checkDrift reports, from each fleet's last catalogue cached in the state
// dir (docs/ARCHITECTURE.md "The merged catalogue"): each fleet tool that
// is not exposed, with why (warning); each tool whose exposed schema had
// to be relaxed, with why (info); and tools that fleets publish under one
// name with different input schemas (warning): fleetmgr exposes the union
// of properties with required = the intersection, so a call that one fleet
// accepts may be refused by another's validation.
func checkDrift(_ context.Context, e *checkEnv) []Finding {
	cat, err := proxy.CachedCatalogue(e.m)
	var out []Finding
	if err != nil {
		out = append(out, Finding{Check: "catalogue", Severity: SevWarn, Subject: e.cfg.Manager.StateDir, Message: err.Error(),
			Fix: "remove the file named; fleetmgr serve writes it again on the fleet's next tools/list"})
	}
	for _, n := range cat.Excluded {
		out = append(out, Finding{Check: "catalogue", Severity: SevWarn, Subject: "tool " + n.Tool,
			Message: fmt.Sprintf("fleet %s: tool %s is not exposed: %s", n.Fleet, n.Tool, n.Reason),
			Fix:     "rename the tool or its argument in that fleet's fleetd, or call it on that fleet directly"})
	}
	for _, n := range cat.Relaxed {
		out = append(out, Finding{Check: "catalogue", Severity: SevInfo, Subject: "tool " + n.Tool,
			Message: fmt.Sprintf("fleet %s: tool %s's schema is relaxed: %s; calls work and the fleet validates them, but clients are not told every rule", n.Fleet, n.Tool, n.Reason),
			Fix:     "nothing to do; docs/ARCHITECTURE.md \"The merged catalogue\" says which schemas fleetmgr can patch exactly"})
	}
	drifts := cat.DriftReport()
	if len(drifts) == 0 {
		return append(out, Finding{Check: "catalogue", Severity: SevOK, Subject: e.cfg.Manager.StateDir,
			Message: fmt.Sprintf("no schema drift: %d tool(s) across the fleets' cached catalogues", len(cat.Tools))})
	}
	for _, d := range drifts {
		var parts []string
		for _, f := range d.Fleets {
			if s, ok := d.PerFleet[f]; ok {
				parts = append(parts, f+" "+s)
			}
		}
		out = append(out, Finding{Check: "catalogue", Severity: SevWarn, Subject: "tool " + d.Tool,
			Message: fmt.Sprintf("fleets %s publish %s with different input schemas (exposed: union of properties, required = intersection): %s",
				strings.Join(d.Fleets, ", "), d.Tool, strings.Join(parts, "; ")),
			Fix: "run the same fleetd version in every fleet, or expect calls valid for one fleet to be refused by another"})
	}
	return out
}
