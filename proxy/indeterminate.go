package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
)

// A call whose outcome fleetmgr cannot know (issue 27 item 8): it was
// sent to the fleet (or to the fleet's host) and then cut — by the
// fleet's restart, the connection, the call timeout, the host going away
// — before an answer came, so it may or may not have run. Such a call is
// never retried, its tool error says that it may have run and to check
// before calling it again (never "call it again"), it is journalled with
// the outcome "indeterminate", and the tool error carries
// _meta {"io.github.fleetmgr/outcome": "indeterminate"}, by which a peer's answer
// tells the calling host the same.

// MetaOutcome is the _meta key of a tool error of fleetmgr's own whose
// call may have run; its value is OutcomeIndeterminate. The key follows
// the MCP rules for _meta keys as StepMetaKey does (a reverse-DNS prefix,
// "/", a name).
const MetaOutcome = "io.github.fleetmgr/outcome"

// OutcomeIndeterminate is a call's journalled outcome when it may or may
// not have run (CallRecord.Indeterminate).
const OutcomeIndeterminate = "indeterminate"

// notSentError is a call's failure before its request reached the fleet
// (no session, the fleet's listener refused the connection, the fleet
// said the session is gone): it did not run.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// notSent marks err as a failure before the request was sent (nil stays
// nil).
func notSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

// mayHaveReached reports whether a failed call's request may have
// reached the fleet (so it may have run).
func mayHaveReached(err error) bool {
	var ns *notSentError
	return !errors.As(err, &ns)
}

// isDialError reports whether err is a failure to connect.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// indeterminate is a tool error saying text, marked as a call that may
// have run (MetaOutcome).
func indeterminate(format string, a ...any) *mcp.CallToolResult {
	res := toolError(format, a...)
	res.Meta = mcp.Meta{MetaOutcome: OutcomeIndeterminate}
	return res
}

// isIndeterminateRaw reports whether a tool result (raw JSON) is marked
// as a call that may have run (a peer's answer of that kind).
func isIndeterminateRaw(raw json.RawMessage) bool {
	if !bytes.Contains(raw, []byte(MetaOutcome)) {
		return false
	}
	var r struct {
		Meta map[string]any `json:"_meta"`
	}
	return json.Unmarshal(raw, &r) == nil && r.Meta[MetaOutcome] == OutcomeIndeterminate
}

// cutWords says that a call sent to a fleet of this host was cut before
// its answer (why), naming the fleet as the caller knows it (NAME@HOST
// for a peer's call) and never inviting a blind retry.
func (p *Proxy) cutWords(c *toolCall, fleet, why string) *mcp.CallToolResult {
	if c.peer != "" {
		host := p.hostName()
		return indeterminate("fleet %s: the call of %s was cut before its answer (%s); it may have run on %s: check before calling it again (it was not retried)",
			peerview.RemoteName(fleet, host), c.name, why, host)
	}
	return indeterminate("fleet %s: the call of %s was cut before its answer (%s); it may have run: check before calling it again (it was not retried)",
		fleet, c.name, why)
}
