package dashboard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
)

// StatusFunc samples fleets as `fleetmgr status --json` does and returns
// the report (docs/status-schema.json): the fleets named (every configured
// fleet when names is empty), members judged from two samples an interval
// apart. The daemon passes its status collector (status.Collector.Collect,
// with the schema drift of its merged catalogue noted), so the page shows
// the same data as the CLI and fleetmgr_status. It may take about one
// status interval; an error (an unknown fleet after a config reload) is
// logged and the next period tries again.
type StatusFunc func(ctx context.Context, names []string) (*status.Report, error)

// RowsFunc returns a report made without probing anything: every
// configured fleet's row from config and lifecycle state only
// (status.Collector.Rows) and, when serve federates, the other hosts'
// fleets as NAME@HOST rows and the report's federation object (hosts with
// their state and last beat), both from presence already in memory
// (proxy.Proxy.AddRemote). It is cheap enough to call on every
// Options.Changes signal, so a fleetd killed, a stop, a pending restart or
// a host going offline shows in the page at once, long before the next
// member sampling. The set of names it returns is the set of fleets shown
// (a config reload or a peer's presence changes it). Schema drift, which
// the daemon notes on each sampling, is kept from the last one when a row
// has none.
type RowsFunc func(ctx context.Context) (*status.Report, error)

// Verb is a lifecycle action the page may ask for.
type Verb string

// The verbs of POST /api/action: the same as the CLI's and the manager
// tools' (fleetmgr_start, fleetmgr_stop, fleetmgr_restart).
const (
	VerbStart   Verb = "start"
	VerbStop    Verb = "stop"
	VerbRestart Verb = "restart"
)

// Action is one lifecycle action asked for through the page.
type Action struct {
	// Verb is start, stop or restart.
	Verb Verb `json:"verb"`
	// Fleet is the fleet's name, one the current status rows know.
	Fleet string `json:"fleet"`
	// Lead also launches the fleet's lead (start and restart only), like
	// `fleetmgr start --lead`.
	Lead bool `json:"lead,omitempty"`
}

// ActionResult is what an action did: the fleet's phase and fleetd pid
// after it, the lifecycle steps it went through, and its error.
type ActionResult struct {
	// State is the fleet's lifecycle phase after the action.
	State lifecycle.Phase `json:"state,omitempty"`
	// PID is fleetd's pid after the action (0: none runs).
	PID int `json:"pid,omitempty"`
	// Steps are the completed lifecycle steps, in order.
	Steps []lifecycle.Step `json:"steps"`
}

// ActionFunc runs one action through the same path as the manager tools
// fleetmgr_start, fleetmgr_stop and fleetmgr_restart (the daemon passes
// proxy.Proxy.Act, which they call too): a fleet name the config in force
// does not know makes it read fleets.toml again first, and a name still
// unknown is an error wrapping ErrUnknownFleet (see UnknownFleet), with
// nothing done. It must be idempotent as those are: starting a running
// fleet or stopping a stopped one succeeds and changes nothing. The
// context carries no request cancellation (a page closed during a start
// does not abort it) and ends after Options.ActionTimeout.
type ActionFunc func(ctx context.Context, a Action) (ActionResult, error)

// ErrUnknownFleet is what an ActionFunc's error wraps when the fleet is
// not one fleets.toml defines (even after it was read again): nothing was
// done, and the page's request is refused with 400 (unknown_fleet),
// logged and counted.
var ErrUnknownFleet = errors.New("unknown fleet")

// UnknownFleet returns err marked as ErrUnknownFleet (errors.Is), its text
// unchanged.
func UnknownFleet(err error) error { return unknownFleetError{err} }

type unknownFleetError struct{ error }

func (e unknownFleetError) Is(target error) bool { return target == ErrUnknownFleet }
func (e unknownFleetError) Unwrap() error        { return e.error }

