package serveapi

// Verb is a lifecycle action: the CLI verb, and the manager tool
// fleetmgr_<verb>.
type Verb string

// The verbs Act runs.
const (
	Start   Verb = "start"
	Stop    Verb = "stop"
	Restart Verb = "restart"
)
