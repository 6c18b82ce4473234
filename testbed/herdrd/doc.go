// Package herdrd is TEST EQUIPMENT: a stand-in for the herdr server (the terminal agent
// multiplexer, public repository ogulcancelik/herdr, also published as herdrdev/herdr), used by
// fleetmgr's tests and demo because the real herdr cannot be installed here. It is not herdr and
// must not be shipped as such.
//
// Versions matched: herdr 0.8.2 (source of 2026-08-22, protocol 20) by default, with the JSON
// API schema of protocol 20 (herdr-api.schema.json in the shared folder beside the clone,
// ../shared/ref; the repository carries no copy) that every answer is checked
// against. Config.Protocol makes it answer as 0.8.0 (protocol 19: the same JSON API; the bump to
// 20 was the TUI client's protocol) or as 0.9.x (protocol 22, from the 0.9.0–0.9.3 release notes
// and third-party compatibility reports: an invalid request keeps its readable id, panes get
// TERM_PROGRAM=herdr). Paths in parentheses below are files of herdr's repository; docs/herdr.md
// says what of herdr fleetmgr relies on.
//
// What it reproduces:
//   - The JSON API socket (src/ipc.rs, src/api/server.rs): mode 0600, parent dirs created, a
//     stale socket replaced, a live one refused with AlreadyRunningError; one newline-terminated
//     request per connection (at most 1 MiB, within 5 s), one answer line, then close.
//   - Methods ping, workspace.create, tab.create, tab.list, pane.list, pane.get,
//     pane.process_info, pane.send_input, pane.send_text, pane.read, pane.close, tab.close,
//     session.snapshot and server.stop, and the push methods events.subscribe, events.wait,
//     pane.report_metadata and notification.show (Config.WithoutPush removes these, as a
//     herdr without them). Anything else, a non-string id or a missing
//     or malformed params object gets invalid_request with id "" (before protocol 22).
//   - Events (herdr src/api/event_hub.rs, src/api/subscriptions.rs, src/api/wait.rs): every
//     event goes into one history of the last 512 (Config.EventHistory); each subscription
//     has a cursor into it, served every 100 ms. Emitted: workspace_created/closed,
//     tab_created/closed, pane_created/closed/exited/updated (updated on
//     pane.report_metadata), pane_agent_detected and pane_agent_status_changed. Lifecycle
//     events are sent as {"event":"pane_closed","data":{"type":"pane_closed",…}}, the
//     per-pane status as {"event":"pane.agent_status_changed","data":{…}}; a status
//     subscription whose agent_status filter the pane already matches fires at once; a bad
//     subscription is one error line and a close; any byte from the client after its request
//     line (or a half-close) ends the subscription (src/ipc.rs probe_stream_closed).
//     Protocol 20 (0.8.2): a lifecycle subscription first replays the retained history
//     (herdr issue #1270), writes at most one event per 100 ms, and a subscriber left behind
//     the history silently skips what was dropped (herdr issue #4178). Protocol 22 (0.9.x):
//     live events only, drained in batches of up to 64 per 100 ms, and a subscriber left
//     behind gets {"id":<its id>,"error":{"code":"events_lost",…}} and is closed (herdr
//     pull request #4225). events.wait serves only match_event pane_agent_status_changed
//     (others: unsupported_event_wait_match), at once when the pane already matches, else on
//     the event or timeout_ms (error "timeout").
//   - pane.report_metadata keeps labels, title, display agent and tokens per source, ignores
//     a seq not above the source's last, expires ttl_ms, and shows the merge in PaneInfo
//     (state_labels …); Server.PaneLabels reads it. notification.show answers shown false,
//     no_foreground_client (a headless server has no TUI client) and is recorded
//     (Server.Notifications).
//   - IDs as herdr writes them: w<N>, w<N>:t<N>, w<N>:p<N> with N in bijective base 32 over
//     "123456789ABCDEFGHJKMNPQRSTVWXYZ0"; terminal ids "term_<hex µs><hex counter>".
//   - Every pane is a real interactive login shell (/bin/bash if present, else /bin/sh) on a real
//     PTY (creack/pty, Setsid+Setctty), 120x40, so shell_pid leads its own session and job
//     control gives foreground jobs their own process group. Pane environment: the server's
//     whole environment (as herdr's panes until 0.9.2, herdr issue #4104) minus
//     CODEX_THREAD_ID, then the caller's env, then HERDR_ENV=1, HERDR_SOCKET_PATH,
//     HERDR_BIN_PATH, HERDR_WORKSPACE_ID, HERDR_TAB_ID, HERDR_PANE_ID, TERM, COLORTERM
//     (src/pane.rs, src/integration/env.rs). The stand-in CLI exports HERDR_SESSION into the
//     server's environment for --session, as herdr does, so named sessions' panes carry it.
//   - pane.process_info as herdr 0.8.2 on Linux (src/platform/linux.rs): tpgid of the shell,
//     breadth-first walk of the children of every thread from the shell and the group leader,
//     members kept by process group (zombies included), sorted by pid; empty argv parts
//     dropped; no foreground group id nor list when no member is reachable; tty never set.
//   - pane.read answers revision 0 always (src/app/api/panes.rs, herdr issue #2804);
//     PaneInfo.revision rises on title and status changes, not on output.
//   - server.stop answered ok with the stopping state set first: later requests but ping get
//     server_unavailable, a repeated server.stop gets ok (herdr issue #2612, fixed in 0.8.2).
//   - Closing a pane or tab, a shell exiting, and server shutdown signal every process whose
//     session id is the shell's with SIGHUP, SIGTERM, then SIGKILL, 250 ms apart (a step is cut
//     short once no such process is left); the socket goes only after every pane is gone.
//
// Differences from herdr: there is no TUI client socket, no session.json persistence, no
// splits or moves (so no focus, move, layout, worktree or scroll events), no
// pane.output_matched or pane.scroll_changed subscriptions (refused with invalid_params), no
// tab-bar status or keybound commands, and no terminal emulator — pane.read renders a line-oriented
// approximation of the screen from a 256 KiB ring of raw output per pane.
//
// Test hook (test equipment only): pane output containing "\x1b]777;herdr-status;STATE\x07"
// (STATE one of idle|working|blocked|done|unknown) sets that pane's agent_status to STATE and
// its agent to "standin"; emit it with printf '\033]777;herdr-status;blocked\007'. A change of
// status or of the OSC 0/2 window title bumps PaneInfo.revision; output alone does not.
package herdrd
