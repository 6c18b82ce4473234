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
// What github.com/prometheus/procfs reads, this package reads through it:
// environ (Environ), the exe link (Exe), the argument vector (Cmdline),
// status's uids (UIDs) and every process's fd links (who holds a socket).
// The stat line is parsed by package procstat, a fast parser held to
// prometheus/procfs's answers by a differential fuzz test (ReadStat runs
// once per ancestor of each guarded connection). What it keeps of its own,
// and why:
//   - this API: errors that name the pid and file and wrap fs.ErrNotExist
//     for a vanished process (prometheus/procfs's Executable answers ""
//     without an error there), Key, Ancestors, HasFlag, HasEnv;
//   - BootID and SinceBoot: prometheus/procfs reads neither the boot id
//     nor CLOCK_BOOTTIME;
//   - the TCP peer and listener lookups: sock_diag over netlink first (tens
//     of microseconds), with its own fuzzed /proc/net/tcp{,6} reader as the
//     fallback, since prometheus/procfs's NetTCP readers are deprecated in
//     favour of netlink and give no way to match one connection's pair;
//   - UnixPeerCred: a socket option, not /proc.
//
// Every function reads /proc afresh; nothing is cached. Errors are wrapped
// and name the pid and the file that failed; callers can test for a vanished
// process with errors.Is(err, fs.ErrNotExist) and for an unmatched socket
// with errors.Is(err, ErrNotFound). No function panics on malformed input.
package procfs
