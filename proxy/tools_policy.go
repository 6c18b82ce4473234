package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/toolpolicy"
)

// Which fleet tools the operator's session sees (docs/ARCHITECTURE.md
// "Which tools the operator sees"): the proxy takes the decisions of a
// toolpolicy.Policy (fleets.toml's tools.allow/deny and the run-time
// overrides in <state_dir>/tools.json) and applies them in three places:
// the merged catalogue leaves hidden tools out (Catalogue.Hidden says
// why), a call to a hidden or excluded tool is refused with that reason
// (hiddenReason, the receiving middleware and route), and the catalogue
// served to a federated peer (LocalCatalogue, CatalogueHash) holds only
// the tools this host shows, so a peer can narrow them further but never
// show one this host hides.

// ToolsTool is the manager tool that reports every fleet's tools as shown,
// hidden or excluded, and why.
const ToolsTool = ManagerToolPrefix + "tools"

// ToolsChangeMeta is the _meta key of the ToolsTool call with which
// `fleetmgr tools hide|show FLEET TOOL…` has serve apply what it just
// recorded in the overrides file: a ToolsChange. serve journals it as a
// control action of the caller (daemon/attention.go), "ok" only when the
// overrides in force hold it. The tool itself ignores it.
const ToolsChangeMeta = "fleetmgr/tools-change"

// ToolsChange is the value of ToolsChangeMeta: the action (hide or show)
// and the tool patterns recorded for the call's fleet.
type ToolsChange struct {
	Action string   `json:"action"`
	Tools  []string `json:"tools"`
}

// policyCache is the policy in force: rebuilt when the config in force or
// the overrides file changed (its size, modification time or inode).
type policyCache struct {
	mu  sync.Mutex
	cfg *registry.Config
	key [4]int64
	pol *toolpolicy.Policy
}

// toolPolicy returns the tool policy in force for the Manager's current
// config and <state_dir>/tools.json. An overrides file that cannot be read
// is logged and treated as none.
func (p *Proxy) toolPolicy() *toolpolicy.Policy {
	var cfg *registry.Config
	if p.opt.Manager != nil {
		cfg = p.opt.Manager.Config()
	}
	var key [4]int64
	if cfg != nil {
		if fi, err := os.Stat(toolpolicy.Path(cfg.Manager.StateDir)); err == nil {
			key[0], key[1] = fi.Size(), fi.ModTime().UnixNano()
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				key[2], key[3] = int64(st.Dev), int64(st.Ino)
			}
		}
	}
	c := &p.policies
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pol != nil && c.cfg == cfg && c.key == key {
		return c.pol
	}
	var over *toolpolicy.Overrides
	if cfg != nil && key != [4]int64{} {
		o, err := toolpolicy.Load(cfg.Manager.StateDir)
		if err != nil {
			p.log.Warn("tool overrides not applied", "err", err)
		}
		over = o
	}
	c.cfg, c.key, c.pol = cfg, key, toolpolicy.New(cfg, over)
	return c.pol
}

