// Package status answers "which fleet is working, which member is stalled"
// (docs/ARCHITECTURE.md "Status: working or stalled"). One code path serves
// `fleetmgr status` and the MCP tool fleetmgr_status: Collector.Collect
// builds a Report.
//
// Per fleet it reports the lifecycle state, pid, uptime, restarts, the last
// restart's reason, a pending restart or a crash loop, the last exit,
// /healthz latency, whether the herdr session answers ping, the broker
// (through a hook) and the member count. Per member (roster from the fleet's
// own fleet_list tool) it gives a verdict from evidence, never from the
// member's claim alone, because fleetd's liveStatus can read "working" for
// hours while nothing happens (fleetd issue #160; docs/fleetd.md):
//
//   - BLOCKED: herdr's agent_status for the member's pane is "blocked"
//     (waiting for a human).
//   - a member that claims to be busy (liveStatus or agent_status
//     "working") is sampled twice, Interval apart: the newest change under
//     its worktree (a pruned walk, or the serve daemon's inotify counters)
//     and a hash of its pane's recent output. Either changed → WORKING with
//     the evidence ("files", "output"); neither → STALLED with the age of
//     the last change.
//   - not busy → IDLE.
//   - pane or worktree gone, herdr or fleetd unreachable, deadline passed →
//     UNKNOWN with the reason.
//   - a fleet whose host is not this one → REMOTE, never probed; when that
//     host federates, its row is filled from the host's presence instead
//     (AddRemote), and every fleet of every peer is listed as NAME@HOST.
//
// Every fleet and every member is sampled in parallel, so one Collect costs
// about one Interval however many members there are, and each fleet has its
// own deadline so a hung fleet cannot delay the others.
package status

import (
	"fmt"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/resources"
)

// SchemaVersion is Report.SchemaVersion: bumped only on an incompatible
// change of the JSON shape documented in docs/status-schema.json.
const SchemaVersion = 1

// Verdict is a member's (or an unprobed fleet's) verdict.
type Verdict string

// The verdicts.
const (
	Working Verdict = "WORKING" // claims busy and its files or output changed between samples
	Stalled Verdict = "STALLED" // claims busy, nothing changed between samples
	Idle    Verdict = "IDLE"    // does not claim to be busy
	Blocked Verdict = "BLOCKED" // herdr agent_status blocked: waiting for a human
	Unknown Verdict = "UNKNOWN" // could not be judged; Reason says why
	Remote  Verdict = "REMOTE"  // the fleet runs on another host and is never probed
)

// Evidence kinds named in a WORKING verdict.
const (
	EvidenceFiles  = "files"  // a file or directory under the worktree changed
	EvidenceOutput = "output" // the pane's recent output changed
)

// File evidence sources (FileEvidence.Source).
const (
	SourceWatch = "watch"      // inotify counters kept by `fleetmgr serve`
	SourceWalk  = "walk"       // a pruned walk of the worktree at sample time
	SourceMixed = "watch+walk" // counters, plus a walk of the directories that hold no watch
)

// Report is one status answer. Its JSON form is the stable schema in
// docs/status-schema.json.
type Report struct {
	// SchemaVersion is SchemaVersion.
	SchemaVersion int `json:"schema_version"`
	// GeneratedAt is when sampling finished (UTC).
	GeneratedAt time.Time `json:"generated_at"`
	// Host is this host's name (os.Hostname), the "local" of fleet hosts.
	Host string `json:"host"`
	// IntervalMS is the time between the two samples, in milliseconds.
	IntervalMS int64 `json:"interval_ms"`
	// ElapsedMS is the wall time the whole status took, in milliseconds.
	ElapsedMS int64 `json:"elapsed_ms"`
	// Via says who collected it: "daemon" (fleetmgr serve, with its
	// watcher) or "cli" (the fleetmgr status process itself, walking).
	Via string `json:"via"`
	// Fleets are the fleets asked for, sorted by name; never null. A
	// serve that federates adds other hosts' fleets as NAME@HOST rows
	// (AddRemote), each with Remote set.
	Fleets []Fleet `json:"fleets"`
	// Federation is this manager's federation and its peers; absent when
	// it does not federate (or the report was sampled without serve).
	Federation *peerview.Federation `json:"federation,omitempty"`
	// Supervised is true when a fleetmgr serve supervises this host's
	// fleets (restarts them, adopts them), ServePID naming it; Supervision
	// says it in words: "supervised by serve pid N" or "no serve running:
	// fleets are not supervised".
	Supervised  bool   `json:"supervised"`
	ServePID    int    `json:"serve_pid,omitempty"`
	Supervision string `json:"supervision,omitempty"`
	// Cached is true when the report is serve's last sampling rather than
	// one made for this request (fleetmgr status without --fresh); AgeMS
	// is then how old it was when answered, in milliseconds.
	Cached bool  `json:"cached,omitempty"`
	AgeMS  int64 `json:"age_ms,omitempty"`
	// ConfigError is set while fleets.toml does not load: each problem
	// with file:line; the report is of the last configuration that loaded
	// (the running serve's, or the state dir's last good copy).
	ConfigError string `json:"config_error,omitempty"`
	// NotifyFailing are the notification sinks ([[notify]]) whose last
	// delivery failed after its retries, sorted by rule and sink; absent
	// when none is failing (or the report was made without serve).
	NotifyFailing []FailingSink `json:"notify_failing,omitempty"`
}

