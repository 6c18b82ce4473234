// Package catalogues keeps other hosts' fleets' tool catalogues for the
// merged catalogue (docs/ARCHITECTURE.md "Remote fleets"): fetched over
// the federation when a host's presence announces a hash not cached here,
// checked against that hash, kept on disk under the state dir, and kept
// listed while their host is away. It also follows each peer's state for
// the calls in flight to it (Set.Host: a channel closed when the host
// leaves the online state).
package catalogues

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Source is what the cache asks of the federation (proxy.Remote, and so
// *federation.Federation, has both methods).
type Source interface {
	// View is the union view (federation.Federation.View).
	View() []peerview.HostView
	// Catalogue fetches fleet's tools array on host and its SHA-256
	// (federation.Federation.Catalogue).
	Catalogue(ctx context.Context, host, fleet string) (json.RawMessage, string, error)
}

// Remote fleets in the merged catalogue (docs/ARCHITECTURE.md "Remote
// fleets"). Every host's presence carries, per fleet, the SHA-256 of the
// fleet's tools/list as that host last read it (CatalogueHash). When the
// hash a host announces differs from the one cached here, the fleet's
// catalogue is fetched over the federation (Remote.Catalogue: a signed
// catalogue-request), checked against its hash, cached on disk and merged
// like a local fleet's under the name NAME@HOST. A host that goes offline
// keeps its fleets' tools listed from the cache, as a stopped local fleet
// does; a call to one is a tool error naming the host and when it was
// last seen (remote_call.go).

// Sum is the SHA-256, in lower-case hex, of a tools array's JSON: what
// proxy.Proxy.CatalogueHash computes of a local fleet's catalogue.json,
// and what a catalogue-reply's hash must be.
func Sum(tools []byte) string {
	h := sha256.Sum256(tools)
	return hex.EncodeToString(h[:])
}

// Dir is where remote fleets' catalogues are kept, under the state dir: remote-catalogues/<host>/<fleet>.json, and per host
// _host.json (when it was last seen). A fleet name starts with a letter
// (wire.ValidFleetName), so the cache's own file never has a fleet's name:
// it was host.json, which a remote fleet named `host` overwrote (issue 27
// item 6); a legacy host.json is still read once.
const Dir = "remote-catalogues"

// remoteHostFile is the per-host file of the cache; legacyHostFile its
// name before issue 27.
const (
	remoteHostFile = "_host.json"
	legacyHostFile = "host.json"
)

// Bounds of the remote catalogue upkeep.
const (
	// remoteFetches bounds catalogue fetches at once.
	remoteFetches = 4
	// remoteRetry is the least time between two fetches of one fleet's
	// catalogue after a failure (one whose hash did not change since);
	// it doubles with each failure in a row, up to remoteRetryMax, so a
	// peer that does not trust this host (which dead-letters every
	// request) is not asked every 10 s without end (issue 27 item 9).
	remoteRetry    = 10 * time.Second
	remoteRetryMax = 10 * time.Minute
	// lastSeenEvery is how often an online host's last-seen time is
	// written to disk (it is also written when the host goes away).
	lastSeenEvery = time.Minute
)

// remoteCatalogue is one remote fleet's cached catalogue, as stored.
type remoteCatalogue struct {
	Host    string          `json:"host"`
	Fleet   string          `json:"fleet"`
	Hash    string          `json:"hash"`
	Fetched time.Time       `json:"fetched"`
	Tools   json.RawMessage `json:"tools"`

	tools []*mcp.Tool // Tools decoded
}

// remoteHost is what the cache knows of one peer host.
type remoteHost struct {
	// peer is the host as the view last showed it, its Host, State and
	// LastSeen only (its fleets are the catalogues'); LastSeen is zero
	// when never seen, not even in an earlier run (it is kept on disk).
	peer  peerview.HostView
	saved time.Time // when peer.LastSeen was last written
	// down is closed when the host leaves the online state; calls in
	// flight to it select on it. A fresh one is made when it comes back.
	down chan struct{}
}

// Set keeps the remote fleets' catalogues and the peers' states. Its
// fetches run in goroutines it owns, bounded, ended with the context Sync
// was given; Wait waits for them.
type Set struct {
	r    Source
	dir  string // <state_dir>/remote-catalogues
	log  *slog.Logger
	kick func() // the catalogue changed: merge again
	// fetchTimeout bounds one catalogue fetch.
	fetchTimeout time.Duration

	mu       sync.Mutex
	cats     map[string]*remoteCatalogue // guarded by mu: "fleet@host" → catalogue
	hosts    map[string]*remoteHost      // guarded by mu: host → what is known
	gen      uint64                      // guarded by mu: bumped when cats changes
	fetching map[string]bool             // guarded by mu: "fleet@host" being fetched
	failed   map[string]fetchFailure     // guarded by mu: "fleet@host" → its last failed fetch
	sem      chan struct{}
	wg       sync.WaitGroup // the fetches
}

// fetchFailure is the last failed fetch of one hash, retried after
// retryAfter.
type fetchFailure struct {
	hash string
	at   time.Time
	n    int // failures of this hash in a row
}

// retryAfter is remoteRetry doubled for each failure after the first, at
// most remoteRetryMax.
func (f fetchFailure) retryAfter() time.Duration {
	d := remoteRetry
	for i := 1; i < f.n && d < remoteRetryMax; i++ {
		d *= 2
	}
	return min(d, remoteRetryMax)
}

// New loads the cached catalogues and last-seen times from dir; kick is
// called (never under a lock) when the catalogues changed and the merged
// catalogue should be made again.
func New(r Source, dir string, log *slog.Logger, kick func()) *Set {
	s := &Set{r: r, dir: dir, log: log, kick: kick, fetchTimeout: 30 * time.Second,
		cats: map[string]*remoteCatalogue{}, hosts: map[string]*remoteHost{}, fetching: map[string]bool{},
		failed: map[string]fetchFailure{}, sem: make(chan struct{}, remoteFetches)}
	s.load()
	return s
}

// load reads the cache: a file that does not decode, or names another
// host or fleet than its path, is skipped (and logged).
func (s *Set) load() {
	hosts, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, h := range hosts {
		host := h.Name()
		if !h.IsDir() || identity.CheckHost(host) != nil {
			continue
		}
		hd := filepath.Join(s.dir, host)
		// Listed from the start (the first sync drops a host no longer
		// trusted): not seen yet in this run, last seen as recorded.
		rh := &remoteHost{peer: peerview.HostView{Host: host, State: peerview.HostNeverSeen}, down: closedChan()}
		if at, ok := readHostFile(filepath.Join(hd, remoteHostFile)); ok {
			rh.peer.LastSeen, rh.saved = at, at
		} else if at, ok := readHostFile(filepath.Join(hd, legacyHostFile)); ok {
			// Written before the rename: the last-seen time, not a
			// catalogue of a fleet named host. Moved to its new name.
			rh.peer.LastSeen, rh.saved = at, at
			b, _ := json.Marshal(map[string]any{"last_seen": at.UTC()})
			if writePrivate(filepath.Join(hd, remoteHostFile), b) == nil {
				_ = os.Remove(filepath.Join(hd, legacyHostFile))
			}
		}
		s.hosts[host] = rh
		files, _ := os.ReadDir(hd)
		for _, f := range files {
			fleet, ok := strings.CutSuffix(f.Name(), ".json")
			if !ok || !wire.ValidFleetName(fleet) {
				continue
			}
			path := filepath.Join(hd, f.Name())
			c, err := readRemoteCatalogue(path)
			if err == nil && (c.Host != host || c.Fleet != fleet) {
				err = fmt.Errorf("it names %s@%s", c.Fleet, c.Host)
			}
			if err != nil {
				s.log.Warn("remote catalogue cache skipped", "file", path, "err", err)
				continue
			}
			s.cats[peerview.RemoteName(fleet, host)] = c
		}
	}
	s.gen++
}

// readHostFile reads a host's last-seen file; ok is false when there is
// none, or the file is something else (a catalogue has "tools").
func readHostFile(path string) (time.Time, bool) {
	b, err := atomicfile.Read(path, atomicfile.MaxSmall)
	if err != nil {
		return time.Time{}, false
	}
	var hj struct {
		LastSeen time.Time       `json:"last_seen"`
		Tools    json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(b, &hj) != nil || hj.Tools != nil || hj.LastSeen.IsZero() {
		return time.Time{}, false
	}
	return hj.LastSeen, true
}

func readRemoteCatalogue(path string) (*remoteCatalogue, error) {
	b, err := atomicfile.Read(path, atomicfile.MaxCatalogue)
	if err != nil {
		return nil, err
	}
	c := &remoteCatalogue{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(c.Tools, &c.tools); err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	return c, nil
}

// closedChan is a closed channel: the down signal of a host not online.
func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// PerFleet returns the cached catalogues of the remote fleets to merge,
// "fleet@host" → tools, and the generation they are of. Hosts no longer
// in the view (removed from the trust list) are left out.
func (s *Set) PerFleet() (map[string][]*mcp.Tool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]*mcp.Tool, len(s.cats))
	for k, c := range s.cats {
		if _, ok := s.hosts[c.Host]; ok {
			out[k] = c.tools
		}
	}
	return out, s.gen
}

// Host returns what is known of host (its Host, State and LastSeen;
// never-seen when it is not known) and the channel closed when it leaves
// the online state.
func (s *Set) Host(host string) (peerview.HostView, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hosts[host]
	if h == nil {
		return peerview.HostView{Host: host, State: peerview.HostNeverSeen}, closedChan()
	}
	return h.peer, h.down
}

// Sync brings the set in line with the federation's view: host states
// (closing the down channel of a host that left the online state),
// last-seen times (kept on disk), fleets an online host no longer has
// (dropped), and catalogues whose hash changed (fetched in the
// background, bounded). It does not block on the network.
func (s *Set) Sync(ctx context.Context) {
	view := s.r.View()
	now := time.Now()
	type fetch struct{ host, fleet, hash string }
	var todo []fetch
	var save []string
	changed := false
	s.mu.Lock()
	inView := map[string]bool{}
	for _, hv := range view {
		inView[hv.Host] = true
		h := s.hosts[hv.Host]
		if h == nil {
			h = &remoteHost{peer: peerview.HostView{Host: hv.Host, State: peerview.HostNeverSeen}, down: closedChan()}
			s.hosts[hv.Host] = h
			changed = true // its cached fleets (if any) are listed now
		}
		if !hv.LastSeen.IsZero() {
			h.peer.LastSeen = hv.LastSeen
		}
		was := h.peer.State
		h.peer.State = hv.State
		switch {
		case was != peerview.HostOnline && hv.State == peerview.HostOnline:
			h.down = make(chan struct{})
		case was == peerview.HostOnline && hv.State != peerview.HostOnline:
			close(h.down)
			save = append(save, hv.Host)
		}
		if hv.State == peerview.HostOnline && now.Sub(h.saved) >= lastSeenEvery {
			save = append(save, hv.Host)
		}
		if hv.State != peerview.HostOnline {
			continue // its fleets as last known: kept
		}
		has := map[string]bool{}
		for _, fs := range hv.Fleets {
			key := peerview.RemoteName(fs.Name, hv.Host)
			has[key] = true
			if fs.Catalogue == "" || s.fetching[key] {
				continue // the host does not know it (yet): keep what is cached
			}
			if c := s.cats[key]; c != nil && c.Hash == fs.Catalogue {
				continue
			}
			if f, ok := s.failed[key]; ok && f.hash == fs.Catalogue && now.Sub(f.at) < f.retryAfter() {
				continue
			}
			s.fetching[key] = true
			todo = append(todo, fetch{hv.Host, fs.Name, fs.Catalogue})
		}
		if hv.Truncated == 0 {
			for key, c := range s.cats {
				if c.Host == hv.Host && !has[key] {
					// The host no longer has this fleet (removed from its
					// config): its tools go.
					delete(s.cats, key)
					changed = true
					_ = os.Remove(filepath.Join(s.dir, c.Host, c.Fleet+".json"))
				}
			}
		}
	}
	for host := range s.hosts {
		if !inView[host] {
			delete(s.hosts, host) // no longer trusted: not listed, not called
			changed = true
		}
	}
	if changed {
		s.gen++
	}
	s.mu.Unlock()
	for _, host := range save {
		s.saveHost(host)
	}
	if changed {
		s.kick()
	}
	for _, f := range todo {
		s.wg.Go(func() { s.fetch(ctx, f.host, f.fleet, f.hash) })
	}
}

// saveHost writes host's last-seen time to disk.
func (s *Set) saveHost(host string) {
	s.mu.Lock()
	h := s.hosts[host]
	var at time.Time
	if h != nil {
		at = h.peer.LastSeen
		h.saved = time.Now()
	}
	s.mu.Unlock()
	if at.IsZero() {
		return
	}
	b, _ := json.Marshal(map[string]any{"last_seen": at.UTC()})
	if err := writePrivate(filepath.Join(s.dir, host, remoteHostFile), b); err != nil {
		s.log.Warn("remote host's last-seen time not saved", "host", host, "err", err)
	}
}

// fetch gets fleet's catalogue from host (announced with hash want),
// checks it, caches it on disk and in memory, and asks for a merge.
func (s *Set) fetch(ctx context.Context, host, fleet, want string) {
	key := peerview.RemoteName(fleet, host)
	defer func() {
		s.mu.Lock()
		delete(s.fetching, key)
		s.mu.Unlock()
	}()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-s.sem }()
	fctx, cancel := context.WithTimeout(ctx, s.fetchTimeout)
	defer cancel()
	c, err := s.fetchOne(fctx, host, fleet)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("remote catalogue not fetched", "fleet", key, "hash", want, "err", err)
		}
		s.mu.Lock()
		n := 1
		if prev, ok := s.failed[key]; ok && prev.hash == want {
			n = prev.n + 1
		}
		s.failed[key] = fetchFailure{hash: want, at: time.Now(), n: n}
		s.mu.Unlock()
		return
	}
	b, err := json.Marshal(c)
	if err == nil {
		err = writePrivate(filepath.Join(s.dir, host, fleet+".json"), b)
	}
	if err != nil {
		s.log.Warn("remote catalogue not cached on disk", "fleet", key, "err", err)
	}
	s.mu.Lock()
	delete(s.failed, key)
	_, trusted := s.hosts[host]
	if trusted {
		s.cats[key] = c
		s.gen++
	}
	s.mu.Unlock()
	s.log.Info("remote catalogue fetched", "fleet", key, "tools", len(c.tools), "hash", c.Hash)
	if trusted {
		s.kick()
	}
}

// fetchOne asks host for fleet's catalogue and checks the answer: the
// tools decode and hash to what the reply says.
func (s *Set) fetchOne(ctx context.Context, host, fleet string) (*remoteCatalogue, error) {
	tools, hash, err := s.r.Catalogue(ctx, host, fleet)
	if err != nil {
		return nil, err
	}
	if len(tools) == 0 {
		tools = json.RawMessage("[]")
	}
	if got := Sum(tools); got != hash {
		return nil, fmt.Errorf("the catalogue's SHA-256 is %s, the reply says %s", got, hash)
	}
	c := &remoteCatalogue{Host: host, Fleet: fleet, Hash: hash, Fetched: time.Now().UTC(), Tools: tools}
	if err := json.Unmarshal(tools, &c.tools); err != nil {
		return nil, fmt.Errorf("the catalogue's tools do not decode: %w", err)
	}
	return c, nil
}

// Wait waits for the fetches in flight (their context ended).
func (s *Set) Wait() { s.wg.Wait() }

// writePrivate writes b to path (0600, its directory 0700 and created as
// needed) through a temporary file and a rename, so a reader never sees
// half a file.
func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