// FileActivity answers from memory whether anything changed under a
// directory after a time; *status.Watcher implements it (ChangedSince).
// known is false when it cannot tell without walking: the dashboard then
// does not ask again for that member before its fleet's next sampling.
type FileActivity interface {
	ChangedSince(dir string, t time.Time) (changed, known bool)
}

// Logs reads fleets' logs; *lifecycle.Manager implements it (LogTail and
// FollowLog, see lifecycle/logs.go). proc is "fleetd" or "herdr".
type Logs interface {
	// LogTail returns the last n lines of the fleet's proc log.
	LogTail(name, proc string, n int) ([]string, error)
	// FollowLog writes what is appended to the log to w until ctx ends,
	// across rotations.
	FollowLog(ctx context.Context, name, proc string, w io.Writer) error
}

// Bucket is one cumulative bucket of a latency histogram: Count calls took
// at most UpperBound seconds (the last bucket may be +Inf).
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// CallCounts are one fleet's cumulative tool-call counters since the
// daemon started, as the proxy's Prometheus metrics hold them
// (fleetmgr_tool_calls_total, fleetmgr_tool_call_duration_seconds).
type CallCounts struct {
	// Calls counts forwarded tool calls.
	Calls uint64
	// Errors counts those whose outcome was not "ok".
	Errors uint64
	// Buckets is the cumulative latency histogram, ascending UpperBound.
	Buckets []Bucket
}

// CallsFunc returns every fleet's cumulative call counters. The dashboard
// reads it every CallsEvery while a page is open and draws, per fleet, a
// sparkline of the calls and the p50 latency of each period (from the
// bucket differences). PrometheusCalls adapts the proxy's registry.
type CallsFunc func() (map[string]CallCounts, error)

