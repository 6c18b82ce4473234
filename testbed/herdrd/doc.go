// Package herdrd is TEST EQUIPMENT: a stand-in for the herdr server (the terminal agent
// multiplexer, public repository ogulcancelik/herdr), used by fleetmgr's tests and demo because
// the real herdr cannot be installed here. It is not herdr and must not be shipped as such.
//
// What it reproduces, after /work/shared/ref/herdr-interface.md (cited as "interface §X"):
//   - The JSON API socket (§A1, §B): mode 0600, parent dirs created, a stale socket replaced, a
//     live one refused with ErrAlreadyRunning; one newline-terminated request per connection
//     (at most 1 MiB, within 5 s), one answer line, then close. Every answer validates against
//     the success_response / error_response schemas of herdr protocol 20.
//   - Methods ping, workspace.create, tab.create, tab.list, pane.list, pane.get,
//     pane.process_info, pane.send_input, pane.send_text, pane.read, pane.close, tab.close,
//     session.snapshot and server.stop (§C). Anything else, a non-string id or a missing or
//     malformed params object gets invalid_request with id "".
//   - IDs as herdr writes them (§C): w<N>, w<N>:t<N>, w<N>:p<N> with N in bijective base 32
//     over "123456789ABCDEFGHJKMNPQRSTVWXYZ0"; terminal ids "term_<hex µs><hex counter>".
//   - Every pane is a real interactive login shell (/bin/bash if present, else /bin/sh) on a real
//     PTY (creack/pty, Setsid+Setctty), 120x40, so shell_pid leads its own session and job
//     control gives foreground jobs their own process group (§E). Pane environment per §D.
//   - pane.process_info reads /proc as herdr does (§E): tpgid of the shell, breadth-first walk of
//     children keeping the foreground group, sorted by pid.
//   - Closing a pane or tab, a shell exiting, and server shutdown signal every process whose
//     session id is the shell's with SIGHUP, SIGTERM, then SIGKILL, 250 ms apart (a step is cut
//     short once no such process is left).
//
// Differences from herdr: there is no TUI client socket, no session.json persistence, no
// splits/moves/events, and no terminal emulator — pane.read renders a line-oriented
// approximation of the screen from a 256 KiB ring of raw output per pane.
//
// Test hook (test equipment only): pane output containing "\x1b]777;herdr-status;STATE\x07"
// (STATE one of idle|working|blocked|done|unknown) sets that pane's agent_status to STATE and
// its agent to "standin"; emit it with printf '\033]777;herdr-status;blocked\007'. A change of
// status or of the OSC 0/2 window title bumps PaneInfo.revision; output alone does not.
package herdrd
