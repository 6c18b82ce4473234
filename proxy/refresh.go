package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// ListToolsTimeout bounds how long a refresh waits for one running
// fleet's tools/list (fleets are listed at once, so it bounds the whole
// local listing too). `fleetmgr reload` waits for a refresh.
const ListToolsTimeout = 5 * time.Second

// liveCatalogue is the merged catalogue in force (catalogue.go), the tools
// of it registered with the MCP server, and what the last refresh saw of
// each fleet.
type liveCatalogue struct {
	server *mcp.Server               // where the exposed tools are registered
	cur    atomic.Pointer[Catalogue] // the catalogue in force; every call reads it without a lock
	kick   chan struct{}             // asks Run for a refresh now (capacity 1)

	// remoteKick asks Run to merge again because a remote fleet's
	// catalogue changed (capacity 1); local fleets are not listed again.
	remoteKick chan struct{}

	mu         sync.Mutex             // held for a whole refresh: one at a time
	gens       map[string]string      // guarded by mu: fleet → phase + fleetd pid and start time, as last listed
	registered map[string][]byte      // guarded by mu: exposed tool name → JSON of the tool as registered
	lastLocal  map[string][]*mcp.Tool // guarded by mu: the local fleets' tools as last merged
	remoteGen  uint64                 // guarded by mu: the remote catalogues' generation last merged
	policyGen  string                 // guarded by mu: the tool policy's fingerprint last applied
	forcedAt   time.Time              // guarded by mu: when the last forced refresh that applied its catalogue began
}

// newLiveCatalogue returns an empty catalogue registering on server.
func newLiveCatalogue(server *mcp.Server) *liveCatalogue {
	c := &liveCatalogue{server: server, kick: make(chan struct{}, 1), remoteKick: make(chan struct{}, 1), gens: map[string]string{},
		registered: map[string][]byte{}}
	c.cur.Store(&Catalogue{Tools: map[string]*MergedTool{}})
	return c
}

// current returns the catalogue in force.
func (c *liveCatalogue) current() *Catalogue { return c.cur.Load() }

// apply makes cat the catalogue in force and registers its tools with the
// MCP server (handler gives each tool's), removing tools that vanished and
// re-adding only those whose definition changed, so clients get
// tools/list_changed exactly when the set changes. c.mu must be held.
func (c *liveCatalogue) apply(cat *Catalogue, handler func(name string) mcp.ToolHandler) {
	c.cur.Store(cat)
	var gone []string
	for name := range c.registered {
		if _, ok := cat.Tools[name]; !ok {
			gone = append(gone, name)
			delete(c.registered, name)
		}
	}
	if len(gone) > 0 {
		c.server.RemoveTools(gone...)
	}
	for name, mt := range cat.Tools {
		b, _ := json.Marshal(mt.Tool)
		if old, ok := c.registered[name]; ok && string(old) == string(b) {
			continue
		}
		c.registered[name] = b
		c.server.AddTool(mt.Tool, handler(name))
	}
}

// Kick asks Run to refresh the catalogue now (e.g. an upstream sent
// notifications/tools/list_changed, or a fleet was started).
func (p *Proxy) Kick() {
	select {
	case p.cat.kick <- struct{}{}:
	default:
	}
}

// remoteChanged asks Run to merge the remote fleets' catalogues again.
func (p *Proxy) remoteChanged() {
	select {
	case p.cat.remoteKick <- struct{}{}:
	default:
	}
}

// Run keeps the catalogue current until ctx ends: at once, then whenever
// kicked, and when a fleet's phase changed, looked for on every
// StateChanges signal and every RefreshEvery; with a
// Remote, it also follows the federation's view (runRemote); and it keeps
// fleetmgr_status's cached verdicts fresh while they are asked for
// (keepWarm). It closes all upstream sessions on return.
func (p *Proxy) Run(ctx context.Context) {
	defer p.ups.closeAll()
	warm := make(chan struct{})
	go func() { defer close(warm); p.keepWarm(ctx) }() // fleetmgr_status's cached verdicts
	defer func() { <-warm }()
	if p.remote != nil {
		done := make(chan struct{})
		go func() { defer close(done); p.runRemote(ctx) }()
		defer func() { <-done }()
	}
	t := time.NewTicker(p.opt.RefreshEvery)
	defer t.Stop()
	force := true
	for {
		if err := p.refresh(ctx, force); err != nil && ctx.Err() == nil {
			p.log.Warn("catalogue refresh", "err", err)
		}
		force = false
		select {
		case <-ctx.Done():
			return
		case <-p.cat.kick:
			force = true
		case <-p.cat.remoteKick:
		case <-p.opt.StateChanges: // nil: never
		case <-t.C:
		}
	}
}

