package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// scriptedRemote is a federation whose view and catalogue answers a test
// sets: the proxy's own bookkeeping (remoteSet) is what is under test; the
// federation itself is tested against real brokers in package federation
// and, wired to the proxy, in e2e (TestRemoteFleetTools, TestRemoteHostGone).
type scriptedRemote struct {
	mu      sync.Mutex
	view    []federation.HostView
	tools   map[string]json.RawMessage // "fleet@host" → the tools a catalogue request answers
	lie     map[string]string          // "fleet@host" → a hash to answer instead of the true one
	fetches map[string]int             // "fleet@host" → catalogue requests
	lost    string                     // not "": this host has lost the broker, with this error
	callErr error                      // what Call returns
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
func (r *scriptedRemote) Catalogue(_ context.Context, host, fleet string) (json.RawMessage, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := peerview.RemoteName(fleet, host)
	r.fetches[key]++
	t, ok := r.tools[key]
	if !ok {
		return nil, "", &federation.ControlError{Host: host, Verb: "catalogue", Fleet: fleet, Err: federation.ErrFailed, Msg: "no such fleet"}
	}
	if h, ok := r.lie[key]; ok {
		return t, h, nil
	}
	return t, catalogueSum(t), nil
}

func (r *scriptedRemote) fetched(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetches[key]
}

// toolsJSON is a tools array of tools with these names.
func toolsJSON(t *testing.T, names ...string) json.RawMessage {
	t.Helper()
	var tools []*mcp.Tool
	for _, n := range names {
		tools = append(tools, &mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}})
	}
	b, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRemoteCatalogues: remote fleets' catalogues follow the hashes
