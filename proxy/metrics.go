package proxy

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// Call outcomes, the "outcome" label of fleetmgr_tool_calls_total.
const (
	OutcomeOK            = "ok"             // the upstream answered with a result
	OutcomeToolError     = "tool_error"     // the upstream answered with isError
	OutcomeFleetDown     = "fleet_down"     // the fleet is not running (tool error naming it)
	OutcomeTimeout       = "timeout"        // call_timeout elapsed (tool error; the fleet stays up)
	OutcomeCancelled     = "cancelled"      // the caller cancelled
	OutcomeInvalidParams = "invalid_params" // missing / unknown fleet, bad arguments
	OutcomeError         = "error"          // any other failure talking to the upstream
	OutcomeHostDown      = "host_down"      // a remote fleet's host is not online, or left during the call (tool error naming it)
	OutcomeRefused       = "refused"        // a remote fleet's host refused the call (tool error with the reason)
	OutcomeHidden        = "hidden"         // the tool is hidden or excluded on the fleet (refused with the reason)
)

// Metrics is fleetmgr's Prometheus instrumentation, on a registry of its
// own (never the process-global one). Create with NewMetrics, pass it in
// Options.Metrics, and serve Handler() behind the guard: the series name
// fleets. Exposed series:
//
//	fleetmgr_tool_calls_total{fleet,tool,outcome}        forwarded calls
//	fleetmgr_tool_call_duration_seconds{fleet}           forwarded call latency
//	fleetmgr_fleet_phase{fleet,phase}                    1 for the fleet's current phase (state file)
//	fleetmgr_fleet_restarts{fleet}                       restarts recorded in the fleet's state file
//	fleetmgr_upstream_connected{fleet}                   1 while fleetmgr holds an MCP session to the fleetd
//	fleetmgr_guard_refusals_total{rule}                  callers the guard refused, by rule
//	fleetmgr_guard_served_total                          callers the guard let through
//	fleetmgr_stale_records_total{fleet,reason}           records refused before a signal (lifecycle.StaleRecords)
//	fleetmgr_remote_calls_total{host,outcome}            calls to remote fleets, by host (remote_call.go)
//	fleetmgr_remote_call_rtt_seconds{host}               round trip of answered calls to remote fleets
//	fleetmgr_fleet_cpu_seconds_total{fleet}              CPU used by fleetd + its herdr server's trees (every pane)
//	fleetmgr_fleet_rss_bytes{fleet}                      their resident memory
//	fleetmgr_member_cpu_seconds_total{fleet,member}      CPU used by a member's pane tree (MaxMemberSeries per fleet)
//	fleetmgr_member_rss_bytes{fleet,member}              its resident memory
//
// The resource series are read from /proc when scraped (nothing runs
// between scrapes), for local running fleets.
type Metrics struct {
	reg         *prometheus.Registry
	callsReg    *prometheus.Registry // calls and latency only (CallsGatherer)
	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	remoteCalls *prometheus.CounterVec
	remoteRTT   *prometheus.HistogramVec
	state       *stateCollector
}