// filterHidden splits perFleet into the tools pol shows and notes of those
// it hides (sorted by fleet, then tool).
func filterHidden(pol *toolpolicy.Policy, perFleet map[string][]*mcp.Tool) (map[string][]*mcp.Tool, []ToolNote) {
	out := make(map[string][]*mcp.Tool, len(perFleet))
	var hidden []ToolNote
	for f, tools := range perFleet {
		kept := make([]*mcp.Tool, 0, len(tools))
		for _, t := range tools {
			if t == nil {
				continue
			}
			if d := pol.Decide(f, t.Name); !d.Shown {
				hidden = append(hidden, ToolNote{Fleet: f, Tool: t.Name, Reason: d.Reason})
				continue
			}
			kept = append(kept, t)
		}
		out[f] = kept
	}
	slices.SortFunc(hidden, func(a, b ToolNote) int {
		if c := strings.Compare(a.Fleet, b.Fleet); c != 0 {
			return c
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return out, hidden
}

// hiddenReason returns why tool is not offered on fleet ("" when no fleet
// is named: any fleet) in cat: "fleet_stop is hidden on kb by
// fleets.toml:42 (…)" or "x is not exposed on kb: <why>", or "" when it is
// neither hidden nor excluded there.
func hiddenReason(cat *Catalogue, tool, fleet string) string {
	var reasons []string
	for _, n := range cat.Hidden {
		if n.Tool == tool && (fleet == "" || n.Fleet == fleet) {
			reasons = append(reasons, fmt.Sprintf("%s is %s", tool, n.Reason))
		}
	}
	for _, n := range cat.Excluded {
		if n.Tool == tool && (fleet == "" || n.Fleet == fleet) {
			reasons = append(reasons, fmt.Sprintf("%s is not exposed on %s: %s", tool, n.Fleet, n.Reason))
		}
	}
	if len(reasons) == 0 && fleet != "" {
		if name, host, ok := peerview.SplitRemote(fleet); ok && catalogueHasFleet(cat, fleet) {
			// The host that owns the fleet served its catalogue without
			// the tool: its own rules hide it (or the fleet has none).
			reasons = append(reasons, fmt.Sprintf("%s is not offered by %s: host %s hides it by its own rules, or fleet %s has no such tool; only host %s can show it", tool, fleet, host, name, host))
		}
	}
	return strings.Join(reasons, "; ")
}

// catalogueHasFleet reports whether some tool of cat is offered, hidden or
// excluded on fleet.
func catalogueHasFleet(cat *Catalogue, fleet string) bool {
	for _, mt := range cat.Tools {
		if slices.Contains(mt.Fleets, fleet) {
			return true
		}
	}
	return slices.ContainsFunc(slices.Concat(cat.Hidden, cat.Excluded), func(n ToolNote) bool { return n.Fleet == fleet })
}

// callFleetName returns the "fleet" argument of a call's raw arguments, or
// "" when there is none that is a string.
func callFleetName(raw json.RawMessage) string {
	var a struct {
		Fleet string `json:"fleet"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &a) != nil {
		return ""
	}
	return a.Fleet
}

// refuseHidden is the MCP server's receiving middleware that answers a
// tools/call of a tool no fleet shows (so the go-sdk would answer a bare
// "unknown tool") with why it is hidden or excluded. Calls of tools the
// catalogue holds pass on (route refuses a hidden fleet of one).
func (p *Proxy) refuseHidden(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		ctr, ok := req.(*mcp.CallToolRequest)
		if !ok || ctr.Params == nil {
			return next(ctx, method, req)
		}
		name := ctr.Params.Name
		cat := p.cat.current()
		if cat.Tools[name] != nil || strings.HasPrefix(name, ManagerToolPrefix) {
			return next(ctx, method, req)
		}
		fleet := callFleetName(ctr.Params.Arguments)
		why := hiddenReason(cat, name, fleet)
		if why == "" && fleet != "" {
			why = hiddenReason(cat, name, "")
		}
		if why == "" {
			return next(ctx, method, req)
		}
		p.opt.Metrics.observe(metricFleet(cat, fleet), name, OutcomeHidden, 0)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: why}
	}
}

// metricFleet is fleet as a metrics label: a fleet the catalogue notes a
// hidden or excluded tool of, else "-" (never the caller's text).
func metricFleet(cat *Catalogue, fleet string) string {
	for _, n := range slices.Concat(cat.Hidden, cat.Excluded) {
		if n.Fleet == fleet {
			return fleet
		}
	}
	return "-"
}

// servedCatalogue is what of fleet's cached catalogue b (a JSON array of
// tools) a federated peer gets: the tools this host shows. b itself when
// nothing is hidden (so the bytes, and their hash, are those of the
// cache); else the shown elements, as they are, in order.
func (p *Proxy) servedCatalogue(fleet string, b []byte) []byte {
	var elems []json.RawMessage
	if json.Unmarshal(b, &elems) != nil {
		return b
	}
	pol := p.toolPolicy()
	kept := make([][]byte, 0, len(elems))
	for _, e := range elems {
		var t struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(e, &t) == nil && !pol.Decide(fleet, t.Name).Shown {
			continue
		}
		kept = append(kept, e)
	}
	if len(kept) == len(elems) {
		return b
	}
	return append(append([]byte{'['}, bytes.Join(kept, []byte{','})...), ']')
}

// ToolsArgs are fleetmgr_tools' arguments.
type ToolsArgs struct {
	Fleet string `json:"fleet,omitempty" jsonschema:"one fleet (NAME or NAME@HOST); default every fleet"`
}

// ToolState is one fleet tool's standing in the operator's tools/list.
type ToolState struct {
	Name string `json:"name"`
	// State is shown, hidden or excluded.
	State string `json:"state"`
	// Reason says why (the rule or override, or the schema problem).
	Reason string `json:"reason"`
}

// FleetTools is one fleet's tools in a ToolsReport.
type FleetTools struct {
	Fleet string      `json:"fleet"`
	Tools []ToolState `json:"tools"`
}

// ToolsReport is fleetmgr_tools' result and `fleetmgr tools --json`'s
// output.
type ToolsReport struct {
	Fleets []FleetTools `json:"fleets"`
	// Overrides are the run-time hides and shows in force, oldest first.
	Overrides []toolpolicy.Override `json:"overrides"`
	// Unmatched are the overrides of Overrides that match no tool their
	// fleet offers now (shown, hidden or excluded): the tool went away
	// since the hide or show, so it has no effect. An override of a fleet
	// whose tools are not known (never listed) is not among them.
	Unmatched []toolpolicy.Override `json:"unmatched_overrides"`
	// Note says where the report comes from when it is not a running
	// serve's (the catalogue caches).
	Note string `json:"note,omitempty"`
}

// The states of a ToolState.
const (
	ToolShown    = "shown"
	ToolHidden   = "hidden"
	ToolExcluded = "excluded"
)

// BuildToolsReport reports every fleet's tools in cat (fleet "" for every
// fleet; else that one) under pol, sorted by fleet then tool.
func BuildToolsReport(cat *Catalogue, pol *toolpolicy.Policy, fleet string) *ToolsReport {
	by, offered := map[string][]ToolState{}, map[string][]string{}
	add := func(f string, s ToolState) {
		offered[f] = append(offered[f], s.Name)
		if fleet == "" || f == fleet {
			by[f] = append(by[f], s)
		}
	}
	for name, mt := range cat.Tools {
		for _, f := range mt.Fleets {
			add(f, ToolState{Name: name, State: ToolShown, Reason: pol.Decide(f, name).Reason})
		}
	}
	for _, n := range cat.Hidden {
		add(n.Fleet, ToolState{Name: n.Tool, State: ToolHidden, Reason: n.Reason})
	}
	for _, n := range cat.Excluded {
		add(n.Fleet, ToolState{Name: n.Tool, State: ToolExcluded, Reason: n.Reason})
	}
	r := &ToolsReport{Fleets: []FleetTools{}, Overrides: pol.Overrides(), Unmatched: []toolpolicy.Override{}}
	if r.Overrides == nil {
		r.Overrides = []toolpolicy.Override{}
	}
	for _, o := range r.Overrides {
		tools, known := offered[o.Fleet]
		if known && !slices.ContainsFunc(tools, (registry.ToolPattern{Glob: o.Tool}).Match) {
			r.Unmatched = append(r.Unmatched, o)
		}
	}
	for f, ts := range by {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
		r.Fleets = append(r.Fleets, FleetTools{Fleet: f, Tools: ts})
	}
	sort.Slice(r.Fleets, func(i, j int) bool { return r.Fleets[i].Fleet < r.Fleets[j].Fleet })
	return r
}

// MergeWithPolicy is the catalogue the serve would build from perFleet
// under pol: hidden tools left out (and noted), the rest merged. `fleetmgr
// tools` uses it on the catalogue caches when no serve runs.
func MergeWithPolicy(perFleet map[string][]*mcp.Tool, pol *toolpolicy.Policy) *Catalogue {
	shown, hidden := filterHidden(pol, perFleet)
	cat := Merge(shown, func(n string) bool { return strings.HasPrefix(n, ManagerToolPrefix) })
	cat.Hidden = hidden
	return cat
}

// addToolsTool registers fleetmgr_tools. A call first applies a changed
// overrides file (`fleetmgr tools hide|show` writes it, then calls this
// tool), so connected clients get notifications/tools/list_changed before
// the report is returned.
func (p *Proxy) addToolsTool() {
	mcp.AddTool(p.server, &mcp.Tool{
		Name: ToolsTool,
		Description: "Which fleet tools this session sees: every fleet's tools as shown, hidden (by fleets.toml's tools.allow/tools.deny, or by `fleetmgr tools hide`) or excluded (a schema or name fleetmgr cannot expose), each with why, and the run-time overrides in force. " +
			"Only the operator can change it (`fleetmgr tools hide|show FLEET TOOL`, or fleets.toml).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ToolsArgs) (*mcp.CallToolResult, *ToolsReport, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.refresh(rctx, false); err != nil {
			p.log.Debug("refresh before tools report", "err", err)
		}
		return nil, BuildToolsReport(p.cat.current(), p.toolPolicy(), in.Fleet), nil
	})
}
