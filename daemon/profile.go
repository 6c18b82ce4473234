package daemon

import (
	"log/slog"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names the hidden, off-by-default switch that makes Serve
// write a CPU profile (runtime/pprof) of the whole serve, from start to
// return, to the path it holds: for `go tool pprof` when measuring serve's
// own cost (BenchmarkDashboardServe in e2e). Not a documented setting.
const cpuProfileEnv = "FLEETMGR_CPUPROFILE"

// startCPUProfile starts the CPU profile cpuProfileEnv asks for and returns
// what stops it and closes the file; without the variable it does nothing.
// A profile that cannot be written is logged and skipped: it never stops
// serve.
func startCPUProfile(log *slog.Logger) (stop func()) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		log.Warn("cpu profile not written", "env", cpuProfileEnv, "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		log.Warn("cpu profile not written", "env", cpuProfileEnv, "err", err)
		return func() {}
	}
	log.Info("writing a cpu profile until serve ends", "path", path)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
