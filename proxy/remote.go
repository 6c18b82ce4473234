package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/status"
)

// Remote is the federation (docs/FEDERATION.md) as the proxy uses it: the
// other hosts' fleets for fleetmgr_list and fleetmgr_status, and the
// signed control requests behind fleetmgr_start {"fleet":"kb@beta"} and
// the other lifecycle tools on NAME@HOST. The serve daemon gives one
// (daemon/federation.go) when fleets.toml has a [federation] table;
// Options.Remote is nil otherwise, and a NAME@HOST is then an unknown
// fleet. *federation.Federation has these methods.
type Remote interface {
	// Host is this manager's host id ([federation] host).
	Host() string
	// View is the union view: every peer heard from and every trusted
	// peer, sorted by host, this host excluded; a host past expiry keeps
	// its fleets as last reported (federation.HostView).
	View() []federation.HostView
	// Control asks host to run verb (wire.Verbs) on its fleet and returns
	// the JSON result the host's Execute produced; failures are
	// *federation.ControlError (refused, failed, no reply within the
	// control timeout, no such host, not connected).
	Control(ctx context.Context, host, verb, fleet string, args json.RawMessage) (json.RawMessage, error)
	// Changes receives (coalesced) when the view changes: a host appears,
	// expires, goes offline, or its fleets change.
	Changes() <-chan struct{}
	// Status is the broker connection's state (connected, last error).
	Status() federation.Status
	// Call forwards one tools/call to fleet on host and returns its
	// result object (federation.Federation.Call: a signed call-request,
	// progress to o.Progress, a signed cancel when ctx ends). Errors: a
	// *federation.RPCError the remote side answered, or a
	// *federation.ControlError (refused, no reply, no such host, not
	// connected, connection lost).
	Call(ctx context.Context, host, fleet, tool string, args json.RawMessage, o federation.CallOptions) (json.RawMessage, error)
	// Catalogue fetches fleet's tools array on host and its SHA-256
	// (federation.Federation.Catalogue), for when presence announces a
	// catalogue hash this manager has not cached.
	Catalogue(ctx context.Context, host, fleet string) (json.RawMessage, string, error)
}

// ErrNotFederated: a NAME@HOST was given to a manager without
// [federation].
var ErrNotFederated = errors.New("this fleetmgr serve does not federate (fleets.toml has no [federation] table)")

// remoteTarget says where name is: host "" for a fleet of this host (the
// fleet's local name), else the peer and the fleet's name there. A
// "NAME@HOST" names a peer's fleet (this host's own id: a local fleet); a
// fleet fleets.toml declares with host = OTHER is OTHER's when OTHER is
// in the federation's view. A NAME@HOST without a federation is
// ErrNotFederated.
func (p *Proxy) remoteTarget(name string) (fleet, host string, err error) {
	r := p.opt.Remote
	if fl, h, ok := peerview.SplitRemote(name); ok {
		if r == nil {
			return "", "", fmt.Errorf("fleet %s: %w", name, ErrNotFederated)
		}
		if h == r.Host() {
			return fl, "", nil
		}
		return fl, h, nil
	}
	if r == nil {
		return name, "", nil
	}
	f, err := p.opt.Manager.Fleet(name)
	if err != nil || f.Host == "" || f.Host == registry.LocalHost || f.Host == r.Host() {
		return name, "", nil
	}
	for _, hv := range r.View() {
		if hv.Host == f.Host {
			return name, f.Host, nil
		}
	}
	return name, "", nil
}

// IsLocal reports whether a fleet fleets.toml declares with host runs on
// this host: the status collector's rule ("", "local", "localhost", the
// host name), or this manager's federation host id.
func (p *Proxy) IsLocal(host string) bool {
	if r := p.opt.Remote; r != nil && host == r.Host() {
		return true
	}
	return p.statusCol.IsLocal(host)
}

