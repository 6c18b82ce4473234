// Package dashboard is fleetmgr's live page: `fleetmgr serve` mounts it at
// / on [manager] listen, behind the same guard and Host/Origin checks as
// /mcp. It shows what `fleetmgr status --json` reports (docs/status-schema.json:
// the same status engine, given as a StatusFunc, never a second roster),
// pushed over Server-Sent Events, plus the pictures a table cannot give: a
// verdict timeline per member, per fleet a sparkline of tool calls and
// their p50 latency, restarts on a time axis, and each fleet's log
// following live. It can start, stop and restart fleets through the same
// path as the manager tools (an ActionFunc).
//
// # Data flow
//
// The daemon gives interfaces, not its own types (Options): Status samples
// members (about one status interval per call), Rows reads a report made
// without probing (lifecycle rows from state files and /proc, and, when
// serve federates, the other hosts' fleets and the federation from
// presence in memory), Action runs a verb (the manager tools' path), Logs
// tails and follows logs, Calls reads the proxy's call counters, Changes
// signals that the rows may have changed (a state file written, a config
// reload, the federation's view), Files answers from memory whether a
// worktree changed. While a page is open (and Linger after) Server.Run
// reads Rows on every Changes signal (every StateEvery as a safety net,
// or polled every StateEvery without Changes), samples members at a
// period that starts at SampleEvery and doubles up to SampleIdle while
// nothing changes, and at once for a fleet that came up, was acted on or
// whose files changed; with no page open it reads nothing. A fleetd killed
// shows as a "fleet" event as soon as its state file says so, a member
// sampling as a "report" event, a host's change as a "federation" event,
// a [[notify]] notification as a "notify" event (Server.Notify; the page
// raises a browser notification for it when the operator allowed them).
// Between changes nothing is sent but a keep-alive comment. Recent events
// stay in a bounded ring, so a page that lost its stream resumes with
// Last-Event-ID and gets what it missed, or a full snapshot when the ring
// no longer holds it (or the id is from another serve). The verdict
// samples and sparkline points are kept server side (bounded by
// Timeline), so a reload shows the history. With a Journal (serve's), the
// restart marks and the call sparklines a page opens with are read from it
// (history.go), so they survive a serve restart and show calls made
// before the page opened; while a page is open the marks follow its
// restart events and the sparklines the call counters.
//
// # Security
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// framework, no CDN, no build step, no request to any other origin): a
// page whose every line is in this package can be reviewed, it keeps its
// weight far under 150 KB, and its strict Content-Security-Policy
// (ContentSecurityPolicy: no inline script or style, Trusted Types with
// one policy that only makes the shared worker's URL, frame-ancestors
// 'none') has almost nothing to make exceptions for. Every tab of a
// browser shares one worker (assets/worker.js) holding the page's two
// streams, so any number of tabs costs two connections.
// Every value that comes from a fleet (member names, log lines, tool
// names, errors) is set with textContent or setAttribute, never parsed as
// HTML; under Trusted Types an innerHTML assignment would throw. The only
// mutating endpoint, POST /api/action, needs Origin equal to the page's
// own, a JSON body and the page's CSRF token (an HMAC-SHA256 of a random
// nonce under a per-Server secret, given to the page in a meta tag and
// sent back in the X-Fleetmgr-Csrf header); it is idempotent, because the
// lifecycle verbs are. Refusals are logged and counted
// (fleetmgr_dashboard_refusals_total). Who may reach the page at all is
// the guard's business: the daemon wraps the Server with the guard's
// middleware, as it does /mcp, so a process in a herdr pane gets 403.
//
// # Testing contract
//
// Each fleet's element carries data-fleet="NAME" (NAME@HOST for another
// host's), data-state="STATE" (the lifecycle word `fleetmgr list` prints:
// running, stopped, …) and data-host ("local" or the host), each member's
// element data-member="ID" and data-verdict="VERDICT" (WORKING, STALLED,
// IDLE, BLOCKED, UNKNOWN, REMOTE), each host of the federation data-host
// and data-host-state (online, expired, offline, never-seen), so tests and
// scripts can read the page without depending on its layout. The root
// element carries data-live="true" while the event stream is connected.
// README "Dashboard" documents it.
package dashboard
