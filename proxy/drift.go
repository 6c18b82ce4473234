package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

// Drift describes one tool name that fleets publish with different input
// schemas (docs/ARCHITECTURE.md "The merged catalogue"): fleetmgr exposes the union of
// properties with required = the intersection, and each fleet's fleetd
// validates calls against its own schema, so a call valid for one fleet can
// be refused by another.
type Drift struct {
	// Tool is the tool name.
	Tool string `json:"tool"`
	// Fleets are the fleets offering it, sorted.
	Fleets []string `json:"fleets"`
	// PerFleet says, for each fleet whose schema differs from the exposed
	// one, how (see FleetDrift). Fleets whose schema equals the exposed
	// union apart from the fleet argument are absent.
	PerFleet map[string]string `json:"per_fleet"`
}

// DriftReport lists every drifted tool with a per-fleet description, sorted
// by tool name. Used by fleetmgr check and fleetmgr_status.
func (c *Catalogue) DriftReport() []Drift {
	var out []Drift
	for _, name := range c.Drifts() {
		mt := c.Tools[name]
		d := Drift{Tool: name, Fleets: slices.Clone(mt.Fleets), PerFleet: map[string]string{}}
		for _, f := range mt.Fleets {
			if s := mt.describe(f); s != "" {
				d.PerFleet[f] = s
			}
		}
		out = append(out, d)
	}
	return out
}

// FleetDrift returns one sentence per drifted tool that fleet offers,
// describing how fleet's schema differs from the exposed (merged) one,
// e.g. "spawn: lacks properties c (offered by docs); also requires b;
// property a differs". Sorted by tool name; empty when fleet has no drift.
func (c *Catalogue) FleetDrift(fleet string) []string {
	var out []string
	for _, name := range c.Drifts() {
		mt := c.Tools[name]
		if !slices.Contains(mt.Fleets, fleet) {
			continue
		}
		if s := mt.describe(fleet); s != "" {
			out = append(out, name+": "+s)
		}
	}
	return out
}

// describe says how fleet's schema of this tool differs from the other
// fleets' ones: properties it lacks (with who offers them), properties it
// requires that the exposed schema does not, properties whose definition
// differs, other differing keywords. "" when nothing differs.
func (m *MergedTool) describe(fleet string) string {
	own := m.schemas[fleet]
	if own == nil {
		return ""
	}
	ownProps, _ := own["properties"].(map[string]any)
	var parts []string

	lacks := map[string][]string{} // property → fleets offering it
	differs := map[string]bool{}
	for _, other := range m.Fleets {
		if other == fleet {
			continue
		}
		op, _ := m.schemas[other]["properties"].(map[string]any)
		for k, v := range op {
			mine, ok := ownProps[k]
			if !ok {
				lacks[k] = append(lacks[k], other)
			} else if !jsonEqual(mine, v) {
				differs[k] = true
			}
		}
	}
	if len(lacks) > 0 {
		var l []string
		for _, k := range sortedKeys(lacks) {
			l = append(l, fmt.Sprintf("%s (offered by %s)", k, strings.Join(lacks[k], ", ")))
		}
		parts = append(parts, "lacks properties "+strings.Join(l, ", "))
	}
	// Required by this fleet but not by every fleet: the exposed schema
	// cannot say so, so such a call fails at this fleet's validation.
	var extraReq []string
	for _, r := range stringList(own["required"]) {
		for _, other := range m.Fleets {
			if other != fleet && !slices.Contains(stringList(m.schemas[other]["required"]), r) {
				extraReq = append(extraReq, r)
				break
			}
		}
	}
	if len(extraReq) > 0 {
		parts = append(parts, "also requires "+strings.Join(extraReq, ", ")+" (not required in the merged schema; this fleet refuses calls without it)")
	}
	if len(differs) > 0 {
		parts = append(parts, "defines "+strings.Join(sortedKeys(differs), ", ")+" differently")
	}
	// Other top-level keywords (additionalProperties, $defs, …).
	other := map[string]bool{}
	for _, o := range m.Fleets {
		if o == fleet {
			continue
		}
		for k, v := range m.schemas[o] {
			if k != "properties" && k != "required" && !jsonEqual(own[k], v) {
				other[k] = true
			}
		}
		for k := range own {
			if _, ok := m.schemas[o][k]; !ok && k != "properties" && k != "required" {
				other[k] = true
			}
		}
	}
	if len(other) > 0 {
		parts = append(parts, "differs in "+strings.Join(sortedKeys(other), ", "))
	}
	return strings.Join(parts, "; ")
}

func jsonEqual(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CachedCatalogue merges the catalogues every fleet last published, as
// cached in the state dir (fleets/<name>/catalogue.json), without
// contacting any fleet: what `fleetmgr check` reports drift from. Fleets
// that never ran have no cache and are left out; an unreadable cache is an
// error naming its file.
func CachedCatalogue(m *lifecycle.Manager) (*Catalogue, error) {
	perFleet := map[string][]*mcp.Tool{}
	var errs []error
	for _, name := range m.Config().Names() {
		path := filepath.Join(m.FleetDir(name), "catalogue.json")
		b, err := atomicfile.Read(path, atomicfile.MaxCatalogue)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var tools []*mcp.Tool
		if err == nil {
			err = json.Unmarshal(b, &tools)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("fleet %s: catalogue cache %s: %w", name, path, err))
			continue
		}
		perFleet[name] = tools
	}
	return Merge(perFleet, func(n string) bool { return strings.HasPrefix(n, ManagerToolPrefix) }), errors.Join(errs...)
}

// FleetDrift is p.Catalogue().FleetDrift(fleet): how fleet's tool schemas
// differ from the other fleets' ones, one sentence per drifted tool, for
// fleetmgr_status.
func (p *Proxy) FleetDrift(fleet string) []string { return p.Catalogue().FleetDrift(fleet) }

// NoteDrift sets every fleet row's SchemaDrift (FleetDrift), ExcludedTools
// (cat.Excluded) and RelaxedTools (cat.Relaxed) in rep from cat:
// fleetmgr_status does so from the live catalogue, `fleetmgr status`
// without a daemon from CachedCatalogue.
func NoteDrift(rep *status.Report, cat *Catalogue) {
	notes := func(all []ToolNote, fleet string) []status.ToolNote {
		var out []status.ToolNote
		for _, n := range FleetNotes(all, fleet) {
			out = append(out, status.ToolNote{Tool: n.Tool, Reason: n.Reason})
		}
		return out
	}
	for i := range rep.Fleets {
		f := &rep.Fleets[i]
		f.SchemaDrift = cat.FleetDrift(f.Name)
		f.ExcludedTools = notes(cat.Excluded, f.Name)
		f.RelaxedTools = notes(cat.Relaxed, f.Name)
	}
}