// NewMetrics builds the metrics on a fresh prometheus.Registry that also
// carries the Go runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmgr_tool_calls_total",
			Help: "Tool calls forwarded to fleets, by fleet (NAME@HOST for a remote fleet), tool and outcome (ok, tool_error, fleet_down, timeout, cancelled, invalid_params, error; remote fleets also host_down, refused).",
		}, []string{"fleet", "tool", "outcome"}),
		remoteCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmgr_remote_calls_total",
			Help: "Tool calls to remote fleets (NAME@HOST) through the federation, by host and outcome (ok, tool_error, invalid_params, error, timeout, cancelled, host_down, refused).",
		}, []string{"host", "outcome"}),
		remoteRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetmgr_remote_call_rtt_seconds",
			Help:    "Round trip of answered tool calls to remote fleets, from sending the signed call request to its reply (the remote fleet's own time included), by host, in seconds.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"host"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetmgr_tool_call_duration_seconds",
			Help:    "Latency of tool calls forwarded to fleets, from the caller's request to the answer, in seconds.",
			Buckets: []float64{.0002, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"fleet"}),
		state: &stateCollector{
			phase:    prometheus.NewDesc("fleetmgr_fleet_phase", "1 for the fleet's current lifecycle phase as recorded in its state file, 0 for the others.", []string{"fleet", "phase"}, nil),
			restarts: prometheus.NewDesc("fleetmgr_fleet_restarts", "Restarts of the fleet's fleetd recorded in its state file by the supervisor.", []string{"fleet"}, nil),
			lost: prometheus.NewDesc("fleetmgr_members_lost_total", "Members the fleet's restarts ended (fleetd reaps the panes a previous fleetd left), counted in its state file across serves.",
				[]string{"fleet"}, nil),
			connected: prometheus.NewDesc("fleetmgr_upstream_connected", "1 while fleetmgr holds an open MCP session to the fleet's fleetd, else 0.", []string{"fleet"}, nil),
			refusals:  prometheus.NewDesc("fleetmgr_guard_refusals_total", "Callers the guard refused, by rule.", []string{"rule"}, nil),
			served:    prometheus.NewDesc("fleetmgr_guard_served_total", "Callers the guard let through.", nil, nil),
			fleetCPU:  prometheus.NewDesc("fleetmgr_fleet_cpu_seconds_total", "CPU time (user + system) used by the fleet's fleetd and herdr server process trees (so every pane), in seconds, read from /proc at scrape; local running fleets.", []string{"fleet"}, nil),
			fleetRSS:  prometheus.NewDesc("fleetmgr_fleet_rss_bytes", "Resident memory of the fleet's fleetd and herdr server process trees, in bytes, read from /proc at scrape.", []string{"fleet"}, nil),
			memberCPU: prometheus.NewDesc("fleetmgr_member_cpu_seconds_total", "CPU time used by a member's pane process tree, in seconds, read from /proc at scrape; at most 20 members per fleet (the first by id), those the last status saw.",
				[]string{"fleet", "member"}, nil),
			memberRSS: prometheus.NewDesc("fleetmgr_member_rss_bytes", "Resident memory of a member's pane process tree, in bytes, read from /proc at scrape (the members of fleetmgr_member_cpu_seconds_total).",
				[]string{"fleet", "member"}, nil),
			stale: prometheus.NewDesc("fleetmgr_stale_records_total", "Records (state.json, *.spawned.json) naming a process that is not the one recorded (reason: boot_id, pid_reused, exe, identity, unreadable), so nothing was signalled.",
				[]string{"fleet", "reason"}, nil),
		},
	}
	m.reg.MustRegister(m.calls, m.latency, m.remoteCalls, m.remoteRTT, m.state,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.callsReg = prometheus.NewRegistry()
	m.callsReg.MustRegister(m.calls, m.latency)
	return m
}

// CallsGatherer gathers fleetmgr_tool_calls_total and
// fleetmgr_tool_call_duration_seconds only (the same collectors as
// Registry's): what the dashboard's sparklines read every 5 s while a page
// is open, without the fleets' states (a state file read per fleet), the
// process (a listing of its fds) and the Go runtime that a scrape of
// /metrics also gathers.
func (m *Metrics) CallsGatherer() prometheus.Gatherer { return m.callsReg }

// Registry is the registry the metrics live on, for adding more.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format. Mount it
// behind the guard: fleet names are not for pane members.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// WatchGuard makes the metrics report g's refusal and served counts.
func (m *Metrics) WatchGuard(g *guard.Guard) { m.state.guard = g }

// observe records one forwarded call. A nil *Metrics records nothing.
func (m *Metrics) observe(fleet, tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(fleet, tool, outcome).Inc()
	m.latency.WithLabelValues(fleet).Observe(d.Seconds())
}

