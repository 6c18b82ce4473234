package registry

import "time"

// Defaults of the supervision keys, valid in [manager] (for every fleet)
// and in [fleets.NAME] (for that fleet); docs/ARCHITECTURE.md "Supervision".
const (
	DefaultRestartBackoffInitial = 1 * time.Second  // restart_backoff_initial
	DefaultRestartBackoffMax     = 60 * time.Second // restart_backoff_max
	DefaultRestartResetAfter     = 5 * time.Minute  // restart_reset_after
	DefaultCrashLoopRestarts     = 5                // crash_loop_restarts
	DefaultCrashLoopWindow       = 5 * time.Minute  // crash_loop_window
	DefaultHealthInterval        = 2 * time.Second  // health_interval
	DefaultHealthFailures        = 3                // health_failures
	DefaultStartRetries          = 3                // start_retries
	DefaultLogMaxMB              = 10               // [manager] log_max_mb
	DefaultLogMaxBackups         = 5                // [manager] log_max_backups
)

// RestartMode is a fleet's `restart` key: when the supervisor restarts
// its fleetd (as systemd's Restart=, supervisord's autorestart and
// compose's restart: offer).
type RestartMode string

// The restart modes.
const (
	// RestartAlways restarts fleetd after any exit, a dead herdr session
	// or failed health checks (the default, and the behaviour before the
	// key existed).
	RestartAlways RestartMode = "always"
	// RestartOnFailure restarts as always, except a fleetd that exited 0
	// (it ended on purpose): the fleet is then marked stopped with its
	// exit status.
	RestartOnFailure RestartMode = "on-failure"
	// RestartNever never restarts: a fleetd that exits marks the fleet
	// stopped with its exit status; failed health checks and a dead herdr
	// session are logged and shown, not acted on.
	RestartNever RestartMode = "never"
)

// RestartPolicy is how `fleetmgr serve` supervises a fleet's fleetd.
type RestartPolicy struct {
	// Mode is when to restart (`restart`, default RestartAlways).
	Mode RestartMode
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
	// HerdrHealthInterval is how often the fleet's herdr server is pinged
	// while it answers (herdr_health_interval); zero means five times
	// HealthInterval (HerdrPingEvery). After a ping that failed, herdr is
	// pinged at every /healthz probe (HealthInterval) until it answers or
	// HealthFailures pings in a row failed (then fleetd is restarted with
	// the session). Any answer or event serve's status tracker had from
	// that herdr counts as a ping that answered. Slower than /healthz
	// because a ping is a request to herdr, and issue 26 wants idle
	// fleets to ask herdr for (almost) nothing.
	HerdrHealthInterval Duration
	// HealthFailures consecutive failed probes (no answer, or another
	// name) make the supervisor restart fleetd. At least 1.
	HealthFailures int
	// StartRetries is how many times the supervisor starts again a fleet
	// whose start never became healthy (a step failed, or fleetd did not
	// answer /healthz within start_timeout), with the backoff above,
	// before it marks the fleet failed and stops retrying until
	// `fleetmgr start` or `fleetmgr restart` (supervisord's startretries).
	// The count is of starts in a row that failed; a fleetd that became
	// healthy resets it, and its later failures are the restart policy's
	// and the crash loop's to judge. 0 retries none. At least 0.
	StartRetries int
}

// HerdrPingEvery is how often a herdr server that answers is pinged:
// HerdrHealthInterval, or five times HealthInterval when it is unset,
// and never more often than HealthInterval (a ping goes with a /healthz
// probe).
func (r RestartPolicy) HerdrPingEvery() time.Duration {
	d := r.HerdrHealthInterval.Duration
	if d <= 0 {
		d = 5 * r.HealthInterval.Duration
	}
	return max(d, r.HealthInterval.Duration)
}

// defaultRestartPolicy returns the built-in supervision defaults.
func defaultRestartPolicy() RestartPolicy {
	return RestartPolicy{
		Mode:              RestartAlways,
		BackoffInitial:    Duration{DefaultRestartBackoffInitial},
		BackoffMax:        Duration{DefaultRestartBackoffMax},
		ResetAfter:        Duration{DefaultRestartResetAfter},
		CrashLoopRestarts: DefaultCrashLoopRestarts,
		CrashLoopWindow:   Duration{DefaultCrashLoopWindow},
		HealthInterval:    Duration{DefaultHealthInterval},
		HealthFailures:    DefaultHealthFailures,
		StartRetries:      DefaultStartRetries,
	}
}

// restartFields are the supervision keys, accepted in [manager] (for
// every fleet) and in every [fleets.NAME] (for that fleet), decoded over
// r's values (the defaults, or the manager's policy for a fleet).
func (ld *loader) restartFields(r *RestartPolicy) []field {
	dur := func(key string, dst *Duration) field {
		return field{key: key, set: ld.setDuration(dst), shared: true}
	}
	count := func(key string, dst *int) field {
		return field{key: key, shared: true, set: func(p []string, v any) {
			if x, ok := ld.integer(p, v); ok {
				if x < 1 {
					ld.fail(p, "must be at least 1, got %d", x)
				} else {
					*dst = x
				}
			}
		}}
	}
	return []field{
		{key: "restart", shared: true, set: func(p []string, v any) {
			if s, ok := ld.str(p, v); ok {
				switch m := RestartMode(s); m {
				case RestartAlways, RestartOnFailure, RestartNever:
					r.Mode = m
				default:
					ld.fail(p, "must be \"always\", \"on-failure\" or \"never\", got %q", s)
				}
			}
		}},
		dur("restart_backoff_initial", &r.BackoffInitial),
		dur("restart_backoff_max", &r.BackoffMax),
		dur("restart_reset_after", &r.ResetAfter),
		count("crash_loop_restarts", &r.CrashLoopRestarts),
		dur("crash_loop_window", &r.CrashLoopWindow),
		dur("health_interval", &r.HealthInterval),
		dur("herdr_health_interval", &r.HerdrHealthInterval),
		count("health_failures", &r.HealthFailures),
		{key: "start_retries", shared: true, set: func(p []string, v any) {
			if x, ok := ld.integer(p, v); ok {
				if x < 0 {
					ld.fail(p, "must be 0 (no retry) or more, got %d", x)
				} else {
					r.StartRetries = x
				}
			}
		}},
	}
}

// checkRestart refuses a policy of the table at path whose backoff cap is
// below its first delay.
func (ld *loader) checkRestart(path []string, r RestartPolicy) {
	if r.BackoffMax.Duration < r.BackoffInitial.Duration {
		ld.fail(appendPath(path, "restart_backoff_max"), "%s is less than restart_backoff_initial %s", r.BackoffMax.Duration, r.BackoffInitial.Duration)
	}
}

// logFields are the [manager] keys of the per-fleet log files.
func (ld *loader) logFields(m *Manager) []field {
	return []field{
		{key: "log_max_mb", shared: true, set: func(p []string, v any) {
			if x, ok := ld.integer(p, v); ok {
				if x < 1 {
					ld.fail(p, "must be at least 1 (megabytes), got %d", x)
				} else {
					m.LogMaxMB = x
				}
			}
		}},
		{key: "log_max_backups", shared: true, set: func(p []string, v any) {
			if x, ok := ld.integer(p, v); ok {
				if x < 0 {
					ld.fail(p, "must be 0 (keep all) or more, got %d", x)
				} else {
					m.LogMaxBackups = x
				}
			}
		}},
	}
}
