// Package daemon is `fleetmgr serve` and the CLI's way to it.
//
// # Serve
//
// Main is the serve command once its flags are parsed: it makes SIGHUP a
// reload request first, loads --env-file (package envfile) before the
// config is read, checks the network exposure (Remote), then detaches
// (Detach: setsid, double fork, the readiness pipe of Readiness) or runs
// Serve. Serve owns the daemon's parts and their goroutines: the state-dir
// lock (LockStateDir, serve.lock), the guard (NewGuard) as HTTP middleware
// on every route but /healthz and as the unix socket's accept-and-refuse
// loop (Refuse), the proxy (package proxy) on /mcp and the socket, the
// supervisor (lifecycle.Supervisor), the status watcher, the dashboard at
// / (package dashboard), SIGHUP and fleetmgr_reload reloads, and
// serve.json (Info), which tells every other fleetmgr process where the
// daemon is.
//
// # Client
//
// Client is how every CLI verb reaches fleets: through the running serve
// of its state dir when there is one (Running), one MCP session over the
// unix socket per call of a manager tool, else in this process through
// the lifecycle.Manager. What it returns is typed: lifecycle.State and
// Outcome, status.Report, lifecycle.ReloadReport, ListRow.
//
// Progress of fleetmgr_start, fleetmgr_stop and fleetmgr_restart arrives
// as lifecycle.Step values, never as text to parse: the proxy puts each
// step in its progress notification's _meta under proxy.StepMetaKey
// ("io.github.fleetmgr/step"), beside the message it writes for people.
// _meta, because a notification has no structuredContent (a tool result
// does: its steps list is the same) and the MCP specification reserves
// _meta for such implementation data under a prefixed key, which other
// clients ignore. See docs/ARCHITECTURE.md "The daemon and its client".
//
// # Errors
//
// A *Refusal is a refusal by the guard's rules (fleetmgr exits 3); a
// *UsageError a request that cannot be carried out as given (exit 2).
package daemon
