package proxy

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionTable is the MCP server's sessions as the go-sdk reports them,
// for the HTTP fast path: a session enters through the SDK's receiving
// middleware (its first message, initialize, reaches the SDK handler)
// and leaves when the SDK ends it (ServerSession.Wait returns: DELETE, a
// transport failure, or an idle timeout had one been set). Whether a
// session may take calls is the SDK's own state too: a session is ready
// once the SDK recorded its initialize (ServerSession.InitializeParams,
// the gate the SDK applies to every call). Nothing here copies or scans
// the SDK's session list per call.
type sessionTable struct {
	mu   sync.RWMutex
	byID map[string]*mcp.ServerSession // guarded by mu
}

// middleware is the SDK receiving middleware that enters sessions.
func (t *sessionTable) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
			t.enter(ss)
		}
		return next(ctx, method, req)
	}
}

// enter records ss (once) and, in a goroutine owned by the session (it
// ends when the session does), forgets it when the SDK ends it. Sessions
// without an id (the unix socket's) are not kept: the socket's
// demultiplexer holds its own session.
func (t *sessionTable) enter(ss *mcp.ServerSession) {
	id := ss.ID()
	if id == "" {
		return
	}
	t.mu.RLock()
	known := t.byID[id] == ss
	t.mu.RUnlock()
	if known {
		return
	}
	t.mu.Lock()
	if t.byID[id] == ss {
		t.mu.Unlock()
		return
	}
	if t.byID == nil {
		t.byID = map[string]*mcp.ServerSession{}
	}
	t.byID[id] = ss
	t.mu.Unlock()
	go func() {
		_ = ss.Wait()
		t.mu.Lock()
		if t.byID[id] == ss {
			delete(t.byID, id)
		}
		t.mu.Unlock()
	}()
}

// get returns the live session with id sid, or nil.
func (t *sessionTable) get(sid string) *mcp.ServerSession {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[sid]
}

// ready returns the live session sid when the SDK would take a call on it
// (it has recorded the session's initialize), else nil.
func (t *sessionTable) ready(sid string) *mcp.ServerSession {
	if ss := t.get(sid); ss != nil && sessionReady(ss) {
		return ss
	}
	return nil
}

// sessionReady reports whether the SDK takes calls on ss: it applies that
// gate itself (ServerSession.handle: a call before initialize is refused).
func sessionReady(ss *mcp.ServerSession) bool { return ss.InitializeParams() != nil }

// len is the number of sessions known (tests).
func (t *sessionTable) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}