// presence announces: fetched when a hash is new, checked against their
// hash (a reply whose tools do not hash to what it says is not cached),
// cached on disk (0600) and read back by the next serve, listed under
// NAME@HOST; an online host's fleet that is gone from its presence is
// dropped, an expired host's fleets are kept (and the host's calls are
// woken: its down channel closes), a host no longer trusted (not in the
// view) is not listed; a cache file that does not decode or names another
// fleet is skipped.
func TestRemoteCatalogues(t *testing.T) {
	dir := t.TempDir()
	docs, ops := toolsJSON(t, "fleet_whoami", "fleet_slow"), toolsJSON(t, "ops_tool")
	r := &scriptedRemote{tools: map[string]json.RawMessage{"docs@beta": docs, "ops@beta": ops}, lie: map[string]string{}, fetches: map[string]int{}}
	seen := time.Now().Add(-time.Second)
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: catalogueSum(docs)}, {Name: "ops", Catalogue: strings.Repeat("0", 64)}}}})
	r.lie["ops@beta"] = strings.Repeat("0", 64) // a reply that says a hash its tools do not have
	kicks := make(chan struct{}, 16)
	s := newRemoteSet(r, dir, slog.New(slog.DiscardHandler), func() { kicks <- struct{}{} })
	ctx := context.Background()
	s.sync(ctx)
	s.wait()
	per, gen1 := s.perFleet()
	if len(per) != 1 || len(per["docs@beta"]) != 2 || per["docs@beta"][0].Name != "fleet_whoami" {
		t.Fatalf("after the first sync: %v", per)
	}
	if st, _, down := s.host("beta"); st != federation.HostOnline || isClosed(down) {
		t.Fatalf("beta: %s, down closed %v", st, isClosed(down))
	}
	fi, err := os.Stat(filepath.Join(dir, "beta", "docs.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "beta", "ops.json")); err == nil {
		t.Fatal("a catalogue whose hash does not match was cached")
	}
	// The same hashes again: nothing fetched (ops's failure waits for its retry time).
	s.sync(ctx)
	s.wait()
	if r.fetched("docs@beta") != 1 || r.fetched("ops@beta") != 1 {
		t.Fatalf("fetches %v", r.fetches)
	}

	// A new hash is fetched; a fleet gone from an online host's presence goes.
	docs2 := toolsJSON(t, "fleet_whoami")
	r.mu.Lock()
	r.tools["docs@beta"] = docs2
	r.mu.Unlock()
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: catalogueSum(docs2)}}}})
	s.sync(ctx)
	s.wait()
	per, gen2 := s.perFleet()
	if len(per["docs@beta"]) != 1 || gen2 == gen1 {
		t.Fatalf("after a new hash: %v (gen %d → %d)", per, gen1, gen2)
	}
	if len(kicks) == 0 {
		t.Fatal("no merge asked for")
	}

	// beta expires: its tools stay, its calls are woken, its last-seen time is kept.
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostExpired, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: catalogueSum(docs2)}}}})
	_, _, down := s.host("beta")
	s.sync(ctx)
	if !isClosed(down) {
		t.Fatal("an expired host's down channel is open")
	}
	if per, _ := s.perFleet(); len(per["docs@beta"]) != 1 {
		t.Fatalf("an expired host's tools: %v", per)
	}

	// The next serve reads the cache: listed at once, last seen as saved.
	os.WriteFile(filepath.Join(dir, "beta", "bad.json"), []byte("{"), 0o600)
	b, _ := os.ReadFile(filepath.Join(dir, "beta", "docs.json"))
	os.WriteFile(filepath.Join(dir, "beta", "other.json"), b, 0o600) // names docs, not other
	s2 := newRemoteSet(r, dir, slog.New(slog.DiscardHandler), func() {})
	per, _ = s2.perFleet()
	if len(per) != 1 || len(per["docs@beta"]) != 1 {
		t.Fatalf("read back: %v", per)
	}
	st, last, _ := s2.host("beta")
	if st != federation.HostNeverSeen || last.Sub(seen).Abs() > time.Millisecond {
		t.Fatalf("beta read back: %s, last seen %v (want %v)", st, last, seen)
	}
	if !strings.Contains(hostAway("beta", st, last), "has not been heard from since this manager started, last seen ") {
		t.Fatalf("hostAway: %s", hostAway("beta", st, last))
	}

	// beta no longer trusted (gone from the view): not listed.
	r.setView(nil)
	s2.sync(ctx)
	if per, _ := s2.perFleet(); len(per) != 0 {
		t.Fatalf("an untrusted host's fleets listed: %v", per)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
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

// TestRemoteFleetNamedHost (issue 27 item 6): the cache's own per-host
// file was host.json, so a remote fleet named `host` had its catalogue
// overwritten by the host's last-seen time (and every serve start warned
// about host.json). The cache's file is now named so that no fleet can
// have its name; a host.json written before is read once and moved.
func TestRemoteFleetNamedHost(t *testing.T) {
	dir := t.TempDir()
	tools := toolsJSON(t, "host_tool")
	r := &scriptedRemote{tools: map[string]json.RawMessage{"host@beta": tools}, lie: map[string]string{}, fetches: map[string]int{}}
	seen := time.Now().Add(-time.Second)
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "host", Catalogue: catalogueSum(tools)}}}})
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := newRemoteSet(r, dir, log, func() {})
	ctx := context.Background()
	s.sync(ctx)
	s.wait()
	// beta goes away: its last-seen time is saved.
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostExpired, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "host", Catalogue: catalogueSum(tools)}}}})
	s.sync(ctx)
	s2 := newRemoteSet(r, dir, log, func() {})
	per, _ := s2.perFleet()
	if len(per["host@beta"]) != 1 || per["host@beta"][0].Name != "host_tool" {
		t.Fatalf("fleet host@beta read back: %v", per)
	}
	if _, last, _ := s2.host("beta"); last.Sub(seen).Abs() > time.Millisecond {
		t.Fatalf("beta's last-seen read back: %v, want %v", last, seen)
	}
	if strings.Contains(logs.String(), "skipped") {
		t.Fatalf("a cache file was skipped: %s", logs.String())
	}

	// A cache written before: host.json holds the last-seen time.
	old := t.TempDir()
	os.MkdirAll(filepath.Join(old, "gamma"), 0o700)
	os.WriteFile(filepath.Join(old, "gamma", "host.json"), []byte(`{"last_seen":"2026-01-02T03:04:05Z"}`), 0o600)
	logs.Reset()
	s3 := newRemoteSet(r, old, log, func() {})
	if _, last, _ := s3.host("gamma"); !last.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("legacy host.json: last seen %v", last)
	}
	if _, err := os.Stat(filepath.Join(old, "gamma", "host.json")); err == nil {
		t.Fatal("legacy host.json not moved")
	}
	if strings.Contains(logs.String(), "skipped") {
		t.Fatalf("legacy host.json warned about: %s", logs.String())
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
	r := &scriptedRemote{lie: map[string]string{}, fetches: map[string]int{}, tools: map[string]json.RawMessage{}}
	r.setView([]federation.HostView{{Host: "beta", State: federation.HostExpired, LastSeen: time.Now().Add(-10 * time.Second)}})
	p := New(Options{Manager: m, Version: "test", Remote: r})
	ctx := context.Background()
	r.mu.Lock()
	r.lost = "broker connection lost: Exception (320) CONNECTION_FORCED"
	r.mu.Unlock()
	p.remote.sync(ctx)
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
	p.remote.sync(ctx)
	res = p.routeRemote(ctx, &toolCall{name: "fleet_whoami"}, "docs", "beta", json.RawMessage(`{}`), nil)
	got = textOfResult(res.result)
	if !strings.Contains(got, "fleet docs@beta:") || !strings.Contains(got, "may have run on beta; check before calling it again") || strings.Contains(got, "call it again") {
		t.Errorf("sent, then no answer: %q", got)
	}
}

