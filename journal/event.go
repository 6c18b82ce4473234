// Package journal is serve's durable, append-only record of what happened:
// fleet phase transitions, restarts, member verdict changes, control
// actions, reloads, guard refusals, federation requests, tool calls
// through the mount and notifications (docs/ARCHITECTURE.md "Journal").
//
// The store is one bbolt file (go.etcd.io/bbolt) in the state dir: a
// copy-on-write B+tree whose two checksummed meta pages make a commit
// atomic, so a kill -9 at any moment leaves every earlier commit intact.
// Appends never block their caller: Append hands the event to a buffered
// channel that one writer goroutine (Run, owned by serve) drains in
// batches: each batch is one write(2) to a write-ahead log beside the file
// (Path + "-wal", JSON lines), which a bbolt transaction commits to the
// file once per SyncEvery (and before any Query), emptying the log; Open
// commits what a killed writer left in it. The file is bounded by size and age (Options.MaxBytes,
// Options.MaxAge); a full disk is reported once and counted, never
// returned to a caller; a file bbolt cannot open is set aside and a new
// one started.
package journal

import "time"

// Kinds of event. A kind names what happened; Outcome says how it ended.
const (
	// KindPhase is a fleet's phase transition: Outcome is the new phase,
	// Detail the reason recorded with it, Data["from"] the phase before.
	KindPhase = "fleet.phase"
	// KindRestart is a restart the supervisor made or scheduled: Detail
	// is its cause and "ended N members"; Data["members_ended"] the count.
	KindRestart = "fleet.restart"
	// KindVerdict is a member's verdict change (WORKING, STALLED, BLOCKED,
	// IDLE, UNKNOWN, gone): Member names it, Outcome is the new verdict,
	// Data["from"] the one before.
	KindVerdict = "member.verdict"
	// KindControl is a control action (start, stop, restart, reload …):
	// Origin is who asked, Outcome "ok" or the error, or "indeterminate"
	// for a start, stop or restart of another host's fleet (NAME@HOST)
	// whose request left and got no answer, so it may have run there
	// (Data["cause"] says how it ended).
	KindControl = "control"
	// KindReload is a config reload: Detail is its diff, Outcome "ok" or
	// the error.
	KindReload = "config.reload"
	// KindRefusal is a guard refusal: Origin the peer, Detail the reason.
	KindRefusal = "guard.refusal"
	// KindFederation is a federation request received: Origin the peer
	// host, Outcome "executed", "refused" or the error, Detail the reason;
	// "indeterminate" when it ran here but finished after the peer's
	// expiry, so the peer was told its outcome is unknown
	// (Data["cause"], and Data["result"] what it was here).
	KindFederation = "federation.request"
	// KindHost is a federation peer's state change as this host's view
	// saw it: Origin is the peer host, Outcome the new state (online,
	// expired, offline), Data["from"] the one before.
	KindHost = "federation.host"
	// KindCall is a tool call through the mount: Data holds tool,
	// duration_ms, result_bytes (and arguments only when configured);
	// Outcome is ok, tool_error, protocol_error, timeout or cancelled, or
	// indeterminate for a call sent and cut before its answer, which may
	// have run (Data["cause"] says how it ended).
	KindCall = "call"
	// KindNotify is a notification attempt: Origin is the rule, Data the
	// sink; Outcome "sent" or the error.
	KindNotify = "notify"
)

// AllKinds are the kinds the journal records, in the order `fleetmgr
// events --help` lists them.
var AllKinds = []string{KindPhase, KindRestart, KindVerdict, KindControl, KindReload, KindRefusal, KindFederation, KindHost, KindCall, KindNotify}

// KnownKind reports whether k selects any kind of AllKinds: one of them,
// or the part before a dot ("member" selects member.verdict).
func KnownKind(k string) bool {
	for _, a := range AllKinds {
		if a == k || len(a) > len(k) && a[:len(k)] == k && a[len(k)] == '.' {
			return true
		}
	}
	return false
}

// Event is one journal record. Time is when it happened (UTC); Seq is
// assigned by the journal when it is written (1, 2, …, never reused
// within one file). Fleet is NAME or NAME@HOST ("" for events of serve
// itself). Data holds kind-specific fields (JSON values). Host is set
// only on events read from another host's journal (`fleetmgr events
// NAME@HOST`): that host's id; Seq is then that journal's.
type Event struct {
	Seq     uint64         `json:"seq"`
	Time    time.Time      `json:"time"`
	Host    string         `json:"host,omitempty"`
	Fleet   string         `json:"fleet,omitempty"`
	Member  string         `json:"member,omitempty"`
	Kind    string         `json:"kind"`
	Origin  string         `json:"origin,omitempty"`
	Outcome string         `json:"outcome,omitempty"`
	Detail  string         `json:"detail,omitempty"`
	Data    map[string]any `json:"data,omitempty"`
}
