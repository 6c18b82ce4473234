package catalogues

import (
	"context"
	"encoding/json"
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

// scriptedSource is a federation whose view and catalogue answers a test
// sets: the cache's own bookkeeping is what is under test; the federation
// itself is tested against real brokers in package federation and, wired
// to the proxy, in e2e (TestRemoteFleetTools, TestRemoteHostGone).
type scriptedSource struct {
	mu      sync.Mutex
	view    []peerview.HostView
	tools   map[string]json.RawMessage // "fleet@host" → the tools a catalogue request answers
	lie     map[string]string          // "fleet@host" → a hash to answer instead of the true one
	fetches map[string]int             // "fleet@host" → catalogue requests
}

func (r *scriptedSource) setView(v []peerview.HostView) { r.mu.Lock(); r.view = v; r.mu.Unlock() }
func (r *scriptedSource) View() []peerview.HostView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]peerview.HostView(nil), r.view...)
}
func (r *scriptedSource) Catalogue(_ context.Context, host, fleet string) (json.RawMessage, string, error) {
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
	return t, Sum(t), nil
}

func (r *scriptedSource) fetched(key string) int {
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
	r := &scriptedSource{tools: map[string]json.RawMessage{"docs@beta": docs, "ops@beta": ops}, lie: map[string]string{}, fetches: map[string]int{}}
	seen := time.Now().Add(-time.Second)
	r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: Sum(docs)}, {Name: "ops", Catalogue: strings.Repeat("0", 64)}}}})
	r.lie["ops@beta"] = strings.Repeat("0", 64) // a reply that says a hash its tools do not have
	kicks := make(chan struct{}, 16)
	s := New(r, dir, slog.New(slog.DiscardHandler), func() { kicks <- struct{}{} })
	ctx := context.Background()
	s.Sync(ctx)
	s.Wait()
	per, gen1 := s.PerFleet()
	if len(per) != 1 || len(per["docs@beta"]) != 2 || per["docs@beta"][0].Name != "fleet_whoami" {
		t.Fatalf("after the first sync: %v", per)
	}
	if hv, down := s.Host("beta"); hv.State != peerview.HostOnline || isClosed(down) {
		t.Fatalf("beta: %s, down closed %v", hv.State, isClosed(down))
	}
	fi, err := os.Stat(filepath.Join(dir, "beta", "docs.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "beta", "ops.json")); err == nil {
		t.Fatal("a catalogue whose hash does not match was cached")
	}
	// The same hashes again: nothing fetched (ops's failure waits for its retry time).
	s.Sync(ctx)
	s.Wait()
	if r.fetched("docs@beta") != 1 || r.fetched("ops@beta") != 1 {
		t.Fatalf("fetches %v", r.fetches)
	}

	// A new hash is fetched; a fleet gone from an online host's presence goes.
	docs2 := toolsJSON(t, "fleet_whoami")
	r.mu.Lock()
	r.tools["docs@beta"] = docs2
	r.mu.Unlock()
	r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: Sum(docs2)}}}})
	s.Sync(ctx)
	s.Wait()
	per, gen2 := s.PerFleet()
	if len(per["docs@beta"]) != 1 || gen2 == gen1 {
		t.Fatalf("after a new hash: %v (gen %d → %d)", per, gen1, gen2)
	}
	if len(kicks) == 0 {
		t.Fatal("no merge asked for")
	}

	// beta expires: its tools stay, its calls are woken, its last-seen time is kept.
	r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostExpired, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "docs", Catalogue: Sum(docs2)}}}})
	_, down := s.Host("beta")
	s.Sync(ctx)
	if !isClosed(down) {
		t.Fatal("an expired host's down channel is open")
	}
	if per, _ := s.PerFleet(); len(per["docs@beta"]) != 1 {
		t.Fatalf("an expired host's tools: %v", per)
	}

	// The next serve reads the cache: listed at once, last seen as saved.
	os.WriteFile(filepath.Join(dir, "beta", "bad.json"), []byte("{"), 0o600)
	b, _ := os.ReadFile(filepath.Join(dir, "beta", "docs.json"))
	os.WriteFile(filepath.Join(dir, "beta", "other.json"), b, 0o600) // names docs, not other
	s2 := New(r, dir, slog.New(slog.DiscardHandler), func() {})
	per, _ = s2.PerFleet()
	if len(per) != 1 || len(per["docs@beta"]) != 1 {
		t.Fatalf("read back: %v", per)
	}
	hv, _ := s2.Host("beta")
	st, last := hv.State, hv.LastSeen
	if st != peerview.HostNeverSeen || last.Sub(seen).Abs() > time.Millisecond {
		t.Fatalf("beta read back: %s, last seen %v (want %v)", st, last, seen)
	}

	// beta no longer trusted (gone from the view): not listed.
	r.setView(nil)
	s2.Sync(ctx)
	if per, _ := s2.PerFleet(); len(per) != 0 {
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

// TestRemoteFleetNamedHost (issue 27 item 6): the cache's own per-host
// file was host.json, so a remote fleet named `host` had its catalogue
// overwritten by the host's last-seen time (and every serve start warned
// about host.json). The cache's file is now named so that no fleet can
// have its name; a host.json written before is read once and moved.
func TestRemoteFleetNamedHost(t *testing.T) {
	dir := t.TempDir()
	tools := toolsJSON(t, "host_tool")
	r := &scriptedSource{tools: map[string]json.RawMessage{"host@beta": tools}, lie: map[string]string{}, fetches: map[string]int{}}
	seen := time.Now().Add(-time.Second)
	r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "host", Catalogue: Sum(tools)}}}})
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := New(r, dir, log, func() {})
	ctx := context.Background()
	s.Sync(ctx)
	s.Wait()
	// beta goes away: its last-seen time is saved.
	r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostExpired, LastSeen: seen,
		Fleets: []wire.FleetSummary{{Name: "host", Catalogue: Sum(tools)}}}})
	s.Sync(ctx)
	s2 := New(r, dir, log, func() {})
	per, _ := s2.PerFleet()
	if len(per["host@beta"]) != 1 || per["host@beta"][0].Name != "host_tool" {
		t.Fatalf("fleet host@beta read back: %v", per)
	}
	if hv, _ := s2.Host("beta"); hv.LastSeen.Sub(seen).Abs() > time.Millisecond {
		t.Fatalf("beta's last-seen read back: %v, want %v", hv.LastSeen, seen)
	}
	if strings.Contains(logs.String(), "skipped") {
		t.Fatalf("a cache file was skipped: %s", logs.String())
	}

	// A cache written before: host.json holds the last-seen time.
	old := t.TempDir()
	os.MkdirAll(filepath.Join(old, "gamma"), 0o700)
	os.WriteFile(filepath.Join(old, "gamma", "host.json"), []byte(`{"last_seen":"2026-01-02T03:04:05Z"}`), 0o600)
	logs.Reset()
	s3 := New(r, old, log, func() {})
	if hv, _ := s3.Host("gamma"); !hv.LastSeen.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("legacy host.json: last seen %v", hv.LastSeen)
	}
	if _, err := os.Stat(filepath.Join(old, "gamma", "host.json")); err == nil {
		t.Fatal("legacy host.json not moved")
	}
	if strings.Contains(logs.String(), "skipped") {
		t.Fatalf("legacy host.json warned about: %s", logs.String())
	}
}

