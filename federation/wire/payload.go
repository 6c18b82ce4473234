package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// The JSON bodies of each kind. Unknown fields are ignored (a newer peer
// may add some); every field is bounded and checked by the kind's Check.

// Bounds of a presence message.
const (
	// MaxFleets is the most fleets one presence message lists; a host with
	// more sends the first MaxFleets by name and Truncated = the rest.
	MaxFleets = 256
	// MaxVerdictKinds bounds the entries of FleetSummary.Verdicts.
	MaxVerdictKinds = 8
	// MinHeartbeat and MaxHeartbeat bound a heartbeat interval.
	MinHeartbeat = 100 * time.Millisecond
	MaxHeartbeat = time.Minute
)

// FleetSummary is one fleet in a presence message (about 300 bytes at
// most as JSON, so MaxFleets of them stay under MaxPresenceBody).
type FleetSummary struct {
	// Name is the fleet's name on its host (^[a-z][a-z0-9_-]{0,31}$);
	// other hosts show it as NAME@HOST.
	Name string `json:"name"`
	// State is the fleet's lifecycle phase as its host reports it
	// (running, stopped, failed, starting, stopping, unknown …): 1-16
	// characters of [a-z_-].
	State string `json:"state"`
	// UptimeS is how long fleetd has been up, in seconds (0 when not
	// running).
	UptimeS int64 `json:"uptime_s"`
	// Restarts is the supervisor's restart count.
	Restarts int `json:"restarts"`
	// CrashLoop is true when the fleet is failed in a crash loop.
	CrashLoop bool `json:"crash_loop,omitempty"`
	// Members is the number of members fleetd lists.
	Members int `json:"members"`
	// Verdicts counts members per verdict (WORKING, IDLE, STALLED,
	// BLOCKED, UNKNOWN; keys of 1-16 characters of [A-Za-z_-], at most
	// MaxVerdictKinds).
	Verdicts map[string]int `json:"verdicts,omitempty"`
	// VerdictsAgeS is how old Members and Verdicts are, in seconds: they
	// are the sender's last status report of the fleet, not a sampling
	// per beat (docs/FEDERATION.md "Presence and the union view"). Absent
	// when the sender never judged the fleet's members in its current
	// run (then Members and Verdicts say nothing: 0 and none). A
	// duration, not a time, so the hosts' clocks need not agree. Added
	// after version 1's first release: older senders omit it.
	VerdictsAgeS *int64 `json:"verdicts_age_s,omitempty"`
	// Catalogue is the SHA-256 (hex) of the fleet's tools/list as its host
	// last read it, "" when unknown: a change tells other hosts to fetch
	// the catalogue again (docs/FEDERATION.md "Remote tool calls").
	Catalogue string `json:"catalogue,omitempty"`
}

// Presence is the body of KindPresence.
type Presence struct {
	// HeartbeatMS is the sender's heartbeat interval in milliseconds; a
	// receiver expires the host after 3 such intervals without a beat,
	// counted on its own clock.
	HeartbeatMS int64 `json:"heartbeat_ms"`
	// StartedMS is when the sender's federation started (Unix ms): a
	// change means the sender restarted.
	StartedMS int64 `json:"started_ms"`
	// Fleets are the sender's local fleets, sorted by name, at most
	// MaxFleets.
	Fleets []FleetSummary `json:"fleets"`
	// Truncated is how many fleets were left out by MaxFleets.
	Truncated int `json:"truncated,omitempty"`
}

// Heartbeat returns HeartbeatMS as a duration.
func (p *Presence) Heartbeat() time.Duration { return time.Duration(p.HeartbeatMS) * time.Millisecond }

