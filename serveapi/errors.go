package serveapi

// Refusal is a refusal by the guard's rules of this process or of the
// CLI's connection (docs/SECURITY.md): serve or a verb started inside a
// herdr pane, or a daemon whose guard refused this caller. fleetmgr exits
// 3 on it.
type Refusal struct{ Err error }

func (e *Refusal) Error() string { return e.Err.Error() }
func (e *Refusal) Unwrap() error { return e.Err }

// ExitStatus is fleetmgr's exit status on a refusal: 3.
func (e *Refusal) ExitStatus() int { return 3 }

// UsageError is a request that cannot be carried out as given: a fleet
// the config does not know, names and "all" at once, an --env-file or
// --token-file that is not private. fleetmgr exits 2 on it, as on a
// fleets.toml that does not load.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitStatus is fleetmgr's exit status on a usage error: 2.
func (e *UsageError) ExitStatus() int { return 2 }
