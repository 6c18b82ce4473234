package federation

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Metrics are the federation's Prometheus collectors. The daemon
// registers Collectors() on its /metrics registry. Label values are
// bounded: hosts come from the trust list, reasons and outcomes from
// fixed sets, verbs from wire.Verbs (anything else is "other").
type Metrics struct {
	// PresenceReceived counts presence and offline messages accepted, by
	// sending host.
	PresenceReceived *prometheus.CounterVec
	// PresenceDropped counts presence and offline messages dropped, by
	// wire.Reason (unsigned, untrusted-key, expired, stale, …).
	PresenceDropped *prometheus.CounterVec
	// ControlRequests counts control requests by direction ("in": served
	// here, "out": sent from here), verb and outcome (ok, failed,
	// refused, timeout, error).
	ControlRequests *prometheus.CounterVec
	// Rejections counts requests this host dead-lettered, by wire.Reason.
	Rejections *prometheus.CounterVec
	// RepliesDropped counts answers dropped, by reason (a wire.Reason, or
	// "late": nobody waits for it any more).
	RepliesDropped *prometheus.CounterVec
	// HostsOnline is the number of trusted peers whose presence is
	// current.
	HostsOnline prometheus.Gauge
	// Connected is 1 while the federation's broker connection is up.
	Connected prometheus.Gauge
	// PresenceAge is, for each accepted presence, this host's clock at
	// arrival minus the sender's issued time, in seconds: the broker's
	// delivery delay plus the clocks' difference. A growing age means a
	// backlog in the roster queue (this manager or the broker is too slow).
	PresenceAge prometheus.Histogram
	// Calls counts remote tool calls by direction ("in": served here,
	// "out": sent from here), remote host and outcome (ok, error: a
	// JSON-RPC error, refused, timeout, failed, cancelled).
	Calls *prometheus.CounterVec
	// CallRTT is the round-trip time of remote tool calls sent from here
	// that got an answer, in seconds.
	CallRTT prometheus.Histogram
	// ControlRTT is the round-trip time of control requests sent from
	// here that got a reply, in seconds.
	ControlRTT prometheus.Histogram
	// Provisioning counts this manager's provisioning of its host on the
	// broker by outcome: "key_conflict" (refused: the host id is
	// registered with another key, docs/FEDERATION.md "Identity"),
	// "took_over" (--take-over-host replaced another key) or "ok".
	Provisioning *prometheus.CounterVec
}

// NewMetrics returns fresh collectors (not registered).
func NewMetrics() *Metrics {
	m := &Metrics{
		PresenceReceived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_presence_received_total",
			Help: "Presence and offline messages accepted, by sending host."}, []string{"host"}),
		PresenceDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_presence_dropped_total",
			Help: "Presence and offline messages dropped, by reason."}, []string{"reason"}),
		ControlRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_control_requests_total",
			Help: "Control requests by direction (in, out), verb and outcome."}, []string{"direction", "verb", "outcome"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_rejections_total",
			Help: "Requests dead-lettered to fleet.dlq by this host, by reason."}, []string{"reason"}),
		RepliesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_replies_dropped_total",
			Help: "Replies dropped, by reason (late: the caller gave up)."}, []string{"reason"}),
		HostsOnline: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetmgr_federation_hosts_online",
			Help: "Trusted peers whose presence is current."}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetmgr_federation_connected",
			Help: "1 while the federation's broker connection is up."}),
		PresenceAge: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetmgr_federation_presence_age_seconds",
			Help:    "Arrival time minus issued time of accepted presence (delivery delay plus clock difference).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_calls_total",
			Help: "Remote tool calls by direction (in, out), remote host and outcome."}, []string{"direction", "host", "outcome"}),
		CallRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetmgr_federation_call_rtt_seconds",
			Help:    "Round-trip time of remote tool calls sent from this host.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 20)}),
		ControlRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleetmgr_federation_control_rtt_seconds",
			Help:    "Round-trip time of control requests sent from this host.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		Provisioning: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleetmgr_federation_provisioning_total",
			Help: "Provisioning of this host on the broker by outcome (ok, took_over, key_conflict: refused, the host id is registered with another key)."}, []string{"outcome"}),
	}
	for _, o := range []string{"ok", "took_over", "key_conflict"} {
		m.Provisioning.WithLabelValues(o)
	}
	for _, r := range wire.Reasons {
		m.PresenceDropped.WithLabelValues(string(r))
		m.Rejections.WithLabelValues(string(r))
	}
	return m
}

// Collectors returns every collector, for prometheus.Registerer.MustRegister.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.PresenceReceived, m.PresenceDropped, m.ControlRequests, m.Rejections,
		m.RepliesDropped, m.HostsOnline, m.Connected, m.PresenceAge, m.ControlRTT, m.Calls, m.CallRTT, m.Provisioning}
}

// verbLabel bounds the verb label.
func verbLabel(v string) string {
	if wire.KnownVerb(v) {
		return v
	}
	return "other"
}
