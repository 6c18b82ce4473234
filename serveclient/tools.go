package serveclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/termtext"
	"github.com/fleetmgr/fleetmgr/toolpolicy"
)

// Tools reports fleet's tools (every fleet's when fleet is "") as shown,
// hidden or excluded, and why: the running serve's fleetmgr_tools when
// one runs (which first applies a changed <state_dir>/tools.json, so its
// clients are notified), else the same computation on this host's
// catalogue caches (ToolsReport.Note says so; other hosts' fleets need
// the serve).
func (c *Client) Tools(ctx context.Context, fleet string) (*proxy.ToolsReport, error) {
	if _, sock := serveapi.Running(c.cfg); sock != "" {
		return c.callTools(ctx, sock, fleet, nil)
	}
	if isRemoteName(fleet) {
		return nil, c.errNeedsServe(fleet)
	}
	perFleet := map[string][]*mcp.Tool{}
	for _, n := range c.m.Names() {
		b, err := atomicfile.Read(filepath.Join(c.m.FleetDir(n), "catalogue.json"), atomicfile.MaxCatalogue)
		if err != nil {
			continue
		}
		var tools []*mcp.Tool
		if json.Unmarshal(b, &tools) == nil {
			perFleet[n] = tools
		}
	}
	over, err := toolpolicy.Load(c.cfg.Manager.StateDir)
	if err != nil {
		return nil, err
	}
	pol := toolpolicy.New(c.cfg, over)
	rep := proxy.BuildToolsReport(proxy.MergeWithPolicy(perFleet, pol), pol, fleet)
	rep.Note = "no fleetmgr serve runs: from each fleet's tools as last listed (its catalogue cache); other hosts' fleets are not shown"
	return rep, nil
}

// callTools calls fleetmgr_tools on the daemon.
//
// change, when set, is the hide or show just recorded for fleet: sent in
// the call's _meta (proxy.ToolsChangeMeta), so serve journals it with the
// caller's origin.
func (c *Client) callTools(ctx context.Context, sock, fleet string, change *proxy.ToolsChange) (*proxy.ToolsReport, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cs, err := c.session(cctx, sock, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	args := map[string]any{}
	if fleet != "" {
		args["fleet"] = fleet
	}
	params := &mcp.CallToolParams{Name: proxy.ToolsTool, Arguments: args}
	if change != nil {
		params.Meta = mcp.Meta{proxy.ToolsChangeMeta: change}
	}
	res, err := cs.CallTool(cctx, params)
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return nil, errors.New(resultText(res))
	}
	var r proxy.ToolsReport
	if err := decodeStructured(res, &r); err != nil {
		return nil, fmt.Errorf("%s: unexpected result: %v", proxy.ToolsTool, err)
	}
	return &r, nil
}

