package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
)

// world is the test equipment behind a dashboard: a real fleets.toml, a
// real lifecycle.Manager and status.Collector over a state dir, fleets
// "running" as real processes (sleep, in their own session, recorded in
// state.json with pid and start time as a fleetd is), real log files. What
// needs a live fleetd and herdr (members, health, herdr, broker) is given
// by the test through status.Report values: Status returns the
// Collector's own rows for every fleet, with the members and probes the
// test set for the running ones.
type world struct {
	t   testing.TB
	dir string
	cfg *registry.Config
	m   *lifecycle.Manager
	col *status.Collector
	reg *prometheus.Registry
	dur *prometheus.HistogramVec
	cnt *prometheus.CounterVec
	log *syncbuf.Buffer

	mu       sync.Mutex
	members  map[string][]status.Member
	drift    map[string][]string
	procs    map[string]*exec.Cmd
	actions  []Action
	fed      *peerview.Snapshot // other hosts, when the test federates
	samples  int                // Status calls
	sampled  []time.Time        // when each began
	rowsN    int                // Rows calls
	actWait  chan struct{}      // when set, Action waits for it
	sampleAt map[string]time.Time
	// holdSamples: Status fails (as a status that cannot sample), so the
	// page's last sample ages.
	holdSamples bool
	// intervalMS is the sampling interval the reports state (3000 when 0).
	intervalMS int64
	// meter, when set, measures each running fleet's and member's
	// resources from /proc at every sampling, as status.Collector does
	// (resources.Sampler): the fleet from its stand-in fleetd's tree and
	// the pids in memberPIDs, each member from its pid's tree.
	meter      *resources.Sampler
	memberPIDs map[string]map[string]int // fleet → member id → pid
}

// newWorld writes a config with the named fleets (host "elsewhere" for a
// name ending in "@far": a remote fleet) and records every fleet stopped.
func newWorld(t testing.TB, names ...string) *world {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [21000, 21999]\n", filepath.Join(dir, "state"))
	for i, n := range names {
		name, far := strings.CutSuffix(n, "@far")
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", name, dir, 21001+i)
		if far {
			fmt.Fprintf(&b, "host = \"build2.example\"\n")
		}
	}
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, dir: dir, cfg: cfg, log: &syncbuf.Buffer{},
		members: map[string][]status.Member{}, drift: map[string][]string{}, procs: map[string]*exec.Cmd{}, sampleAt: map[string]time.Time{}}
	w.m = lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
	w.col = status.New(status.Options{Manager: w.m, Via: "daemon", Roster: func(context.Context, *registry.Fleet) ([]status.RosterRow, error) {
		return nil, fmt.Errorf("the test world has no fleetd to ask")
	}})
	w.reg = prometheus.NewRegistry()
	w.dur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricDuration, Help: "test",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1}}, []string{"fleet"})
	w.cnt = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricCalls, Help: "test"}, []string{"fleet", "tool", "outcome"})
	w.reg.MustRegister(w.dur, w.cnt)
	t.Cleanup(w.stopAll)
	return w
}

// call records one forwarded tool call in the world's metrics.
func (w *world) call(fleet, outcome string, d time.Duration) {
	w.cnt.WithLabelValues(fleet, "fleet_whoami", outcome).Inc()
	w.dur.WithLabelValues(fleet).Observe(d.Seconds())
}

// writeState records st as the fleet's state.json (atomically, as
// lifecycle does: a reader never sees half a file).
func (w *world) writeState(st lifecycle.State) {
	w.t.Helper()
	js, err := json.Marshal(st)
	if err != nil {
		w.t.Fatal(err)
	}
	dir := w.m.FleetDir(st.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".state.json.tmp")
	if err := os.WriteFile(tmp, js, 0o600); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		w.t.Fatal(err)
	}
}

