package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// scriptedRemote is a federation whose view, connection state and call
// answer a test sets: the proxy's handling of a remote call is what is
// under test (the catalogue cache has its own tests in
// federation/catalogues; the federation itself is tested against real
// brokers in package federation and, wired to the proxy, in e2e).
type scriptedRemote struct {
	mu      sync.Mutex
	view    []federation.HostView
	lost    string // not "": this host has lost the broker, with this error
	callErr error  // what Call returns
}

func (r *scriptedRemote) Host() string             { return "alpha" }
func (r *scriptedRemote) Changes() <-chan struct{} { return make(chan struct{}) }
func (r *scriptedRemote) Status() federation.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return federation.Status{Connected: r.lost == "", LastError: r.lost}
}
func (r *scriptedRemote) setView(v []federation.HostView) { r.mu.Lock(); r.view = v; r.mu.Unlock() }
func (r *scriptedRemote) View() []federation.HostView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]federation.HostView(nil), r.view...)
}
func (r *scriptedRemote) Control(context.Context, string, string, string, json.RawMessage) (json.RawMessage, error) {
	return nil, errors.New("not scripted")
}
func (r *scriptedRemote) Call(context.Context, string, string, string, json.RawMessage, federation.CallOptions) (json.RawMessage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.callErr != nil {
		return nil, r.callErr
	}
	return nil, errors.New("not scripted")
}
func (r *scriptedRemote) Catalogue(context.Context, string, string) (json.RawMessage, string, error) {
	return nil, "", errors.New("not scripted")
}

// TestRemoteErrors: what a caller reads when a remote call got no answer,
// per cause: the fleet, the tool, why, and what to do.
func TestRemoteErrors(t *testing.T) {
	ce := func(err error, reason wire.Reason, msg string) *federation.ControlError {
		return &federation.ControlError{Host: "beta", Verb: "call fleet_slow", Fleet: "docs", Err: err, Reason: reason, Msg: msg}
	}
	for _, c := range []struct {
		err     *federation.ControlError
		outcome string
		want    string
	}{
		{ce(federation.ErrTimeout, "", "within 6s; host beta is online (last seen 1s ago)"+federation.MayStillRun), OutcomeTimeout,
			"fleet docs@beta: fleet_slow did not answer within 6s (call_timeout); host beta is online (last seen 1s ago); fleet_slow was delivered at most once and may have run on beta; check before calling it again (it is not retried); the fleet itself is not marked down"},
		{ce(federation.ErrRefused, wire.ReasonNotAuthorised, ""), OutcomeRefused,
			"fleet docs@beta: host beta refused the call of fleet_slow (not-authorised): its trust line for this host does not allow tool calls; ask beta's operator to add `calls` to it"},
		{ce(federation.ErrRefused, wire.ReasonUnknownVerb, ""), OutcomeRefused, "its manager does not serve tool calls"},
		{ce(federation.ErrNoRoute, "", ""), OutcomeHostDown, "the broker has no control queue for host beta, so fleet_slow was not sent"},
		{ce(federation.ErrNotConnected, "", "dial tcp: refused"), OutcomeError, "not connected to the federation broker (dial tcp: refused), so fleet_slow was not sent; `fleetmgr check` tells why"},
		{ce(federation.ErrConnectionLost, "", ""), OutcomeError, "fleet_slow was delivered at most once and may have run on beta; check before calling it again (it is not retried)"},
	} {
		got := remoteError(c.err, "fleet_slow", "docs@beta", "beta", 6*time.Second)
		if !strings.Contains(got, c.want) || remoteOutcome(c.err) != c.outcome {
			t.Errorf("%v: %q (%s), want %q (%s)", c.err.Err, got, remoteOutcome(c.err), c.want, c.outcome)
		}
	}
	for st, want := range map[federation.HostState]string{
		federation.HostOffline:   "host beta's manager stopped (it announced going offline), last seen 2026-05-01T12:00:00Z (",
		federation.HostExpired:   "host beta stopped answering (no presence for 3 heartbeats), last seen 2026-05-01T12:00:00Z (",
		federation.HostNeverSeen: "host beta has not been heard from since this manager started, last seen 2026-05-01T12:00:00Z (",
	} {
		if got := hostAway("beta", st, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q", st, got)
		}
	}
	if got := hostAway("beta", federation.HostNeverSeen, time.Time{}); got != "host beta has not been heard from since this manager started, never seen" {
		t.Errorf("never seen: %q", got)
	}
}

// TestRemoteCallOwnBrokerLost (issue 27 items 5 and 8): while this host's
// own broker connection is down every peer goes silent, and a call to
// docs@beta said "host beta stopped answering" — blaming beta for this
// host's outage. It now says that this host has lost the broker, and that
// the call was not sent. A call that was sent and got no answer says it
// may have run on beta and to check before calling again, never "call it
// again".
func TestRemoteCallOwnBrokerLost(t *testing.T) {
	m := kbOnPort(t, 1025)
	r := &scriptedRemote{}
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostExpired, LastSeen: time.Now().Add(-10 * time.Second)}})
	p := New(Options{Manager: m, Version: "test", Remote: r})
	ctx := context.Background()
	r.mu.Lock()
	r.lost = "broker connection lost: Exception (320) CONNECTION_FORCED"
	r.mu.Unlock()
	p.remote.Sync(ctx)
	res := p.routeRemote(ctx, &toolCall{name: "fleet_whoami"}, "docs", "beta", json.RawMessage(`{}`), nil)
	got := textOfResult(res.result)
	for _, want := range []string{"fleet docs@beta: this host (alpha) has lost the federation broker (broker connection lost: Exception (320) CONNECTION_FORCED)",
		"so fleet_whoami was not sent"} {
		if !strings.Contains(got, want) {
			t.Errorf("own outage: %q, want %q", got, want)
		}
	}
	if strings.Contains(got, "stopped answering") {
		t.Errorf("own outage blamed on beta: %q", got)
	}

	// Connected again, beta online; the call goes out and the connection
	// drops while it waits.
	r.mu.Lock()
	r.lost = ""
	r.callErr = &federation.ControlError{Host: "beta", Verb: "call fleet_whoami", Fleet: "docs", Err: federation.ErrConnectionLost}
	r.mu.Unlock()
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: time.Now()}})
	p.remote.Sync(ctx)
	res = p.routeRemote(ctx, &toolCall{name: "fleet_whoami"}, "docs", "beta", json.RawMessage(`{}`), nil)
	got = textOfResult(res.result)
	if !strings.Contains(got, "fleet docs@beta:") || !strings.Contains(got, "may have run on beta; check before calling it again") || strings.Contains(got, "call it again") {
		t.Errorf("sent, then no answer: %q", got)
	}
}
