// Package daemon is `fleetmgr serve`: the server. The CLI's way to it is
// package serveclient; what both sides share (serve.json, the verbs, the
// journal tools' arguments, the refusal code, the errors) is package
// serveapi, so neither imports the other.
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
// serve.json (serveapi.Info), which tells every other fleetmgr process where the
// daemon is.
//
// # Errors
//
// A *serveapi.Refusal is a refusal by the guard's rules (fleetmgr exits
// 3); a *serveapi.UsageError a request that cannot be carried out as
// given (exit 2).
package daemon
