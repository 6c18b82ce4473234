package registry

import "time"

// Defaults of the supervision keys, valid in [manager] (for every fleet)
// and in [fleets.NAME] (for that fleet). Issue #4 "Restart policy".
const (
	DefaultRestartBackoffInitial = 1 * time.Second  // restart_backoff_initial
	DefaultRestartBackoffMax     = 60 * time.Second // restart_backoff_max
	DefaultRestartResetAfter     = 5 * time.Minute  // restart_reset_after
	DefaultCrashLoopRestarts     = 5                // crash_loop_restarts
	DefaultCrashLoopWindow       = 5 * time.Minute  // crash_loop_window
	DefaultHealthInterval        = 2 * time.Second  // health_interval
	DefaultHealthFailures        = 3                // health_failures
	DefaultLogMaxMB              = 10               // [manager] log_max_mb
	DefaultLogMaxBackups         = 5                // [manager] log_max_backups
)

// restartKeys are the keys of RestartPolicy, accepted in [manager] and in
// every [fleets.NAME].
var restartKeys = []string{"restart_backoff_initial", "restart_backoff_max", "restart_reset_after",
	"crash_loop_restarts", "crash_loop_window", "health_interval", "health_failures"}

// RestartPolicy is how `fleetmgr serve` supervises a fleet's fleetd.
type RestartPolicy struct {
	// BackoffInitial is the delay before the first restart after an
	// unexpected exit; each further consecutive restart doubles it.
	BackoffInitial Duration
	// BackoffMax caps the doubled delay.
	BackoffMax Duration
	// ResetAfter: a fleetd that stays up this long resets the delay to
	// BackoffInitial.
	ResetAfter Duration
	// CrashLoopRestarts is how many restarts CrashLoopWindow may hold; the
	// next failure inside the window marks the fleet failed and restarts
	// stop until `fleetmgr start` or `fleetmgr restart`. At least 1.
	CrashLoopRestarts int
	// CrashLoopWindow is the sliding window CrashLoopRestarts counts in.
	CrashLoopWindow Duration
	// HealthInterval is the period of GET /healthz on a running fleetd.
	HealthInterval Duration
	// HealthFailures consecutive failed probes (no answer, or another
	// name) make the supervisor restart fleetd. At least 1.
	HealthFailures int
}

// defaultRestartPolicy returns the built-in supervision defaults.
func defaultRestartPolicy() RestartPolicy {
	return RestartPolicy{
		BackoffInitial:    Duration{DefaultRestartBackoffInitial},
		BackoffMax:        Duration{DefaultRestartBackoffMax},
		ResetAfter:        Duration{DefaultRestartResetAfter},
		CrashLoopRestarts: DefaultCrashLoopRestarts,
		CrashLoopWindow:   Duration{DefaultCrashLoopWindow},
		HealthInterval:    Duration{DefaultHealthInterval},
		HealthFailures:    DefaultHealthFailures,
	}
}

// restartPolicy decodes the supervision keys of table t (at path) over base.
func (ld *loader) restartPolicy(path []string, t map[string]any, base RestartPolicy) RestartPolicy {
	p := func(k string) []string { return appendPath(path, k) }
	r := base
	for _, d := range []struct {
		key string
		dst *Duration
	}{
		{"restart_backoff_initial", &r.BackoffInitial},
		{"restart_backoff_max", &r.BackoffMax},
		{"restart_reset_after", &r.ResetAfter},
		{"crash_loop_window", &r.CrashLoopWindow},
		{"health_interval", &r.HealthInterval},
	} {
		if v, ok := t[d.key]; ok {
			if x, ok := ld.duration(p(d.key), v); ok {
				*d.dst = x
			}
		}
	}
	for _, n := range []struct {
		key string
		dst *int
	}{
		{"crash_loop_restarts", &r.CrashLoopRestarts},
		{"health_failures", &r.HealthFailures},
	} {
		if v, ok := t[n.key]; ok {
			if x, ok := ld.integer(p(n.key), v); ok {
				if x < 1 {
					ld.fail(p(n.key), "must be at least 1, got %d", x)
				} else {
					*n.dst = x
				}
			}
		}
	}
	if r.BackoffMax.Duration < r.BackoffInitial.Duration {
		ld.fail(p("restart_backoff_max"), "%s is less than restart_backoff_initial %s", r.BackoffMax.Duration, r.BackoffInitial.Duration)
	}
	return r
}

// logSettings decodes [manager] log_max_mb and log_max_backups.
func (ld *loader) logSettings(m *Manager, t map[string]any) {
	m.LogMaxMB, m.LogMaxBackups = DefaultLogMaxMB, DefaultLogMaxBackups
	if v, ok := t["log_max_mb"]; ok {
		if x, ok := ld.integer([]string{"manager", "log_max_mb"}, v); ok {
			if x < 1 {
				ld.fail([]string{"manager", "log_max_mb"}, "must be at least 1 (megabytes), got %d", x)
			} else {
				m.LogMaxMB = x
			}
		}
	}
	if v, ok := t["log_max_backups"]; ok {
		if x, ok := ld.integer([]string{"manager", "log_max_backups"}, v); ok {
			if x < 0 {
				ld.fail([]string{"manager", "log_max_backups"}, "must be 0 (keep all) or more, got %d", x)
			} else {
				m.LogMaxBackups = x
			}
		}
	}
}

// logKeys are the [manager] keys of the per-fleet log files.
var logKeys = []string{"log_max_mb", "log_max_backups"}

// without returns t minus the keys of every list in keys (which their own
// decoders have already checked), for known's unknown-key report.
func without(t map[string]any, keys ...[]string) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = v
	}
	for _, ks := range keys {
		for _, k := range ks {
			delete(out, k)
		}
	}
	return out
}
