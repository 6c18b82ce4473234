package proxy

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// LogsArgs are fleetmgr_logs' arguments.
type LogsArgs struct {
	Fleet string `json:"fleet" jsonschema:"the fleet's name as in fleets.toml, or NAME@HOST for a fleet of another federated host"`
	Lines int    `json:"lines,omitempty" jsonschema:"how many of the last lines to return (default 50, at most 1000)"`
	Herdr bool   `json:"herdr,omitempty" jsonschema:"the fleet's herdr server log instead of fleetd's"`
}

// LogsResult is the structured result of fleetmgr_logs.
type LogsResult struct {
	Fleet string   `json:"fleet"`
	Log   string   `json:"log"`  // "fleetd" or "herdr"
	Path  string   `json:"path"` // the current log file
	Lines []string `json:"lines"`
}

// addSupervisionTools registers fleetmgr_restart and fleetmgr_logs
// (docs/ARCHITECTURE.md "Supervision").
func (p *Proxy) addSupervisionTools() {
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "restart",
		Description: "Restart a fleet's fleetd (SIGTERM, grace, SIGKILL, start, wait for /healthz), keeping its herdr session when it answers. Clears a crash loop and spent start retries (state failed). A restart whose start does not become healthy is an error ending with what happens next (serve retries it start_retries times, then the fleet is failed). Reports each step as progress. lead=true also launches the fleet's lead if its tab is missing. A fleet with live members is restarted only with confirm=true (the new fleetd reaps them); without it the error says how many and which. A fleet of another host (NAME@HOST) is restarted by that host's fleetmgr over the federation.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in RestartArgs) (*mcp.CallToolResult, *ActionResult, error) {
		return p.act(ctx, req, ActArgs{Verb: VerbRestart, Fleet: in.Fleet, Lead: in.Lead, Confirm: in.Confirm, Origin: "mcp"})
	})
	mcp.AddTool(p.server, &mcp.Tool{
		Name:        ManagerToolPrefix + "logs",
		Description: "The last lines of a fleet's fleetd log (or of its herdr server's with herdr=true), from fleetmgr's state directory. A fleet of another host (NAME@HOST) is asked of that host's fleetmgr over the federation.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in LogsArgs) (*mcp.CallToolResult, *LogsResult, error) {
		name, host, err := p.remoteTarget(in.Fleet)
		if err != nil {
			return nil, nil, err
		}
		var res *LogsResult
		if host != "" {
			res, err = p.remoteLogs(ctx, name, host, in.Lines, in.Herdr)
		} else if _, err = p.fleetFor(ctx, in.Fleet); err == nil {
			res, err = p.logs(in.Fleet, in.Lines, in.Herdr)
		}
		if err != nil {
			return nil, nil, err
		}
		text := res.Path + "\n" + strings.Join(res.Lines, "\n")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, res, nil
	})
}

// logs is fleetmgr_logs' answer for a local fleet: the last lines (0 or
// less: 50; at most 1000) of its fleetd log, or with herdr of its herdr
// server's.
func (p *Proxy) logs(fleet string, lines int, herdr bool) (*LogsResult, error) {
	n := lines
	if n <= 0 {
		n = 50
	}
	n = min(n, 1000)
	proc := "fleetd"
	if herdr {
		proc = "herdr"
	}
	tail, err := p.opt.Manager.LogTail(fleet, proc, n)
	if err != nil {
		return nil, err
	}
	return &LogsResult{Fleet: fleet, Log: proc, Path: p.opt.Manager.LogPath(fleet, proc), Lines: tail}, nil
}
