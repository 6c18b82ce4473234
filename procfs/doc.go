// Package procfs reads facts about local processes from Linux's /proc: the
// stat line (parent, process group, session, controlling terminal, start
// time), environment, executable, argument vector, uids, the parent chain,
// the boot id, and which process holds a given loopback TCP or unix socket.
//
// fleetmgr uses these facts for caller identity: the guard refuses callers
// that live inside a herdr pane (docs/SECURITY.md "What the guard checks",
// docs/herdr.md "Is a process inside a pane?"), and the fleetd stand-in
// resolves callers by peer pid the way real fleetd does (docs/fleetd.md
// "Caller identity"). lifecycle checks a recorded
// process's boot id, executable, argv and environment before it signals it
// (docs/ARCHITECTURE.md "Lifecycle of one fleet").
//
// Every function reads /proc afresh; nothing is cached. Errors are wrapped
// and name the pid and the file that failed; callers can test for a vanished
// process with errors.Is(err, fs.ErrNotExist) and for an unmatched socket
// with errors.Is(err, ErrNotFound). No function panics on malformed input.
package procfs