// SetTools is `fleetmgr tools hide|show FLEET TOOL…`: it records the
// override in <state_dir>/tools.json (toolpolicy.Update) and, when a serve
// runs, has it applied at once (its clients get
// notifications/tools/list_changed) and returns its report of the fleet.
// A show is refused (nothing recorded) for a tool the fleet does not
// offer: another host's fleet's tool that host hides (only that host can
// show it), or a tool fleetmgr excludes (the reason is given). A hide is
// refused for a name or glob that matches none of the fleet's tools as
// last listed (the error lists them); a fleet that never listed its
// tools (never started) takes any hide, which applies once it offers
// the tool (`fleetmgr tools hide` warns). A tool pattern that is not a
// tool name or glob (registry.CheckToolPattern) is a usage error.
func (c *Client) SetTools(ctx context.Context, action, fleet string, tools []string) (*proxy.ToolsReport, error) {
	if err := c.Known(fleet); err != nil {
		return nil, err
	}
	for _, t := range tools {
		if err := registry.CheckToolPattern(t); err != nil {
			return nil, &serveapi.UsageError{Err: fmt.Errorf("tool %v", err)}
		}
	}
	rep, err := c.Tools(ctx, fleet)
	if err != nil {
		return nil, err
	}
	ft, known := FleetToolsOf(rep, fleet)
	var problems []string
	for _, t := range tools {
		p := ""
		switch {
		case action == toolpolicy.ActionShow:
			p = showProblem(ft, fleet, t)
		case known:
			p = hideProblem(ft, fleet, t)
		}
		if p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	if err := toolpolicy.Update(c.cfg, action, fleet, tools, time.Now()); err != nil {
		return nil, err
	}
	_, sock := serveapi.Running(c.cfg)
	if sock == "" {
		if err := c.journalTools(action, fleet, tools); err != nil {
			// A serve starting now holds the file (bbolt's lock): it may
			// be up by now, and then it applies and journals the change.
			if _, sock = serveapi.Running(c.cfg); sock == "" {
				return nil, &NotJournalledError{Err: err}
			}
		}
		if sock == "" {
			return nil, nil
		}
	}
	return c.callTools(ctx, sock, fleet, &proxy.ToolsChange{Action: action, Tools: tools})
}

// NotJournalledError is SetTools' error when the change was recorded (the
// next serve applies it) but could not be journalled: no serve ran and
// the journal could not be written (Err says why).
type NotJournalledError struct{ Err error }

func (e *NotJournalledError) Error() string {
	return "recorded, but not journalled: " + e.Err.Error()
}

func (e *NotJournalledError) Unwrap() error { return e.Err }

// journalTools journals a hide or show made while no serve runs, as the
// serve would have (a control event of this CLI), writing the journal
// itself: no serve holds it, or bbolt's lock on the file refuses the open
// (journal.ErrHeld). Nothing when [manager] journal = false.
func (c *Client) journalTools(action, fleet string, tools []string) error {
	if !c.cfg.Manager.Journal {
		return nil
	}
	j, err := journal.Open(journal.Options{Path: serveapi.JournalPath(c.cfg)})
	if err != nil {
		return err
	}
	defer j.Close()
	origin := fmt.Sprintf("cli uid=%d pid=%d", os.Getuid(), os.Getpid())
	if exe, err := os.Executable(); err == nil {
		origin += " (" + filepath.Base(exe) + ")"
	}
	return j.Write(journal.Event{Fleet: fleet, Kind: journal.KindControl, Origin: origin + " client " + cliClientName,
		Detail: "tools " + action + " " + strings.Join(tools, " "), Outcome: "ok",
		Data: map[string]any{"action": action, "tools": tools, "applied": "by the next serve (none ran)"}})
}

// FleetToolsOf is fleet's tools in rep, and whether rep knows them (the
// fleet has listed its tools: to a running serve, or in its catalogue
// cache). A fleet that never listed them (never started) is not known.
func FleetToolsOf(rep *proxy.ToolsReport, fleet string) (proxy.FleetTools, bool) {
	for _, f := range rep.Fleets {
		if f.Fleet == fleet {
			return f, true
		}
	}
	return proxy.FleetTools{}, false
}

// hideProblem says why tool (a name or glob) cannot be hidden on fleet
// given its known tools ft (one it does not offer: a typo, which would
// hide nothing), or "".
func hideProblem(ft proxy.FleetTools, fleet, tool string) string {
	names := make([]string, 0, len(ft.Tools))
	for _, s := range ft.Tools {
		if (registry.ToolPattern{Glob: tool}).Match(s.Name) {
			return ""
		}
		names = append(names, s.Name)
	}
	return fmt.Sprintf("%s offers no tool %s (as last listed), so hiding it would hide nothing; its tools: %s", fleet, tool, strings.Join(names, ", "))
}

// showProblem says why tool (a name or glob) cannot be shown on fleet
// given its tools ft, or "".
func showProblem(ft proxy.FleetTools, fleet, tool string) string {
	matched := false
	for _, s := range ft.Tools {
		if !(registry.ToolPattern{Glob: tool}).Match(s.Name) {
			continue
		}
		matched = true
		if s.State == proxy.ToolExcluded {
			return fmt.Sprintf("%s cannot be shown on %s: fleetmgr does not expose it: %s", s.Name, fleet, s.Reason)
		}
	}
	if matched {
		return ""
	}
	if name, host, ok := peerview.SplitRemote(fleet); ok {
		return fmt.Sprintf("%s is not offered by %s: host %s hides it by its own rules, or fleet %s has no such tool; only host %s can show it", tool, fleet, host, name, host)
	}
	return fmt.Sprintf("%s offers no tool %s (as last listed)", fleet, tool)
}

// RenderTools writes rep as a table: FLEET, TOOL, STATE, WHY; then the
// overrides in force and rep's note.
func RenderTools(out io.Writer, rep *proxy.ToolsReport) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FLEET\tTOOL\tSTATE\tWHY")
	for _, f := range rep.Fleets {
		for _, t := range f.Tools {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termtext.Cell(f.Fleet), termtext.Cell(t.Name), t.State, termtext.Cell(t.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Fleets) == 0 {
		fmt.Fprintln(out, "(no fleet has listed its tools yet)")
	}
	over := slices.Clone(rep.Overrides)
	if len(over) > 0 {
		fmt.Fprintln(out, "\nrun-time overrides (fleetmgr tools hide|show; dropped when fleets.toml's rules for the fleet change):")
		for _, o := range over {
			stale := ""
			if slices.Contains(rep.Unmatched, o) {
				stale = fmt.Sprintf(" (no effect: %s offers no such tool now)", termtext.Cell(o.Fleet))
			}
			fmt.Fprintf(out, "  %s %s %s at %s%s\n", o.Action, termtext.Cell(o.Fleet), termtext.Cell(o.Tool), o.At.UTC().Format(time.DateTime+" UTC"), stale)
		}
	}
	if rep.Note != "" {
		fmt.Fprintln(out, "\nnote:", rep.Note)
	}
	return nil
}
