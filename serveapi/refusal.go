package serveapi

// RefusalCode is the JSON-RPC error code serve's unix mount answers a peer
// the guard refused with (Refuse); the CLI's client and `fleetmgr mcp`
// turn it into a *Refusal. It is in the range JSON-RPC 2.0 leaves to
// implementations (-32000 to -32099).
const RefusalCode = -32001