// runRemote keeps the remote fleets' catalogues and the peers' states in
// line with the federation's view until ctx ends: at once, whenever the
// view changes (a host's beat with another fleet list or catalogue hash,
// an expiry, a clean stop) and every RefreshEvery (a fetch to retry). It
// waits for the fetches it started before returning.
func (p *Proxy) runRemote(ctx context.Context) {
	defer p.remote.Wait()
	t := time.NewTicker(p.opt.RefreshEvery)
	defer t.Stop()
	changes := p.opt.Remote.Changes()
	for {
		p.remote.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}

// Refresh re-reads every fleet's state and tools and updates the exposed
// tool set (clients are notified with tools/list_changed). A Kick not yet
// taken by Run is taken here (this refresh does what it asked for), and a
// forced refresh that began while this one waited for its turn read
// everything after the call began: then nothing is listed again. So a
// reload, which kicks and then refreshes, lists each fleet once or, when
// Run was already listing, twice; never more (each listing is bounded by
// ListToolsTimeout).
func (p *Proxy) Refresh(ctx context.Context) error {
	asked := time.Now()
	select {
	case <-p.cat.kick:
	default:
	}
	return p.refreshAsked(ctx, true, asked)
}

// catalogueCache is where fleet name's last tool list is kept.
func (p *Proxy) catalogueCache(name string) string {
	return filepath.Join(p.opt.Manager.FleetDir(name), "catalogue.json")
}

// refresh reads every fleet's state, tells the upstream set where the
// running fleets serve, and, when forced or when a fleet changed (another
// phase, another fleetd process, a fleet added or removed), lists every
// running fleet's tools again and applies the merged catalogue. A fleet
// that is down keeps the tools it last listed (its catalogue cache).
func (p *Proxy) refresh(ctx context.Context, force bool) error {
	return p.refreshAsked(ctx, force, time.Time{})
}

// refreshAsked is refresh for a caller that asked at asked (zero: always
// refresh): a forced refresh that began after asked makes this one
// needless.
func (p *Proxy) refreshAsked(ctx context.Context, force bool, asked time.Time) error {
	c := p.cat
	c.mu.Lock()
	defer c.mu.Unlock()
	if !asked.IsZero() && c.forcedAt.After(asked) {
		return nil
	}
	began := time.Now()
	mgr := p.opt.Manager
	names := mgr.Names() // configured, and removed from the file while running
	changed := force
	up := map[string]bool{}
	gens := map[string]string{}
	running := map[string]endpoint{}
	for _, name := range names {
		st, err := mgr.State(name)
		if err != nil {
			return err
		}
		up[name] = st.Shown.Phase == lifecycle.PhaseRunning
		if st.Shown.Phase == lifecycle.PhaseRunning && st.Port != 0 {
			// Where it runs, which a reload that changed its port or
			// mcp_path does not move until its next start.
			ep := endpoint{port: st.Port}
			if st.Launch != nil {
				ep.path = st.Launch.MCPPath
			}
			if f, err := mgr.Fleet(name); ep.path == "" && err == nil {
				ep.path = f.MCPPath
			}
			running[name] = ep
		}
		// A fleetd restarted between two looks (the supervisor is quick)
		// shows the same phase but another process, whose tools may
		// differ: re-list it too.
		gen := string(st.Shown.Phase)
		if st.Fleetd != nil {
			gen += fmt.Sprintf("/%d/%d", st.Fleetd.PID, st.Fleetd.StartTime)
		}
		gens[name] = gen
		if c.gens[name] != gen {
			changed = true
		}
	}
	if len(c.gens) != len(gens) {
		changed = true // a fleet was added to or removed from the config
	}
	p.ups.track(running, gens)
	var remote map[string][]*mcp.Tool
	var rgen uint64
	if p.remote != nil {
		remote, rgen = p.remote.PerFleet()
	}
	pol := p.toolPolicy()
	fleetNames := slices.Concat(names, slices.Collect(maps.Keys(remote)))
	sort.Strings(fleetNames)
	pgen := pol.Fingerprint(fleetNames)
	if !changed && rgen == c.remoteGen && pgen == c.policyGen {
		return nil
	}
	perFleet := map[string][]*mcp.Tool{}
	var errs []error
	if !changed {
		// Only a remote catalogue or the tool policy changed: the local
		// fleets' tools are those last listed.
		names = nil
		maps.Copy(perFleet, c.lastLocal)
	}
	// Each running fleet is listed at once, each bounded by
	// ListToolsTimeout: one fleetd that does not answer delays a refresh
	// (and `fleetmgr reload`, which waits for one) by that much, not by
	// that much per fleet.
	listed := make([][]*mcp.Tool, len(names))
	lerrs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		if !up[name] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := p.ups.get(name)
			var tools []*mcp.Tool
			if err == nil {
				lctx, cancel := context.WithTimeout(ctx, ListToolsTimeout)
				tools, err = u.listTools(lctx)
				cancel()
			}
			if err != nil {
				lerrs[i] = err
				return
			}
			listed[i] = tools
			if b, merr := json.Marshal(tools); merr == nil {
				// Whole or not at all (temporary file, rename): a peer's
				// catalogue request and CatalogueHash read it any time.
				if werr := writePrivate(p.catalogueCache(name), b); werr != nil {
					p.log.Warn("cache catalogue", "fleet", name, "err", werr)
				}
			}
		}()
	}
	wg.Wait()
	for i, name := range names {
		tools := listed[i]
		if lerrs[i] != nil {
			errs = append(errs, lerrs[i])
		}
		if tools == nil {
			// A fleet that is down keeps its last known tools listed.
			if b, err := atomicfile.Read(p.catalogueCache(name), atomicfile.MaxCatalogue); err == nil {
				_ = json.Unmarshal(b, &tools)
			}
		}
		if tools != nil {
			perFleet[name] = tools
		}
	}
	if changed {
		c.lastLocal = maps.Clone(perFleet)
	}
	maps.Copy(perFleet, remote)
	cat := MergeWithPolicy(perFleet, pol)
	cat.LogNotes(p.log)
	c.apply(cat, p.forward)
	c.gens, c.remoteGen, c.policyGen = gens, rgen, pgen
	if force {
		c.forcedAt = began // applied: what it read stands
	}
	return errors.Join(errs...)
}

// writePrivate writes b to path (0600, its directory 0700 and created as
// needed) through a temporary file and a rename, so a reader never sees
// half a file.
func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o600)
}