// LocalFleets is the federation's Source (federation.Source): this host's
// fleets as presence announces them, every heartbeat. It is cheap by
// design — no fleet is probed and no member sampled: the state, uptime,
// restarts and crash loop come from each fleet's lifecycle record (its
// state file and /proc), the member count and verdict counts from the
// status collector's last report of the fleet (status.Collector.Last,
// with their age in verdicts_age_s; absent when no report judged the
// fleet's members since it last started), the catalogue hash from its
// catalogue cache (CatalogueHash). Fleets declared on another host are
// left out: their own host announces them.
func (p *Proxy) LocalFleets(ctx context.Context) []wire.FleetSummary {
	m := p.opt.Manager
	now := time.Now()
	var out []wire.FleetSummary
	for _, name := range m.Names() {
		if ctx.Err() != nil {
			break
		}
		f, err := m.Fleet(name)
		if err != nil || !p.IsLocal(f.Host) || !wire.ValidFleetName(name) {
			continue
		}
		fs := wire.FleetSummary{Name: name, State: string(lifecycle.PhaseUnknown), Catalogue: p.CatalogueHash(name)}
		st, err := m.State(name)
		if err == nil {
			fs.State = string(st.Shown.Phase)
			fs.Restarts, fs.CrashLoop = st.Restarts, st.CrashLoop
		}
		running := err == nil && st.Shown.Phase == lifecycle.PhaseRunning
		if running && !st.StartedAt.IsZero() {
			fs.UptimeS = max(0, int64(now.Sub(st.StartedAt)/time.Second))
		}
		if s, ok := p.statusCol.Last(name); ok && (!running || !s.At.Before(st.StartedAt)) {
			if running || s.Members == 0 {
				fs.Members = s.Members
				fs.Verdicts = make(map[string]int, len(s.Verdicts))
				for v, n := range s.Verdicts {
					fs.Verdicts[string(v)] = n
				}
				age := max(0, int64(now.Sub(s.At)/time.Second))
				fs.VerdictsAgeS = &age
			}
		}
		out = append(out, fs)
	}
	return out
}

// catalogueHashes memoises CatalogueHash per fleet by the cache file's
// identity, so a heartbeat reads no file that did not change.
type catalogueHashes struct {
	mu   sync.Mutex
	memo map[string]hashMemo // guarded by mu: fleet → the hash of its cache as last read
}

type hashMemo struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
	policy   string // the tool policy's fingerprint for the fleet
	hash     string
}

// CatalogueHash is the SHA-256 (lower-case hex) of fleet's cached
// catalogue as served to peers: the bytes of
// <state_dir>/fleets/NAME/catalogue.json, the "tools" array of the
// fleet's last tools/list as the proxy stored it (json.Marshal of the
// tools: the same tools give the same bytes), less the tools this host's
// tool policy hides (servedCatalogue; a hide or show changes it). It is
// "" when the fleet never listed its tools. Presence announces it, so a
// peer re-fetches a catalogue only when it changed (docs/FEDERATION.md
// "Remote tool calls"); a catalogue served to a peer must carry the same
// hash of the same bytes. Cheap: the file is re-read only when its size,
// modification time or inode, or the fleet's tool policy, changed.
func (p *Proxy) CatalogueHash(fleet string) string {
	path := p.catalogueCache(fleet)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	key := hashMemo{size: fi.Size(), mtime: fi.ModTime(), policy: p.toolPolicy().Fingerprint([]string{fleet})}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(st.Dev), st.Ino
	}
	h := &p.hashes
	h.mu.Lock()
	if old, ok := h.memo[fleet]; ok && old.dev == key.dev && old.ino == key.ino && old.size == key.size && old.mtime.Equal(key.mtime) && old.policy == key.policy {
		h.mu.Unlock()
		return old.hash
	}
	h.mu.Unlock()
	b, err := atomicfile.Read(path, atomicfile.MaxCatalogue)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(p.servedCatalogue(fleet, b))
	key.hash = hex.EncodeToString(sum[:])
	h.mu.Lock()
	if h.memo == nil {
		h.memo = map[string]hashMemo{}
	}
	h.memo[fleet] = key
	h.mu.Unlock()
	return key.hash
}

// ControlArgs are the arguments of a peer's control request
// (wire.ControlRequest.Args) for each verb: lead for start and restart,
// lines and herdr for logs, interval_ms for status. Unknown keys are
// ignored.
type ControlArgs struct {
	Lead bool `json:"lead,omitempty"`
	// Confirm: the requesting operator confirmed that a stop or restart
	// may end the fleet's live members (ActArgs.Confirm).
	Confirm    bool `json:"confirm,omitempty"`
	Lines      int  `json:"lines,omitempty"`
	Herdr      bool `json:"herdr,omitempty"`
	IntervalMS int  `json:"interval_ms,omitempty"`
}

// executeTimeout bounds a lifecycle verb a peer asked for, which runs to
// its end even when the peer stops waiting (a start half done is worse
// than one the peer hears of late).
const executeTimeout = 5 * time.Minute

