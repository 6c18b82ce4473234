// Package toolpolicy decides which fleet tools the operator's session sees
// (docs/ARCHITECTURE.md "Which tools the operator sees"): fleets.toml's
// tools.allow and tools.deny patterns ([manager]'s for every fleet, each
// fleet's own; deny wins) and the run-time hides and shows of `fleetmgr
// tools hide|show`, kept in <state_dir>/tools.json (overrides.go) until
// fleets.toml's rules for that fleet change. It only decides; the proxy
// applies the decisions to its merged catalogue and to the catalogues it
// serves to federated peers.
package toolpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// Decision is whether one fleet's tool is shown, and why.
type Decision struct {
	// Shown reports whether the tool is in the operator's tools/list.
	Shown bool
	// Reason says why, as the words after the tool's name: "hidden on kb
	// by fleets.toml:42 (tools.deny \"fleet_*\")", "shown: no rule hides
	// it".
	Reason string
}

// Policy is the rules in force: one loaded fleets.toml and the run-time
// overrides made since under the same rules. Immutable.
type Policy struct {
	cfg  *registry.Config
	over []Override // those still in force (fingerprint matches), newest last
}

// New returns the policy of cfg with the overrides o (nil: none) that were
// made under cfg's current rules for their fleet; the others are void.
func New(cfg *registry.Config, o *Overrides) *Policy {
	p := &Policy{cfg: cfg}
	if o != nil {
		for _, e := range o.Entries {
			if e.Rules == RulesFingerprint(cfg, e.Fleet) {
				p.over = append(p.over, e)
			}
		}
		slices.SortStableFunc(p.over, func(a, b Override) int { return a.At.Compare(b.At) })
	}
	return p
}

// Overrides returns the run-time overrides in force, oldest first.
func (p *Policy) Overrides() []Override { return slices.Clone(p.over) }

// fleetRules returns the [fleets.NAME] rules that apply to fleet: a local
// fleet's own, or for NAME@HOST those of a [fleets.NAME] table that
// declares host = HOST; nil when there are none.
func fleetRules(cfg *registry.Config, fleet string) *registry.ToolRules {
	if cfg == nil {
		return nil
	}
	name, host, remote := strings.Cut(fleet, "@")
	f := cfg.Fleets[name]
	if f == nil {
		return nil
	}
	if remote && f.Host != host {
		return nil
	}
	return &f.Tools
}

// RulesFingerprint is a short hash of the patterns fleets.toml applies to
// fleet ([manager]'s and the fleet's own, as written, lines left out): an
// override made under one fingerprint is void under another ("kept until
// the file says otherwise").
func RulesFingerprint(cfg *registry.Config, fleet string) string {
	globs := func(ps []registry.ToolPattern) []string {
		if ps == nil {
			return nil
		}
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.Glob
		}
		return out
	}
	var v struct{ MA, MD, FA, FD []string }
	if cfg != nil {
		v.MA, v.MD = globs(cfg.Manager.Tools.Allow), globs(cfg.Manager.Tools.Deny)
	}
	if r := fleetRules(cfg, fleet); r != nil {
		v.FA, v.FD = globs(r.Allow), globs(r.Deny)
	}
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Fingerprint identifies everything Decide depends on for the given
// fleets: it changes when a rule or an override of one of them does.
func (p *Policy) Fingerprint(fleets []string) string {
	h := sha256.New()
	for _, f := range fleets {
		fmt.Fprintf(h, "%s=%s;", f, RulesFingerprint(p.cfg, f))
	}
	for _, o := range p.over {
		fmt.Fprintf(h, "%s/%s/%s/%d;", o.Fleet, o.Tool, o.Action, o.At.UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Decide says whether fleet's tool is shown: the newest run-time override
// whose pattern matches it, else a deny pattern of [manager] or the fleet
// (deny wins), else the allow list in force (the fleet's, else
// [manager]'s; none: every tool).
func (p *Policy) Decide(fleet, tool string) Decision {
	for i := len(p.over) - 1; i >= 0; i-- {
		o := p.over[i]
		if o.Fleet != fleet {
			continue
		}
		if ok, _ := path.Match(o.Tool, tool); !ok {
			continue
		}
		when := o.At.UTC().Format(time.DateTime + " UTC")
		if o.Action == ActionShow {
			return Decision{Shown: true, Reason: fmt.Sprintf("shown on %s by `fleetmgr tools show` at %s", fleet, when)}
		}
		return Decision{Reason: fmt.Sprintf("hidden on %s by `fleetmgr tools hide` at %s", fleet, when)}
	}
	cfg := p.cfg
	if cfg == nil {
		return Decision{Shown: true, Reason: "shown: no rule hides it"}
	}
	fr := fleetRules(cfg, fleet)
	deny := slices.Clone(cfg.Manager.Tools.Deny)
	allow, allowLine, allowWhere := cfg.Manager.Tools.Allow, cfg.Manager.Tools.AllowLine, "[manager] tools.allow"
	if fr != nil {
		deny = append(deny, fr.Deny...)
		if fr.Allow != nil {
			allow, allowLine, allowWhere = fr.Allow, fr.AllowLine, "tools.allow"
		}
	}
	for _, d := range deny {
		if d.Match(tool) {
			return Decision{Reason: fmt.Sprintf("hidden on %s by %s (tools.deny %q)", fleet, cfg.ToolSource(d.Line), d.Glob)}
		}
	}
	if allow == nil {
		return Decision{Shown: true, Reason: "shown: no rule hides it"}
	}
	for _, a := range allow {
		if a.Match(tool) {
			return Decision{Shown: true, Reason: fmt.Sprintf("shown: matches tools.allow %q (%s)", a.Glob, cfg.ToolSource(a.Line))}
		}
	}
	return Decision{Reason: fmt.Sprintf("hidden on %s by %s (not in %s)", fleet, cfg.ToolSource(allowLine), allowWhere)}
}