// observeRemote records one call to a remote fleet on host (its round
// trip when answered). A nil *Metrics records nothing. host is one the
// merged catalogue offers (a trusted peer's), so the label is bounded.
func (m *Metrics) observeRemote(host, outcome string, rtt time.Duration, answered bool) {
	if m == nil {
		return
	}
	m.remoteCalls.WithLabelValues(host, outcome).Inc()
	if answered {
		m.remoteRTT.WithLabelValues(host).Observe(rtt.Seconds())
	}
}

// stateCollector reads fleet states, upstream sessions and guard counts at
// scrape time, so they are never stale and cost nothing between scrapes.
type stateCollector struct {
	proxy                                        *Proxy
	guard                                        *guard.Guard
	phase, restarts, connected, refusals, served *prometheus.Desc
	stale, lost                                  *prometheus.Desc
	fleetCPU, fleetRSS, memberCPU, memberRSS     *prometheus.Desc
}

// MaxMemberSeries is the most members per fleet that have
// fleetmgr_member_* series (the first by id), so a fleet with many panes
// cannot blow up a scrape. The others are dropped from the member series
// (no aggregate series stands for them); the fleet's own series count
// them.
const MaxMemberSeries = 20

// resourcesScrapeTimeout bounds what one scrape waits for fleetd rosters
// and herdr answers when it learns members' shells (status.Collector.
// ResourcesNow); Prometheus's default scrape timeout is 10 s.
const resourcesScrapeTimeout = 5 * time.Second

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.phase, c.restarts, c.connected, c.refusals, c.served, c.stale, c.lost,
		c.fleetCPU, c.fleetRSS, c.memberCPU, c.memberRSS} {
		ch <- d
	}
}

var allPhases = []lifecycle.Phase{lifecycle.PhaseStopped, lifecycle.PhaseStarting, lifecycle.PhaseRunning,
	lifecycle.PhaseRestarting, lifecycle.PhaseStopping, lifecycle.PhaseFailed, lifecycle.PhaseStale}

// Collect implements prometheus.Collector: it reads fleet states, upstream
// sessions and guard counters now.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if p := c.proxy; p != nil {
		mgr := p.opt.Manager
		for _, name := range mgr.Names() {
			if st, err := mgr.State(name); err == nil {
				for _, ph := range allPhases {
					v := 0.0
					if st.Shown.Phase == ph {
						v = 1
					}
					ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, v, name, string(ph))
				}
				ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.GaugeValue, float64(st.Restarts), name)
				ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, float64(st.MembersLost), name)
			}
			v := 0.0
			if p.Connected(name) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, v, name)
		}
		for _, r := range mgr.StaleRecords() {
			ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(r.N), r.Fleet, r.Reason)
		}
		if col := p.statusCol; col != nil {
			// A scrape has no context of its own: the roster and herdr
			// requests ResourcesNow may make are bounded here.
			ctx, cancel := context.WithTimeout(context.Background(), resourcesScrapeTimeout)
			usage := col.ResourcesNow(ctx, MaxMemberSeries)
			cancel()
			for _, f := range usage {
				ch <- prometheus.MustNewConstMetric(c.fleetCPU, prometheus.CounterValue, f.Usage.CPUSeconds, f.Fleet)
				ch <- prometheus.MustNewConstMetric(c.fleetRSS, prometheus.GaugeValue, float64(f.Usage.RSSBytes), f.Fleet)
				for _, m := range f.Members {
					ch <- prometheus.MustNewConstMetric(c.memberCPU, prometheus.CounterValue, m.Usage.CPUSeconds, f.Fleet, m.ID)
					ch <- prometheus.MustNewConstMetric(c.memberRSS, prometheus.GaugeValue, float64(m.Usage.RSSBytes), f.Fleet, m.ID)
				}
			}
		}
	}
	if g := c.guard; g != nil {
		ref := g.Refusals()
		rules := make([]string, 0, len(ref))
		for r := range ref {
			rules = append(rules, string(r))
		}
		sort.Strings(rules)
		for _, r := range rules {
			ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(ref[guard.Rule(r)]), r)
		}
		ch <- prometheus.MustNewConstMetric(c.served, prometheus.CounterValue, float64(g.Served()))
	}
}
