package fleetd

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RequestIDMetaKey is the _meta key under which a test gives a tools/call
// an id of its own (a string). The stand-in counts the executions of each
// such id (Executions) and writes one event per execution,
// "executed TOOL request-id=ID", before the tool runs, and a cancelled
// fleet_slow's event names the id too. A test that sends the same id
// through a path that must deliver a call at most once (a call forwarded
// across hosts, a manager killed mid-call) then counts the events: two
// lines for one id is a call executed twice. The key follows MCP's rule
// for _meta keys (a reverse-DNS prefix, then a slash); clients that do not
// know it ignore it, and fleetmgr forwards it as any other caller _meta.
const RequestIDMetaKey = "io.github.fleetmgr.standin/request-id"

// executions counts tools/call executions by request id.
type executions struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

// add counts one execution of id and returns the count so far.
func (e *executions) add(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[id]++
	return e.n[id]
}

// Executions returns how many times this daemon executed a tools/call
// whose _meta carried RequestIDMetaKey = id.
func (d *Daemon) Executions(id string) int {
	d.execs.mu.Lock()
	defer d.execs.mu.Unlock()
	return d.execs.n[id]
}

// requestIDOf returns the RequestIDMetaKey of a call's _meta, or "".
func requestIDOf(m mcp.Meta) string {
	id, _ := m[RequestIDMetaKey].(string)
	if !validName(id, true) {
		return "" // one token on an event line: nothing a test could misread
	}
	return id
}

// countExecutions is the MCP server's receiving middleware that records
// each tools/call carrying a request id before its tool runs.
func (d *Daemon) countExecutions(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/call" {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil {
				if id := requestIDOf(p.Meta); id != "" {
					n := d.execs.add(id)
					d.event("executed " + p.Name + " request-id=" + id)
					d.log.Printf("execution %d of request-id %s (%s)", n, id, p.Name)
				}
			}
		}
		return next(ctx, method, req)
	}
}
