// Package serveapi is the contract between `fleetmgr serve` (package
// daemon) and its clients (package serveclient, `fleetmgr mcp`, the
// service unit's checks): serve.json (Info) and how a client finds the
// running serve of a state dir (Running, ServePID), the lifecycle verbs,
// the journal tools' arguments and results, the JSON-RPC code of a guard
// refusal, and the errors whose exit statuses the CLI gives (Refusal 3,
// UsageError 2). Both sides import it; neither imports the other.
package serveapi