// TestRemoteCatalogueBackoff (issue 27 item 9): a catalogue fetch that
// keeps failing — a peer that does not trust this host dead-letters every
// request — was retried every 10 s without end. The wait now doubles
// with each failure of the same hash (10 s, 20 s, 40 s … at most 10 min),
// and a new hash is fetched at once.
func TestRemoteCatalogueBackoff(t *testing.T) {
	r := &scriptedSource{tools: map[string]json.RawMessage{}, lie: map[string]string{}, fetches: map[string]int{}}
	hash := strings.Repeat("1", 64)
	view := func(h string) {
		r.setView([]peerview.HostView{{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: time.Now(),
			Fleets: []wire.FleetSummary{{Name: "ops", Catalogue: h}}}})
	}
	view(hash)
	s := New(r, t.TempDir(), slog.New(slog.DiscardHandler), func() {})
	ctx := context.Background()
	step := func(ago time.Duration) int {
		s.mu.Lock()
		f := s.failed["ops@beta"]
		f.at = time.Now().Add(-ago)
		s.failed["ops@beta"] = f
		s.mu.Unlock()
		s.Sync(ctx)
		s.Wait()
		return r.fetched("ops@beta")
	}
	s.Sync(ctx)
	s.Wait()
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
	s.Sync(ctx)
	s.Wait()
	if n := r.fetched("ops@beta"); n != 10 {
		t.Fatalf("a new hash: %d fetches, want 10", n)
	}
}