// FailingSink is a [[notify]] sink whose last delivery failed.
type FailingSink struct {
	// Rule is the rule's name; Sink the sink's type and index in it
	// ("webhook#0").
	Rule string `json:"rule"`
	Sink string `json:"sink"`
	// Failures counts the deliveries in a row that failed (after their
	// retries); LastError is the last one's error.
	Failures  int    `json:"failures"`
	LastError string `json:"last_error"`
	// LastOK is when a delivery through it last succeeded (UTC); absent
	// when none has since serve started.
	LastOK time.Time `json:"last_ok,omitzero"`
}

// FailingSinkLine is the line status and check show for a failing sink:
// "notify: rule needs-me, sink webhook#0: 3 deliveries in a row failed;
// last error: …".
func FailingSinkLine(f FailingSink) string {
	n := "the last delivery failed"
	if f.Failures > 1 {
		n = fmt.Sprintf("%d deliveries in a row failed", f.Failures)
	}
	return fmt.Sprintf("notify: rule %s, sink %s: %s; last error: %s", f.Rule, f.Sink, n, f.LastError)
}

// SupervisionText is Report.Supervision for a serve of pid (0: none).
func SupervisionText(pid int) string {
	if pid > 0 {
		return fmt.Sprintf("supervised by serve pid %d", pid)
	}
	return "no serve running: fleets are not supervised"
}

