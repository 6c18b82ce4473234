// Package fleetd is a STAND-IN for fleetd, the Java daemon that drives one
// herdr session of coding agents for one project. It is TEST EQUIPMENT: it
// exists because the real fleetd cannot be installed here, and it is used by
// fleetmgr's tests and demo. It is never the product and must never be
// mistaken for the real daemon.
//
// It reproduces the behaviours of fleetd that shape fleetmgr, as
// docs/fleetd.md records them (from fleetd issue #160):
//
//   - One HTTP server on 127.0.0.1:PORT with GET /healthz answering
//     {"status":"ok","name":"<fleet>"} and MCP (streamable HTTP) at /mcp.
//   - Caller identity resolved per TCP connection like fleetd's
//     CallerResolver: peer pid from /proc/net/tcp (procfs.TCPPeerPID), then
//     the herdr pane that OWNS that pid — pid == the pane's shell_pid or pid is
//     one of its foreground_processes, nothing else — so a grandchild of a pane
//     in a background process group falls through to "primary" (the measured
//     gap). Pane in the lead tab → "lead"; other pane → "worker"; no pane, or
//     a pid that cannot be resolved → "primary" (loopback trust).
//   - Startup orphan reap keyed on a random per-process nonce: every tab
//     labelled "member-<nonce>-<id>" with another nonce is closed, whoever
//     owns it (co-tenancy is destructive).
//   - Lead auto-launch unless disabled.
//   - With a broker URI (from the variable FLEET_BROKER_URI_ENV names, else
//     FLEET_BROKER_URI): a connection to the fleet's vhost at startup (a
//     failed first dial exits 1), a durable agent.<member>.inbox queue
//     declared for each member before it is spawned, and redialling with
//     backoff when the broker goes away while the daemon keeps serving.
//   - A roster that keeps saying state "ready" for members whose pane is gone
//     (liveStatus then reads "unknown").
//
// Tools: fleet_whoami, fleet_list, fleet_spawn, fleet_status, fleet_send,
// fleet_stop (lead-only; primary allowed by loopback trust), fleet_slow
// (progress + cancellation probe) and fleet_add_tool (adds a tool at runtime
// so clients see notifications/tools/list_changed; with input_schema, a tool
// that validates its arguments against that schema and echoes them, to test
// schemas fleetmgr must patch or cannot expose). Every result carries the
// same JSON object as text content and as structuredContent, always with a
// "fleet" field; fleet_echo_size (sizes.go), a probe for tests of message
// sizes, is the exception: it answers with a message of an exact requested
// size, its text a known filler.
//
// Executions are counted by a test-chosen id a call carries in _meta
// (RequestIDMetaKey): each one is an "executed TOOL request-id=ID" line in
// the events file (Config.EventsFile), so tests can show that a call
// delivered through fleetmgr, or across hosts, ran at most once.
//
// Like a go-sdk server by default, the stand-in answers each MCP POST with
// an SSE stream; with Config.JSONResponse (--json-response) it answers with
// one application/json message, as the go-sdk's JSONResponse option does.
//
// Real fleetd has no fleet name, its MCP path is unknown and its tool list
// differs between versions; the name, the /mcp path and the tool set here
// are the stand-in's choices and fleetmgr must not hard-code them.
package fleetd
