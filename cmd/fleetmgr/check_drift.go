package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmgr/fleetmgr/proxy"
)

// checkDrift reports tools that fleets publish under one name with
// different input schemas (DESIGN.md "The merged catalogue"), from each
// fleet's last catalogue cached in the state dir: fleetmgr exposes the
// union of properties with required = the intersection, so a call that
// one fleet accepts may be refused by another's validation.
func checkDrift(_ context.Context, e *checkEnv) []finding {
	cat, err := proxy.CachedCatalogue(e.m)
	var out []finding
	if err != nil {
		out = append(out, finding{Check: "catalogue", Severity: sevWarn, Subject: e.cfg.Manager.StateDir, Message: err.Error(),
			Fix: "remove the file named; fleetmgr serve writes it again on the fleet's next tools/list"})
	}
	drifts := cat.DriftReport()
	if len(drifts) == 0 {
		return append(out, finding{Check: "catalogue", Severity: sevOK, Subject: e.cfg.Manager.StateDir,
			Message: fmt.Sprintf("no schema drift: %d tool(s) across the fleets' cached catalogues", len(cat.Tools))})
	}
	for _, d := range drifts {
		var parts []string
		for _, f := range d.Fleets {
			if s, ok := d.PerFleet[f]; ok {
				parts = append(parts, f+" "+s)
			}
		}
		out = append(out, finding{Check: "catalogue", Severity: sevWarn, Subject: "tool " + d.Tool,
			Message: fmt.Sprintf("fleets %s publish %s with different input schemas (exposed: union of properties, required = intersection): %s",
				strings.Join(d.Fleets, ", "), d.Tool, strings.Join(parts, "; ")),
			Fix: "run the same fleetd version in every fleet, or expect calls valid for one fleet to be refused by another"})
	}
	return out
}