// Execute is the federation's Executor (federation.Executor): it runs a
// verified, authorised peer's request on a local fleet through the same
// code as the manager tools — Lifecycle for start, stop and restart
// (result: ActionResult), the status collector of fleetmgr_status for
// status (result: the fleet's status.Fleet row, drift noted), the log
// tail of fleetmgr_logs for logs (result: LogsResult; lines default 50,
// at most 1000). ctx ends at the request's expiry; a lifecycle verb is
// detached from it (bounded by 5 minutes) so it never stops half way.
// A fleet this host does not run (unknown, or declared on another host)
// is an error naming it.
func (p *Proxy) Execute(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
	var a ControlArgs
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fmt.Errorf("arguments of %s: %v", verb, err)
		}
	}
	f, err := p.fleetFor(ctx, fleet)
	if err != nil {
		return nil, err
	}
	if !p.IsLocal(f.Host) {
		return nil, fmt.Errorf("fleet %s is declared on host %s here, not on this host", fleet, f.Host)
	}
	p.log.Info("federation: running a peer's request", "from", from, "verb", verb, "fleet", fleet)
	var res any
	switch verb {
	case wire.VerbStart, wire.VerbStop, wire.VerbRestart:
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), executeTimeout)
		defer cancel()
		r, err := p.lifecycle(dctx, ActArgs{Verb: verb, Fleet: fleet, Lead: a.Lead, Confirm: a.Confirm, Origin: "remote"}, fleet, nil)
		if err != nil {
			return nil, err
		}
		res = r
	case wire.VerbStatus:
		if a.IntervalMS < 0 || a.IntervalMS > 600_000 {
			return nil, errors.New("interval_ms must be 0 (default) to 600000")
		}
		// Another host's operator asked (fleetmgr_status NAME@HOST): resources too.
		rep, err := p.statusCol.Collect(ctx, status.Request{Fleets: []string{fleet}, Interval: time.Duration(a.IntervalMS) * time.Millisecond, Resources: true})
		if err != nil {
			return nil, err
		}
		NoteDrift(rep, p.Catalogue())
		if len(rep.Fleets) != 1 {
			return nil, fmt.Errorf("status of %s: %d rows", fleet, len(rep.Fleets))
		}
		res = rep.Fleets[0]
	case wire.VerbLogs:
		r, err := p.logs(fleet, a.Lines, a.Herdr)
		if err != nil {
			return nil, err
		}
		res = r
	default:
		return nil, fmt.Errorf("unknown verb %q", verb)
	}
	return json.Marshal(res)
}

// remoteAct is Act on a peer's fleet: a signed control request to host
// (Remote.Control) and its reply, the peer's ActionResult, shown under the
// name NAME@HOST. The peer's steps go to onStep once the reply is in (a
// control request carries no progress). A refusal, a failure, no reply
// within the control timeout: the error says which, naming the host.
func (p *Proxy) remoteAct(ctx context.Context, verb, fleet, host string, lead, confirm bool, onStep func(lifecycle.Step)) (*ActionResult, error) {
	var args json.RawMessage
	if lead || confirm {
		args, _ = json.Marshal(ControlArgs{Lead: lead, Confirm: confirm})
	}
	raw, err := p.opt.Remote.Control(ctx, host, verb, fleet, args)
	if err != nil {
		return nil, err
	}
	res := &ActionResult{}
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("%s %s: host %s's reply does not decode: %v", verb, peerview.RemoteName(fleet, host), host, err)
	}
	res.Fleet = peerview.RemoteName(fleet, host)
	if res.Steps == nil {
		res.Steps = []lifecycle.Step{}
	}
	for i := range res.Steps {
		res.Steps[i].Fleet = res.Fleet
		if onStep != nil {
			onStep(res.Steps[i])
		}
	}
	return res, nil
}

// remoteLogs is fleetmgr_logs on a peer's fleet: the peer's log tail, by
// a signed request.
func (p *Proxy) remoteLogs(ctx context.Context, fleet, host string, lines int, herdr bool) (*LogsResult, error) {
	args, _ := json.Marshal(ControlArgs{Lines: lines, Herdr: herdr})
	raw, err := p.opt.Remote.Control(ctx, host, wire.VerbLogs, fleet, args)
	if err != nil {
		return nil, err
	}
	res := &LogsResult{}
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, fmt.Errorf("logs %s: host %s's reply does not decode: %v", peerview.RemoteName(fleet, host), host, err)
	}
	res.Fleet = peerview.RemoteName(fleet, host)
	if res.Lines == nil {
		res.Lines = []string{}
	}
	return res, nil
}