// Fleet is one fleet's row.
type Fleet struct {
	// Name is the fleet name from fleets.toml.
	Name string `json:"name"`
	// Host is the fleet's host ("local" or a host name).
	Host string `json:"host"`
	// Verdict is set only when the fleet itself could not be probed:
	// REMOTE (another host) or UNKNOWN (Error says why); empty otherwise.
	Verdict Verdict `json:"verdict,omitempty"`
	// State is the lifecycle phase: running, starting, restarting,
	// stopping, failed, stopped; stale when the recorded fleetd pid names
	// a process that is not the fleet's (LastError says why:
	// lifecycle.PhaseStale); "remote" for a REMOTE fleet.
	State string `json:"state"`
	// Desired is what the operator asked for: running or stopped.
	Desired string `json:"desired,omitempty"`
	// PID is fleetd's pid while it runs; 0 otherwise.
	PID int `json:"pid,omitempty"`
	// Port is fleetd's loopback port.
	Port int `json:"port,omitempty"`
	// UptimeS is seconds since fleetd last started, while it runs.
	UptimeS float64 `json:"uptime_s,omitempty"`
	// Restarts counts supervisor restarts (lifecycle state).
	Restarts int `json:"restarts"`
	// LastExit describes fleetd's last exit, e.g. "exit status 3" or
	// "signal: killed"; empty when none is recorded.
	LastExit string `json:"last_exit,omitempty"`
	// LastError is the last lifecycle error recorded for the fleet.
	LastError string `json:"last_error,omitempty"`
	// LastRestartReason says why the supervisor last restarted fleetd,
	// e.g. "fleetd exited: signal: killed" or "health: 3 consecutive
	// /healthz failures (…)"; empty when it never did.
	LastRestartReason string `json:"last_restart_reason,omitempty"`
	// NextRestartAt is when the supervisor's pending restart is due (UTC);
	// set only while the fleet is restarting (in its backoff).
	NextRestartAt time.Time `json:"next_restart_at,omitzero"`
	// WhatNext says, for a fleet whose last start did not become healthy,
	// what happens next in one sentence: "kb did not become healthy: …;
	// serve retries 2 more times, next in 4 s; `fleetmgr stop kb` to give
	// up", or once start_retries are spent "kb failed: did not become
	// healthy after 3 retries, the last: …; `fleetmgr start kb` to try
	// again" (lifecycle.Shown.Next); empty for any other fleet.
	WhatNext string `json:"what_next,omitempty"`
	// StartRetriesLeft is, while WhatNext applies and start_retries
	// governs the fleet, how many more times serve retries its start (the
	// pending retry, NextRestartAt, included); 0 once it gave up. Absent
	// otherwise.
	StartRetriesLeft *int `json:"start_retries_left,omitempty"`
	// MembersLost counts the members every restart of the fleet ended;
	// LastRestartLost names those the last restart ended (lifecycle
	// state; "restart ended N members (names…)").
	MembersLost int `json:"members_lost"`
	// RestartPolicy is the fleet's `restart` key (always, on-failure,
	// never): what the supervisor does when fleetd exits.
	RestartPolicy   string   `json:"restart_policy,omitempty"`
	LastRestartLost []string `json:"last_restart_lost,omitempty"`
	// CrashLoop is true when the fleet failed more than crash_loop_restarts
	// times within crash_loop_window: the supervisor no longer restarts
	// it until `fleetmgr start` or `fleetmgr restart` (LastError says so).
	CrashLoop bool `json:"crash_loop,omitempty"`
	// NotInConfig is true for a fleet fleets.toml no longer defines but
	// that may still run (removed while it ran): it can be stopped, and is
	// never restarted.
	NotInConfig bool `json:"not_in_config,omitempty"`
	// RestartPending lists the fleets.toml keys (e.g. "command", "env")
	// whose values differ from those the running fleet was started with;
	// its next start (`fleetmgr restart NAME`) applies them.
	RestartPending []string `json:"restart_pending,omitempty"`
	// Health is the /healthz probe (nil when not probed).
	Health *Health `json:"health,omitempty"`
	// Herdr is the herdr session check (nil when not probed).
	Herdr *HerdrCheck `json:"herdr,omitempty"`
	// Broker is the broker check; Configured=false says no broker is
	// configured (nil when not probed).
	Broker *Broker `json:"broker,omitempty"`
	// MemberCount is the number of roster rows: 0 for a stopped fleet, -1
	// when the roster could not be read (unreachable, timeout, a fleet that
	// is starting, restarting or failed, or REMOTE).
	MemberCount int `json:"member_count"`
	// Members are the roster rows with their verdicts; never null.
	Members []Member `json:"members"`
	// Summary counts members per verdict.
	Summary map[Verdict]int `json:"summary"`
	// Error says why the fleet (or its roster) could not be probed.
	Error string `json:"error,omitempty"`
	// SchemaDrift has one sentence per tool this fleet publishes under a
	// name another fleet publishes with a different input schema, saying
	// how this fleet's schema differs, e.g. "spawn: lacks properties c
	// (offered by docs)". fleetmgr exposes the union of properties with
	// required = the intersection, so a call valid for one fleet can be
	// refused by another (docs/ARCHITECTURE.md "The merged catalogue"). Filled in by
	// fleetmgr (proxy.NoteDrift) from the merged catalogue, not by Collect;
	// absent when the fleet has no drift.
	SchemaDrift []string `json:"schema_drift,omitempty"`
	// Resources is what fleetd's and its herdr server's process trees
	// (every pane's processes) cost; nil when the fleet does not run here
	// or /proc could not be read.
	Resources *resources.Usage `json:"resources,omitempty"`
	// ExcludedTools are the fleet's tools fleetmgr does not expose, with
	// why (a name MCP clients refuse, a fleetmgr_ name, a schema that is
	// not an object or already uses a "fleet" argument); sorted by tool.
	// Filled in like SchemaDrift (proxy.NoteDrift); absent when none.
	ExcludedTools []ToolNote `json:"excluded_tools,omitempty"`
	// RelaxedTools are the fleet's tools whose exposed input schema could
	// not be patched exactly to take the added "fleet" argument and so
	// accepts more than the fleet's own (the fleet still validates every
	// call), with why; sorted by tool. Filled in like SchemaDrift; absent
	// when none.
	RelaxedTools []ToolNote `json:"relaxed_tools,omitempty"`
	// Remote is set for a fleet of another host shown from its presence
	// (a NAME@HOST row, or a fleet declared with host = a federated
	// peer): where it was seen and how fresh the counts are. Its other
	// fields are the peer's report (AddRemote).
	Remote *peerview.Fleet `json:"remote,omitempty"`
}

// ToolNote is one of a fleet's tools and what is to be said about it
// (Fleet.ExcludedTools, Fleet.RelaxedTools).
type ToolNote struct {
	// Tool is the tool's name as the fleet publishes it.
	Tool string `json:"tool"`
	// Reason is one sentence, e.g. "its input schema already has a
	// \"fleet\" property, so fleetmgr cannot add its own".
	Reason string `json:"reason"`
}

// Health is one GET /healthz of a fleet's fleetd.
type Health struct {
	// OK is true when fleetd answered with the fleet's own name.
	OK bool `json:"ok"`
	// LatencyMS is the round trip in milliseconds (0 when nothing answered).
	LatencyMS float64 `json:"latency_ms"`
	// Error says what went wrong when OK is false.
	Error string `json:"error,omitempty"`
}