// TestRemoteCatalogueBackoff (issue 27 item 9): a catalogue fetch that
// keeps failing — a peer that does not trust this host dead-letters every
// request — was retried every 10 s without end. The wait now doubles
// with each failure of the same hash (10 s, 20 s, 40 s … at most 10 min),
// and a new hash is fetched at once.
func TestRemoteCatalogueBackoff(t *testing.T) {
	r := &scriptedRemote{tools: map[string]json.RawMessage{}, lie: map[string]string{}, fetches: map[string]int{}}
	hash := strings.Repeat("1", 64)
	view := func(h string) {
		r.setView([]federation.HostView{{Host: "beta", State: federation.HostOnline, Online: true, LastSeen: time.Now(),
			Fleets: []wire.FleetSummary{{Name: "ops", Catalogue: h}}}})
	}
	view(hash)
	s := newRemoteSet(r, t.TempDir(), slog.New(slog.DiscardHandler), func() {})
	ctx := context.Background()
	step := func(ago time.Duration) int {
		s.mu.Lock()
		f := s.failed["ops@beta"]
		f.at = time.Now().Add(-ago)
		s.failed["ops@beta"] = f
		s.mu.Unlock()
		s.sync(ctx)
		s.wait()
		return r.fetched("ops@beta")
	}
	s.sync(ctx)
	s.wait()
	if n := r.fetched("ops@beta"); n != 1 {
		t.Fatalf("first sync: %d fetches", n)
	}
	for i, c := range []struct {
		ago  time.Duration
		want int
	}{
		{11 * time.Second, 2}, // 10 s after the first failure
		{11 * time.Second, 2}, // the second wants 20 s
		{21 * time.Second, 3}, // …
		{39 * time.Second, 3}, // the third wants 40 s
		{41 * time.Second, 4},
		{79 * time.Second, 4}, // the fourth wants 80 s
		{81 * time.Second, 5},
		{159 * time.Second, 5}, // the fifth 160 s
		{161 * time.Second, 6},
		{319 * time.Second, 6}, // the sixth 320 s
		{321 * time.Second, 7},
		{599 * time.Second, 7}, // the seventh 640 s, capped at 10 min
		{601 * time.Second, 8},
		{601 * time.Second, 9}, // and it stays there
	} {
		if n := step(c.ago); n != c.want {
			t.Fatalf("step %d (%s after the last failure): %d fetches, want %d", i, c.ago, n, c.want)
		}
	}
	view(strings.Repeat("2", 64)) // a new hash: asked at once
	s.sync(ctx)
	s.wait()
	if n := r.fetched("ops@beta"); n != 10 {
		t.Fatalf("a new hash: %d fetches, want 10", n)
	}
}