// Options configure a Server. Status, Rows and Action are required; every
// other field has a default.
type Options struct {
	// Status samples fleets (required).
	Status StatusFunc
	// Warm, when set, is used instead of Status for the one sampling Run
	// takes at its start, before any page is open, so the first page has
	// members to show: the daemon passes a Collect that reads no
	// resources (without status.Request.Resources), which are read only
	// while someone looks. Nil: Status.
	Warm StatusFunc
	// Rows reads the fleets' lifecycle rows cheaply (required).
	Rows RowsFunc
	// Action runs start/stop/restart (required).
	Action ActionFunc
	// Logs gives the log tails the page follows; nil: no logs shown
	// (/api/logs answers 404).
	Logs Logs
	// Calls gives the tool-call counters for the sparklines; nil: none.
	Calls CallsFunc
	// RestartTimes gives the restarts the supervisor recorded for a fleet
	// (lifecycle State.RestartTimes: those within crash_loop_window,
	// oldest first), to place restarts that happened while no page was
	// open on the time axis; nil: only restarts seen while a page is open
	// are marked. ManagerRestartTimes adapts a *lifecycle.Manager.
	RestartTimes func(fleet string) []time.Time
	// Journal, when set, is where the page's history comes from (the
	// daemon passes serve's *journal.Journal): when a page opens after
	// none was, each fleet's restart marks of the last RestartSpan and
	// the sparklines of the last Timeline × CallsEvery are read from it
	// (the per-fleet newest-N query), so they survive a serve restart and
	// show calls made before the page opened; while a page is open the
	// restart marks follow its restart events (Subscribe) and the
	// sparklines the counters of Calls. RestartTimes is then unused. nil:
	// the history is what this serve saw while a page was open.
	Journal Journal
	// HistoryCalls is how many call events are read per fleet for the
	// sparklines' history (the newest); default 1000.
	HistoryCalls int
	// Metrics, when set, receives fleetmgr_dashboard_refusals_total{reason}
	// (the daemon passes its /metrics registry).
	Metrics prometheus.Registerer
	// Log receives refusals (Warn) and failures; nil discards.
	Log *slog.Logger

	// Changes, when set, says the lifecycle rows may have changed (the
	// daemon sends on a fleet's state file written and on a config
	// reload; a send that finds the channel full is dropped, as one
	// pending signal stands for any number): while a page is open, Run
	// reads Rows at once. Rows is then otherwise read only every
	// StateEvery, as a safety net. Without Changes, Rows is polled every
	// StateEvery.
	Changes <-chan struct{}
	// Files, when set, answers from memory whether anything changed
	// under a worktree (the daemon passes its status watcher,
	// status.Watcher.ChangedSince): while a page is open, every
	// FilesEvery the worktrees of the members that were not WORKING on
	// files at their fleet's last sampling are asked, and a fleet where
	// something changed is sampled at once (a stalled member that writes
	// again shows WORKING without waiting for the next sampling).
	Files FileActivity

	// SampleEvery is the time from the start of one member sampling
	// (Status) to the start of the next while a page is open and things
	// change; default 5 s. Samplings never overlap: a Status that takes
	// longer delays the next.
	SampleEvery time.Duration
	// SampleIdle is the longest time between two member samplings while a
	// page is open: each full sampling that finds nothing changed
	// (quietKey: the same members, verdicts, evidence, claims and probe
	// outcomes; ages and latencies do not count, the page ages them
	// itself) doubles the time to the next, from SampleEvery up to
	// SampleIdle. A sampling that finds a change, a fleet that came up,
	// an action, a page opened after none was, or a file change seen
	// through Files goes back to SampleEvery. Default 60 s; at most
	// SampleEvery: every SampleEvery, always.
	SampleIdle time.Duration
	// StateEvery is how often Rows is read while a page is open: default
	// 250 ms without Changes (10 fleets: about 0.3 % of a core), 5 s with
	// it (a safety net: the signals do the work).
	StateEvery time.Duration
	// FilesEvery is how often Files is asked while a page is open;
	// default 1 s.
	FilesEvery time.Duration
	// CallsEvery is the period of one sparkline point; default 5 s.
	CallsEvery time.Duration
	// Linger keeps sampling this long after the last page closed, so a
	// reload finds fresh data; default 30 s.
	Linger time.Duration
	// Timeline is how many verdict samples are kept per member (server
	// side, so a reload shows them), and how many sparkline points per
	// fleet; default 60.
	Timeline int
	// RestartMarks is how many restarts are kept per fleet for the time
	// axis; default 20.
	RestartMarks int
	// EventRing bounds the events kept for Last-Event-ID resumption: at
	// most this many (default 512) and at most EventRingBytes bytes of
	// encoded events (default 4 MiB). A resume from an event no longer
	// kept gets a full snapshot instead.
	EventRing      int
	EventRingBytes int
	// LogLines is how many log lines a page gets first and keeps per
	// fleet; default 100.
	LogLines int
	// ActionTimeout bounds one action; default 3 minutes (a start waits for
	// /healthz up to start_timeout).
	ActionTimeout time.Duration
	// Heartbeat is the period of the SSE comment that keeps idle streams
	// open through proxies; default 25 s.
	Heartbeat time.Duration
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	def(&o.SampleEvery, 5*time.Second)
	def(&o.SampleIdle, time.Minute)
	o.SampleIdle = max(o.SampleIdle, o.SampleEvery)
	if o.Changes != nil {
		def(&o.StateEvery, 5*time.Second)
	}
	def(&o.StateEvery, 250*time.Millisecond)
	def(&o.FilesEvery, time.Second)
	def(&o.CallsEvery, 5*time.Second)
	def(&o.Linger, 30*time.Second)
	def(&o.ActionTimeout, 3*time.Minute)
	def(&o.Heartbeat, 25*time.Second)
	defInt(&o.Timeline, 60)
	defInt(&o.RestartMarks, 20)
	defInt(&o.HistoryCalls, 1000)
	defInt(&o.EventRing, 512)
	defInt(&o.EventRingBytes, 4<<20)
	defInt(&o.LogLines, 100)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}