// state reads the fleet's record as lifecycle does.
func (w *world) state(name string) *lifecycle.State {
	w.t.Helper()
	st, err := w.m.State(name)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// run starts a stand-in fleetd for name (sleep, leading its own session)
// and records the fleet running with it; restarts and reason are kept from
// the previous record.
func (w *world) run(name string) *lifecycle.Proc {
	w.t.Helper()
	cmd := exec.Command("sleep", "3600")
	// FLEET_NAME makes it the fleet's fleetd to lifecycle's identity check
	// (a record naming any other process is shown stale).
	cmd.Env = append(os.Environ(), "FLEET_NAME="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	ps, err := procfs.ReadStat(cmd.Process.Pid)
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	if old := w.procs[name]; old != nil {
		_ = old.Process.Kill()
		_ = old.Wait()
	}
	w.procs[name] = cmd
	w.mu.Unlock()
	f, _ := w.cfg.Fleet(name)
	prev, _ := w.m.State(name)
	p := &lifecycle.Proc{PID: cmd.Process.Pid, StartTime: ps.StartTime}
	st := lifecycle.State{Name: name, Desired: lifecycle.DesiredRunning, Phase: lifecycle.PhaseRunning, Port: f.Port,
		Fleetd: p, StartedAt: time.Now().UTC().Add(-42 * time.Minute)}
	if prev != nil {
		st.Restarts, st.LastExit, st.Supervision = prev.Restarts, prev.LastExit, prev.Supervision
		st.NextRestartAt = time.Time{}
	}
	w.writeState(st)
	return p
}

// kill9 kills the fleet's stand-in fleetd with SIGKILL and reaps it, as a
// crash would leave it (state.json still says running).
func (w *world) kill9(name string) {
	w.t.Helper()
	w.mu.Lock()
	cmd := w.procs[name]
	delete(w.procs, name)
	w.mu.Unlock()
	if cmd == nil {
		w.t.Fatalf("%s has no fleetd to kill", name)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// stop kills the fleet's process and records it stopped.
func (w *world) stop(name string) {
	w.mu.Lock()
	cmd := w.procs[name]
	delete(w.procs, name)
	w.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	prev, _ := w.m.State(name)
	st := lifecycle.State{Name: name, Desired: lifecycle.DesiredStopped, Phase: lifecycle.PhaseStopped}
	if prev != nil {
		st.Restarts, st.LastExit, st.Supervision = prev.Restarts, prev.LastExit, prev.Supervision
	}
	w.writeState(st)
}

func (w *world) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.procs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	w.procs = map[string]*exec.Cmd{}
}

// setMembers sets what the next samplings report for a running fleet.
func (w *world) setMembers(fleet string, ms ...status.Member) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.members[fleet] = ms
}

// appendLog appends lines to the fleet's fleetd log.
func (w *world) appendLog(fleet string, lines ...string) {
	w.t.Helper()
	path := w.m.LogPath(fleet, "fleetd")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		w.t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := io.WriteString(f, l+"\n"); err != nil {
			w.t.Fatal(err)
		}
	}
}

// Status is the world's StatusFunc: the Collector's rows (real lifecycle
// state), and for every running fleet the probes and members the test set,
// counted as a status does.
func (w *world) Status(ctx context.Context, names []string) (*status.Report, error) {
	t0 := time.Now()
	w.mu.Lock()
	held, interval := w.holdSamples, cmp.Or(w.intervalMS, 3000)
	w.mu.Unlock()
	if held {
		return nil, fmt.Errorf("the test holds sampling")
	}
	rows, err := w.col.Rows(names)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	w.sampled = append(w.sampled, t0)
	for i := range rows {
		r := &rows[i]
		w.sampleAt[r.Name] = t0
		r.SchemaDrift = w.drift[r.Name]
		if r.State != "running" {
			continue
		}
		r.Health = &status.Health{OK: true, LatencyMS: 1.3}
		r.Herdr = &status.HerdrCheck{Session: "fleet-" + r.Name, Alive: true}
		r.Broker = &status.Broker{Configured: true, Vhost: "fleet-" + r.Name, Reachable: true, Inboxes: map[string]int{"agent.m1.inbox": 2}}
		r.Members = slices.Clone(w.members[r.Name])
		if r.Members == nil {
			r.Members = []status.Member{}
		}
		r.MemberCount = len(r.Members)
		r.Summary = map[status.Verdict]int{}
		for _, m := range r.Members {
			r.Summary[m.Verdict]++
		}
	}
	if w.meter != nil {
		w.measure(rows)
	}
	rep := &status.Report{SchemaVersion: status.SchemaVersion, GeneratedAt: time.Now().UTC(), Host: "testhost",
		IntervalMS: interval, ElapsedMS: time.Since(t0).Milliseconds(), Via: "daemon", Fleets: rows}
	if w.fed != nil && len(names) == 0 {
		status.AddRemote(rep, *w.fed, nil, time.Now())
	}
	return rep, nil
}

// measure fills the running rows' and their members' resources from one
// snapshot of /proc (w.mu held).
func (w *world) measure(rows []status.Fleet) {
	var all []int // the trees to read: each running fleetd's and the members'
	for _, r := range rows {
		if r.State == "running" {
			all = append(all, r.PID)
			for _, pid := range w.memberPIDs[r.Name] {
				all = append(all, pid)
			}
		}
	}
	snap, err := w.meter.Take(all...)
	if err != nil {
		w.t.Errorf("read /proc: %v", err)
		return
	}
	for i := range rows {
		r := &rows[i]
		if r.State != "running" {
			continue
		}
		roots := []int{r.PID}
		for j := range r.Members {
			m := &r.Members[j]
			pid := w.memberPIDs[r.Name][m.ID]
			if pid == 0 {
				continue
			}
			roots = append(roots, pid)
			u := snap.Usage(snap.Tree(pid))
			m.Resources = &u
		}
		u := snap.Usage(snap.Tree(roots...))
		r.Resources = &u
	}
}

// Rows is the world's RowsFunc: status.Collector.Rows over the state dir,
// and the federation the test set (status.AddRemote, as serve adds it).
func (w *world) Rows(ctx context.Context) (*status.Report, error) {
	w.mu.Lock()
	w.rowsN++
	fed := w.fed
	w.mu.Unlock()
	rows, err := w.col.Rows(nil)
	if err != nil {
		return nil, err
	}
	rep := w.col.Empty(0)
	rep.Fleets = rows
	if fed != nil {
		status.AddRemote(rep, *fed, nil, time.Now())
	}
	return rep, nil
}

// Action is the world's ActionFunc: it records the action and does it on
// the stand-ins (start and restart run a new process, stop kills it),
// idempotently as the lifecycle verbs are.
func (w *world) Action(ctx context.Context, a Action) (ActionResult, error) {
	if _, err := w.m.Fleet(a.Fleet); err != nil {
		return ActionResult{}, UnknownFleet(err)
	}
	w.mu.Lock()
	w.actions = append(w.actions, a)
	wait := w.actWait
	running := w.procs[a.Fleet] != nil
	w.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return ActionResult{}, ctx.Err()
		}
	}
	steps := []lifecycle.Step{{Fleet: a.Fleet, Name: string(a.Verb), Detail: "test world"}}
	switch a.Verb {
	case VerbStop:
		w.stop(a.Fleet)
		return ActionResult{State: lifecycle.PhaseStopped, Steps: steps}, nil
	case VerbStart:
		if running {
			st := w.state(a.Fleet)
			return ActionResult{State: st.Phase, PID: st.Fleetd.PID, Steps: []lifecycle.Step{}}, nil
		}
	}
	p := w.run(a.Fleet)
	return ActionResult{State: lifecycle.PhaseRunning, PID: p.PID, Steps: steps}, nil
}

func (w *world) actionsDone() []Action {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.actions)
}

// options are the world's dashboard options; fast periods so tests wait
// little.
func (w *world) options() Options {
	return Options{
		Status: w.Status, Rows: w.Rows, Action: w.Action, Logs: w.m, Calls: PrometheusCalls(w.reg),
		RestartTimes: ManagerRestartTimes(w.m), Metrics: w.reg,
		Log:         slog.New(slog.NewTextHandler(w.log, nil)),
		SampleEvery: 300 * time.Millisecond, SampleIdle: 300 * time.Millisecond, StateEvery: 100 * time.Millisecond, CallsEvery: 200 * time.Millisecond,
	}
}

// serve starts a dashboard on a loopback listener, Run included; both end
// with the test.
func (w *world) serve(opt Options) (*Server, *httptest.Server) {
	w.t.Helper()
	s, err := New(opt)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s)
	w.t.Cleanup(func() {
		cancel()
		<-done
		ts.Close()
	})
	return s, ts
}

// refusals reads fleetmgr_dashboard_refusals_total{reason} from the
// world's registry.
func (w *world) refusals(reason string) float64 {
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fleetmgr_dashboard_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// get fetches url with the given headers.
func get(t testing.TB, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func ptr[T any](v T) *T { return &v }
