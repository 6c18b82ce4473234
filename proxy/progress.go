package proxy

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The progress relay. A caller's progress token is unique among that
// caller's requests only (MCP "Progress"), and one upstream session carries
// the calls of every caller, so each forwarded call that asks for progress
// gets an upstream token of fleetmgr's own ("fleetmgr-N"). Progress for it
// reaches fleetmgr two ways: inline, on the call's own response stream
// (read by rawCall, in order, before the result), or out of band, on the
// upstream session's own stream (a fleetd answering in JSON sends it
// there), which the go-sdk client hands to progressRelay.deliver. Either
// way it goes to the caller with the caller's own token.

// progressSettle bounds how long a finished call waits for progress the
// upstream sent out of band just before its result: the SDK hands such
// notifications to their handler asynchronously, so the last one may
// still be in flight when the result arrives.
const progressSettle = 50 * time.Millisecond

// progressLinger is how long a fast-path call's progress token stays
// known after its answer: progress a JSON upstream sent on its session's
// own stream, still on its way when the result came, is relayed out of
// band until then.
const progressLinger = 10 * time.Second

// progressRelay maps fleetmgr's upstream progress tokens to the calls they
// belong to.
type progressRelay struct {
	seq atomic.Uint64 // the number of the last token minted

	mu      sync.Mutex
	targets map[string]*progressTarget // guarded by mu: our token → its call
}

// progressTarget is where the progress of one forwarded call goes.
type progressTarget struct {
	token       string                                // ours, sent upstream
	callerToken any                                   // the caller's, put on what is relayed
	emit        func(*mcp.ProgressNotificationParams) // delivers one notification to the caller

	mu       sync.Mutex
	relayed  int           // guarded by mu: notifications delivered out of band so far
	finished bool          // guarded by mu: progress reached its total
	final    chan struct{} // closed when finished
}

// open mints a token for a call whose caller asked for progress with
// callerToken; emit delivers each notification to that caller (in the
// order relay is called). Close the target once the call has its result.
func (r *progressRelay) open(callerToken any, emit func(*mcp.ProgressNotificationParams)) *progressTarget {
	t := &progressTarget{
		token:       "fleetmgr-" + strconv.FormatUint(r.seq.Add(1), 10),
		callerToken: callerToken,
		emit:        emit,
		final:       make(chan struct{}),
	}
	r.mu.Lock()
	if r.targets == nil {
		r.targets = map[string]*progressTarget{}
	}
	r.targets[t.token] = t
	r.mu.Unlock()
	return t
}

// close ends t's call: it waits (briefly) for out-of-band progress on its
// way (settle), then forgets t's token at once (linger 0) or linger later,
// relaying out-of-band progress until then.
func (r *progressRelay) close(t *progressTarget, linger time.Duration) {
	t.settle()
	forget := func() {
		r.mu.Lock()
		delete(r.targets, t.token)
		r.mu.Unlock()
	}
	if linger <= 0 {
		forget()
		return
	}
	time.AfterFunc(linger, forget)
}

// deliver relays progress an upstream sent out of band (the go-sdk
// client's ProgressNotificationHandler) to the call its token names, if
// any is known.
func (r *progressRelay) deliver(np *mcp.ProgressNotificationParams) {
	tok, _ := np.ProgressToken.(string)
	r.mu.Lock()
	t := r.targets[tok]
	r.mu.Unlock()
	if t != nil {
		t.relay(np, false)
	}
}

// relay sends one upstream progress notification to the caller, with the
// caller's own token. inline is true for progress read from the call's own
// response stream (ordered before the result), false for progress that
// came out of band.
func (t *progressTarget) relay(up *mcp.ProgressNotificationParams, inline bool) {
	np := *up
	np.ProgressToken = t.callerToken
	t.emit(&np)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !inline {
		t.relayed++
	}
	if np.Total > 0 && np.Progress >= np.Total && !t.finished {
		t.finished = true
		close(t.final)
	}
}

// settle waits (at most progressSettle) for out-of-band progress on its
// way, once some came and the call has its result, so that it reaches the
// caller before the result, never after.
func (t *progressTarget) settle() {
	t.mu.Lock()
	pending := t.relayed > 0 && !t.finished
	t.mu.Unlock()
	if pending {
		select {
		case <-t.final:
		case <-time.After(progressSettle):
		}
	}
}

// progressMessage is the notifications/progress message for np.
func progressMessage(np *mcp.ProgressNotificationParams) ([]byte, error) {
	return json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": np})
}
