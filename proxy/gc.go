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

// TuneGC sets the daemon's GC target to DaemonGCPercent unless the
// operator chose one with the GOGC environment variable.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DaemonGCPercent)
	}
}
