package proxy

import (
	"os"
	"runtime/debug"
)

// DaemonGCPercent is the GC target TuneGC sets for the serve daemon.
//
// Why: profiling the daemon under BenchmarkOverhead (perf record -p on
// fleetmgr serve, fleet_whoami at one caller) showed ~22% of its CPU in
// the garbage collector. The go-sdk (v1.8.0) decodes every JSON-RPC
// message through a fresh segmentio/encoding Decoder with a 32 KiB buffer,
// about ten times per forwarded call (request, _meta checks, upstream
// response, result), so the daemon makes ~300 KiB of short-lived garbage
// per call on a live heap of a few MiB. A 4× GC target trades a few MiB of
// heap for far fewer collections.
const DaemonGCPercent = 400

// DaemonMemoryLimit is the soft memory limit TuneGC sets for the serve
// daemon (runtime/debug.SetMemoryLimit: the Go runtime's own memory,
// not the executable's pages nor the anonymous mappings mcpwire reads
// large messages into).
//
// Why: with DaemonGCPercent the heap may grow to five times what is live
// before a collection. That is a few MiB for the proxy alone, but a serve
// that federates keeps every peer's presence and decodes 50 signed beats a
// second at 100 hosts (docs/FEDERATION.md "Benchmark"): measured there
// (scripts/fed-bench, N = 100), its RSS reached 59-63 MB without a limit
// and 47 MB with one of 36 MiB, at the same CPU (1 % of a core). Below
// the limit nothing changes; near it the collector runs more often
// (the runtime caps that at about half the CPU), so a daemon holding
// more (many large messages in flight) still works, with more GC.
const DaemonMemoryLimit = 40 << 20

// TuneGC sets the daemon's GC target to DaemonGCPercent unless the
// operator chose one with the GOGC environment variable, and its soft
// memory limit to DaemonMemoryLimit unless GOMEMLIMIT is set.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DaemonGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DaemonMemoryLimit)
	}
}
