package daemon

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/proxy"
)

// lifecycleCalls counts the calls of the lifecycle manager tools
// (fleetmgr_start, fleetmgr_stop, fleetmgr_restart) being served, so a
// stopping serve answers them before it closes their sessions: the CLI
// whose start went through a serve told to stop (systemctl stop, SIGTERM)
// gets its outcome, not EOF for a start that went on to succeed.
type lifecycleCalls struct{ n atomic.Int64 }

// middleware is the MCP server's receiving middleware that counts them.
func (l *lifecycleCalls) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && r.Params != nil {
			switch r.Params.Name {
			case proxy.ManagerToolPrefix + "start", proxy.ManagerToolPrefix + "stop", proxy.ManagerToolPrefix + "restart":
				l.n.Add(1)
				defer l.n.Add(-1)
			}
		}
		return next(ctx, method, req)
	}
}

// wait returns once no such call is being served, or after bound; it
// reports how many still were.
func (l *lifecycleCalls) wait(bound time.Duration) int64 {
	deadline := time.Now().Add(bound)
	for {
		n := l.n.Load()
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}