// Check validates the bounds of p.
func (p *Presence) Check() error {
	if hb := p.Heartbeat(); hb < MinHeartbeat || hb > MaxHeartbeat {
		return fmt.Errorf("heartbeat_ms %d is outside %d-%d", p.HeartbeatMS, MinHeartbeat.Milliseconds(), MaxHeartbeat.Milliseconds())
	}
	if len(p.Fleets) > MaxFleets {
		return fmt.Errorf("%d fleets, at most %d", len(p.Fleets), MaxFleets)
	}
	if p.Truncated < 0 {
		return fmt.Errorf("truncated %d is negative", p.Truncated)
	}
	seen := map[string]bool{}
	for i := range p.Fleets {
		f := &p.Fleets[i]
		if err := f.Check(); err != nil {
			return fmt.Errorf("fleets[%d]: %v", i, err)
		}
		if seen[f.Name] {
			return fmt.Errorf("fleets[%d]: fleet %q listed twice", i, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// Check validates the bounds of f.
func (f *FleetSummary) Check() error {
	switch {
	case !ValidFleetName(f.Name):
		return fmt.Errorf("name %q is not a fleet name (^[a-z][a-z0-9_-]{0,31}$)", clip(f.Name))
	case !word(f.State, 16, false):
		return fmt.Errorf("state %q is not 1-16 characters of [a-z_-]", clip(f.State))
	case f.UptimeS < 0 || f.Restarts < 0 || f.Members < 0 || f.Members > 1_000_000 || f.Restarts > 1_000_000_000:
		return fmt.Errorf("uptime_s, restarts or members out of range")
	case len(f.Verdicts) > MaxVerdictKinds:
		return fmt.Errorf("%d verdict kinds, at most %d", len(f.Verdicts), MaxVerdictKinds)
	case f.VerdictsAgeS != nil && (*f.VerdictsAgeS < 0 || *f.VerdictsAgeS > 1<<40):
		return fmt.Errorf("verdicts_age_s %d is out of range", *f.VerdictsAgeS)
	case f.Catalogue != "" && !hexDigits(f.Catalogue, 64):
		return fmt.Errorf("catalogue %q is not a SHA-256 in hex", clip(f.Catalogue))
	}
	for k, n := range f.Verdicts {
		if !word(k, 16, true) || n < 0 || n > 1_000_000 {
			return fmt.Errorf("verdict %q: %d is out of range", clip(k), n)
		}
	}
	return nil
}

// ValidFleetName reports whether s is a fleet name, ^[a-z][a-z0-9_-]{0,31}$
// (the rule of fleets.toml).
func ValidFleetName(s string) bool {
	if len(s) < 1 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// word reports whether s is 1-n characters of [a-z_-] (and [A-Z] when
// upper).
func word(s string, n int, upper bool) bool {
	if len(s) < 1 || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || c == '-' || upper && c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func hexDigits(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Offline is the body of KindOffline: a host's clean stop.
type Offline struct {
	// Reason is a short free text ("stopping"), at most 128 bytes.
	Reason string `json:"reason,omitempty"`
}

// Check validates the bounds of o.
func (o *Offline) Check() error {
	if len(o.Reason) > 128 {
		return fmt.Errorf("reason longer than 128 bytes")
	}
	return nil
}

// The control verbs (docs/FEDERATION.md "Messages") and the capability
// each needs.
const (
	VerbStart   = "start"
	VerbStop    = "stop"
	VerbRestart = "restart"
	VerbStatus  = "status"
	VerbLogs    = "logs"
	// VerbEvents reads the target's journal of one fleet (issue 25:
	// `fleetmgr events NAME@HOST`); it needs read. A manager older than
	// it answers unknown-verb.
	VerbEvents = "events"
)

// Verbs lists the control verbs.
var Verbs = []string{VerbStart, VerbStop, VerbRestart, VerbStatus, VerbLogs, VerbEvents}

// KnownVerb reports whether v is one of Verbs.
func KnownVerb(v string) bool {
	for _, k := range Verbs {
		if v == k {
			return true
		}
	}
	return false
}

// ReplyAddress is where a requester wants its answers: its reply queue's
// instance id, 16 lower-case hex digits (the routing key on
// fleet.reply.<requester host>).
type ReplyAddress = string

// ValidInstance reports whether s is a reply instance id.
func ValidInstance(s string) bool { return hexDigits(s, 16) }

// ControlRequest is the body of KindControlRequest.
type ControlRequest struct {
	// Verb is one of Verbs. A verb the receiver does not know is refused
	// with ReasonUnknownVerb (so a newer peer gets a clear answer).
	Verb string `json:"verb"`
	// Fleet is the target fleet's name on the receiving host.
	Fleet string `json:"fleet"`
	// Args are the verb's arguments (e.g. {"lines":50} for logs); a JSON
	// object or absent.
	Args json.RawMessage `json:"args,omitempty"`
	// Reply is the requester's reply instance (ValidInstance).
	Reply ReplyAddress `json:"reply"`
}

// Check validates the bounds of r (the verb is checked by the receiver,
// which answers an unknown one).
func (r *ControlRequest) Check() error {
	switch {
	case !word(r.Verb, 32, false):
		return fmt.Errorf("verb %q is not 1-32 characters of [a-z_-]", clip(r.Verb))
	case !ValidFleetName(r.Fleet):
		return fmt.Errorf("fleet %q is not a fleet name", clip(r.Fleet))
	case !ValidInstance(r.Reply):
		return fmt.Errorf("reply %q is not a reply instance (16 hex digits)", clip(r.Reply))
	case len(r.Args) > 0 && !isObject(r.Args):
		return fmt.Errorf("args must be a JSON object")
	}
	return nil
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{' && json.Valid(b)
}

// ReplyStatus says how a request ended.
type ReplyStatus string

// The statuses of a ControlReply.
const (
	// StatusOK: the verb ran; Result holds its output.
	StatusOK ReplyStatus = "ok"
	// StatusFailed: the verb ran and failed; Error says why.
	StatusFailed ReplyStatus = "failed"
	// StatusRefused: the request was refused before running (Reason names
	// why, e.g. not-authorised); it was never executed.
	StatusRefused ReplyStatus = "refused"
)

// ControlReply is the body of KindControlReply.
type ControlReply struct {
	Status ReplyStatus `json:"status"`
	// Result is the verb's output (a JSON value) when Status is ok.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is a human-readable message when Status is failed or refused
	// (at most 4 KiB).
	Error string `json:"error,omitempty"`
	// Reason is the Reason of a refusal.
	Reason Reason `json:"reason,omitempty"`
}

// Check validates r.
func (r *ControlReply) Check() error {
	switch r.Status {
	case StatusOK, StatusFailed, StatusRefused:
	default:
		return fmt.Errorf("status %q is not ok, failed or refused", clip(string(r.Status)))
	}
	if len(r.Error) > 4096 {
		return fmt.Errorf("error longer than 4096 bytes")
	}
	if len(r.Result) > 0 && !json.Valid(r.Result) {
		return fmt.Errorf("result is not JSON")
	}
	return nil
}

// The bodies of remote tool calls and catalogues (docs/FEDERATION.md
// "Remote tool calls"), carried on
// the same request/reply path as control (federation/calls.go).

// CallRequest is the body of KindCallRequest: one tools/call for a fleet
// on the receiving host. Its envelope's Expires is the call timeout.
type CallRequest struct {
	Fleet string `json:"fleet"`
	// Tool is the tool name (^[a-zA-Z0-9_-]{1,64}$).
	Tool string `json:"tool"`
	// Arguments is the call's arguments object, without "fleet".
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Meta is the caller's _meta minus its identity keys.
	Meta json.RawMessage `json:"_meta,omitempty"`
	// Progress asks for KindCallProgress messages.
	Progress bool `json:"progress,omitempty"`
	// Reply is the requester's reply instance.
	Reply ReplyAddress `json:"reply"`
}

// CallProgress is the body of KindCallProgress: one upstream
// notifications/progress params object (its progressToken replaced by
// the caller's manager). Seq orders them; Re is the call's id.
type CallProgress struct {
	Params json.RawMessage `json:"params"`
}

// CallReply is the body of KindCallReply: the tools/call result object,
// or a JSON-RPC error, or a refusal (Reason).
type CallReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
	Reason Reason          `json:"reason,omitempty"`
}

// Cancel is the body of KindCancel; Re is the call's id.
type Cancel struct {
	Reason string `json:"reason,omitempty"`
}

// CatalogueRequest is the body of KindCatalogueRequest.
type CatalogueRequest struct {
	Fleet string       `json:"fleet"`
	Reply ReplyAddress `json:"reply"`
}

// CatalogueReply is the body of KindCatalogueReply: the fleet's tools
// (the tools/list result's "tools" array) and its SHA-256.
type CatalogueReply struct {
	Tools  json.RawMessage `json:"tools,omitempty"`
	Hash   string          `json:"hash,omitempty"`
	Reason Reason          `json:"reason,omitempty"`
	Error  string          `json:"error,omitempty"`
}
