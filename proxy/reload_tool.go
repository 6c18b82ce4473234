package proxy

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// ReloadTool is the name of the manager's reload tool.
const ReloadTool = ManagerToolPrefix + "reload"

// addReloadTool registers fleetmgr_reload when the Proxy was given a
// Reload function (the serve daemon's).
func (p *Proxy) addReloadTool() {
	if p.opt.Reload == nil {
		return
	}
	mcp.AddTool(p.server, &mcp.Tool{
		Name: ReloadTool,
		Description: "Re-read fleets.toml (as SIGHUP to fleetmgr serve does). Added fleets can be started at once; removed fleets that still run stay listed (not in the config) and stoppable, and are never restarted; " +
			"changed settings of a running fleet apply at its next start (restart_pending lists them). An invalid file changes nothing: the error names file:line.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *lifecycle.ReloadReport, error) {
		r, err := p.opt.Reload(ctx, false)
		if err != nil {
			return nil, nil, err
		}
		_ = p.Refresh(ctx) // the fleet enums follow before the answer
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(r.Lines(), "\n")}}}, r, nil
	})
}

// fleetFor resolves the fleet a manager tool names. A name the config in
// force does not define makes the daemon re-read fleets.toml first when
// the file changed since it was last read, so a fleet just added to the
// file is never answered "unknown fleet"; an error then describes the file
// as it now reads. A name still unknown is an *UnknownFleetError.
func (p *Proxy) fleetFor(ctx context.Context, name string) (*registry.Fleet, error) {
	f, err := p.opt.Manager.Fleet(name)
	if err == nil {
		return f, nil
	}
	if p.opt.Reload == nil || !registry.ValidFleetName(name) {
		return nil, &UnknownFleetError{Fleet: name, Err: err}
	}
	r, rerr := p.opt.Reload(ctx, true)
	if rerr != nil {
		return nil, fmt.Errorf("%v; fleets.toml as it now reads cannot be applied, so fleetmgr serve keeps its config (fix the file, then `fleetmgr reload`):\n%v", err, rerr)
	}
	if r != nil {
		_ = p.Refresh(ctx)
	}
	if f, err = p.opt.Manager.Fleet(name); err != nil {
		return nil, &UnknownFleetError{Fleet: name, Err: err}
	}
	return f, nil
}