// remoteStatus is the fresh status row of a peer's fleet: the peer's own
// fleetmgr_status sampling of it (a signed status request, interval as
// asked), shown as NAME@HOST with where and when the host was seen. A
// NAME@HOST a fleetmgr_status names is asked this way; the rows of every
// peer's fleets in a status of all fleets come from presence instead
// (status.AddRemote), at no cost to the peers.
func (p *Proxy) remoteStatus(ctx context.Context, fleet, host string, interval time.Duration, view []federation.HostView) (status.Fleet, error) {
	args, _ := json.Marshal(ControlArgs{IntervalMS: int(interval.Milliseconds())})
	raw, err := p.opt.Remote.Control(ctx, host, wire.VerbStatus, fleet, args)
	if err != nil {
		return status.Fleet{}, err
	}
	var row status.Fleet
	if err := json.Unmarshal(raw, &row); err != nil {
		return status.Fleet{}, fmt.Errorf("status %s: host %s's reply does not decode: %v", peerview.RemoteName(fleet, host), host, err)
	}
	row.Name, row.Host = peerview.RemoteName(fleet, host), host
	if row.Members == nil {
		row.Members = []status.Member{}
	}
	if row.Summary == nil {
		row.Summary = map[status.Verdict]int{}
	}
	// Where it was seen: the presence part of the row AddRemote would make.
	// A host not in the view, or whose presence does not report the
	// fleet: never-seen, with the state its reply gave.
	if hv := (peerview.Snapshot{Hosts: view}).Host(host); hv != nil && hv.Fleet(fleet) != nil {
		row.Remote = peerview.FleetOf(hv, hv.Fleet(fleet), time.Now())
	} else {
		row.Remote = &peerview.Fleet{HostState: string(peerview.HostNeverSeen), ReportedState: row.State}
	}
	return row, nil
}

// remoteView is the federation part of a status report: this manager's
// view, nil without a federation.
func (p *Proxy) remoteView() *peerview.Snapshot {
	r := p.opt.Remote
	if r == nil {
		return nil
	}
	st := r.Status()
	return &peerview.Snapshot{Self: r.Host(), Connected: st.Connected, Error: st.LastError, Hosts: r.View(), Calls: p.RemoteCalls()}
}

// AddRemote adds the federation to a status report (status.AddRemote:
// the "federation" object, every peer's fleets from presence as NAME@HOST
// rows, declared remote fleets filled in), only the NAME@HOST rows in
// names when names is not nil. A report of a manager without a federation
// is left as it is. fleetmgr_status and the dashboard's reports use it.
func (p *Proxy) AddRemote(rep *status.Report, names []string) {
	if v := p.remoteView(); v != nil {
		status.AddRemote(rep, *v, names, time.Now())
	}
}

// remoteListRows are fleetmgr_list's rows of other hosts' fleets (the
// same as a status of all fleets shows, from presence), and the
// federation's state; nil without a federation. declared are the rows of
// fleets fleets.toml puts on another host, filled in place when that host
// federates.
func (p *Proxy) remoteListRows(declared map[string]*FleetSummary) ([]FleetSummary, *peerview.Federation) {
	v := p.remoteView()
	if v == nil {
		return nil, nil
	}
	rep := &status.Report{Fleets: []status.Fleet{}}
	for name, s := range declared {
		rep.Fleets = append(rep.Fleets, status.Fleet{Name: name, Host: s.Host, Verdict: status.Remote, Members: []status.Member{}, Summary: map[status.Verdict]int{}})
	}
	status.AddRemote(rep, *v, nil, time.Now())
	var out []FleetSummary
	for _, row := range rep.Fleets {
		if row.Remote == nil {
			continue
		}
		s := declared[row.Name]
		if s == nil {
			out = append(out, FleetSummary{Name: row.Name})
			s = &out[len(out)-1]
		}
		fillRemote(s, row)
	}
	return out, rep.Federation
}

// fillRemote sets a list row from a peer's status row.
func fillRemote(s *FleetSummary, row status.Fleet) {
	s.Host, s.Phase, s.Remote = row.Host, lifecycle.Phase(row.State), row.Remote
	s.Restarts, s.CrashLoop, s.UptimeS = row.Restarts, row.CrashLoop, int64(row.UptimeS)
	s.Desired, s.Port, s.PID, s.HerdrSession, s.Project = "", 0, 0, "", ""
	s.LastError = row.Error
	if row.MemberCount >= 0 {
		n := row.MemberCount
		s.Members = &n
		s.Verdicts = map[string]int{}
		for v, c := range row.Summary {
			s.Verdicts[string(v)] = c
		}
	}
}

// RemoteCalls returns, per remote host called since serve started, the
// calls sent and their round-trip times (empty without federation).
func (p *Proxy) RemoteCalls() map[string]peerview.Calls {
	if p.remote == nil {
		return map[string]peerview.Calls{}
	}
	return p.remoteCalls.Snapshot()
}