// HerdrCheck is the ping of a fleet's herdr session.
type HerdrCheck struct {
	// Session is the herdr session name.
	Session string `json:"session"`
	// Alive is true when the session's socket answered ping.
	Alive bool `json:"alive"`
	// Error says what went wrong when Alive is false.
	Error string `json:"error,omitempty"`
	// Version and Protocol are what the session's ping reported (herdr's
	// release, e.g. "0.8.2", and its wire protocol number).
	Version  string `json:"version,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	// Warning says, when fleetmgr is not tested with that protocol
	// (herdr.CheckCompat), what to expect; "" otherwise.
	Warning string `json:"warning,omitempty"`
	// Updates says how fleetmgr learns this session's state: pushed by
	// herdr (events) or sampled; nil when the session did not answer.
	Updates *HerdrUpdates `json:"updates,omitempty"`
}

// HerdrUpdates is how fleetmgr follows one herdr session (Tracker).
type HerdrUpdates struct {
	// Mode is UpdatesEvents or UpdatesSampling.
	Mode string `json:"mode"`
	// Reason says why sampling (a protocol without subscriptions, a
	// status sampled by a process that does not follow events); "" for
	// events.
	Reason string `json:"reason,omitempty"`
	// Since is when this mode began (zero when not tracked).
	Since time.Time `json:"since,omitzero"`
	// Resyncs counts the times the subscriptions were taken again (after
	// events_lost, a closed connection or herdr restarting).
	Resyncs int `json:"resyncs,omitempty"`
}

// Broker is a fleet's broker vhost and inboxes, as reported by a
// BrokerProbe.
type Broker struct {
	// Configured is false when no broker is configured (no BrokerProbe, or
	// the probe says so); the other fields are then empty.
	Configured bool `json:"configured"`
	// Vhost is the fleet's vhost.
	Vhost string `json:"vhost,omitempty"`
	// Reachable is true when the vhost answered.
	Reachable bool `json:"reachable"`
	// Inboxes are queue depths by queue name (agent.<id>.inbox …).
	Inboxes map[string]int `json:"inboxes,omitempty"`
	// Note explains an unconfigured or unreachable broker.
	Note string `json:"note,omitempty"`
}

// Member is one roster row with its verdict and evidence.
type Member struct {
	// ID is the member id from fleet_list.
	ID string `json:"id"`
	// PaneID is the member's herdr pane.
	PaneID string `json:"pane_id,omitempty"`
	// Worktree is the member's worktree directory.
	Worktree string `json:"worktree,omitempty"`
	// State is fleet_list's state (fleetd reports "ready" even for a dead
	// member).
	State string `json:"state,omitempty"`
	// LiveStatus is fleet_list's liveStatus: the member's claim.
	LiveStatus string `json:"live_status,omitempty"`
	// AgentStatus is herdr's agent_status for the pane ("" when unread).
	AgentStatus string `json:"agent_status,omitempty"`
	// Verdict is the judgement.
	Verdict Verdict `json:"verdict"`
	// Evidence lists what changed for WORKING ("files", "output").
	Evidence []string `json:"evidence,omitempty"`
	// Reason is a human explanation, always set for UNKNOWN and STALLED.
	Reason string `json:"reason,omitempty"`
	// LastChangeAgeS is, for STALLED (and WORKING/IDLE when known), the
	// seconds since the newest change seen in files or output.
	LastChangeAgeS *float64 `json:"last_change_age_s,omitempty"`
	// Files is the file evidence (nil when not sampled).
	Files *FileEvidence `json:"files,omitempty"`
	// Output is the output evidence (nil when not sampled).
	Output *OutputEvidence `json:"output,omitempty"`
	// Resources is what the member's pane's process tree costs (nil when
	// its shell pid or /proc could not be read).
	Resources *resources.Usage `json:"resources,omitempty"`
	// PaneAgeS is the seconds since the pane's shell started.
	PaneAgeS *float64 `json:"pane_age_s,omitempty"`
}

// FileEvidence is what the two file samples saw.
type FileEvidence struct {
	// Source is SourceWatch, SourceWalk or SourceMixed.
	Source string `json:"source"`
	// Changed is true when the second sample saw a newer change.
	Changed bool `json:"changed"`
	// LastChange is the newest change seen (zero when the tree is empty).
	LastChange time.Time `json:"last_change,omitzero"`
}

// OutputEvidence is what the two pane.read samples saw.
type OutputEvidence struct {
	// Changed is true when the recent output's hash differed.
	Changed bool `json:"changed"`
	// LastChange is when the output was last seen to change, known only
	// to a long-lived collector (the serve daemon) across calls.
	LastChange time.Time `json:"last_change,omitzero"`
}
