// Package serveclient is the CLI's way to fleets (`fleetmgr serve`'s
// client, split from the server, package daemon, as issue 23 asked).
//
// Client is how every CLI verb reaches fleets: through the running serve
// of its state dir when there is one (serveapi.Running), one MCP session over the
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
package serveclient
