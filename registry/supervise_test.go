package registry

import (
	"strings"
	"testing"
	"time"
)

func TestRestartPolicyDefaultsAndOverride(t *testing.T) {
	body := `[manager]
restart_backoff_initial = "200ms"
crash_loop_restarts = 3
log_max_mb = 2
[fleets.a]
project = "/src/a"
command = ["fleetd"]
health_failures = 5
herdr_health_interval = "30s"
restart_backoff_max = "2s"
start_retries = 0
[fleets.b]
project = "/src/b"
command = ["fleetd"]
`
	c, err, _ := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Manager.Restart
	if m.BackoffInitial.Duration != 200*time.Millisecond || m.CrashLoopRestarts != 3 || m.BackoffMax.Duration != DefaultRestartBackoffMax || m.HealthFailures != DefaultHealthFailures {
		t.Errorf("manager policy %+v", m)
	}
	if c.Manager.LogMaxMB != 2 || c.Manager.LogMaxBackups != DefaultLogMaxBackups {
		t.Errorf("log settings %d %d", c.Manager.LogMaxMB, c.Manager.LogMaxBackups)
	}
	a, b := c.Fleets["a"].Restart, c.Fleets["b"].Restart
	if a.HealthFailures != 5 || a.BackoffMax.Duration != 2*time.Second || a.BackoffInitial.Duration != 200*time.Millisecond || a.CrashLoopRestarts != 3 {
		t.Errorf("fleet a policy %+v", a)
	}
	if m.HerdrHealthInterval.Duration != 0 || m.HerdrPingEvery() != 5*DefaultHealthInterval || a.HerdrPingEvery() != 30*time.Second {
		t.Errorf("herdr_health_interval: manager %s (every %s), fleet a every %s", m.HerdrHealthInterval.Duration, m.HerdrPingEvery(), a.HerdrPingEvery())
	}
	if m.StartRetries != DefaultStartRetries || a.StartRetries != 0 {
		t.Errorf("start_retries: manager %d (want the default %d), fleet a %d (want 0)", m.StartRetries, DefaultStartRetries, a.StartRetries)
	}
	if b != m {
		t.Errorf("fleet b policy %+v, want the manager's %+v", b, m)
	}
}

func TestRestartPolicyErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"[manager]\ncrash_loop_restarts = 0\n", "manager.crash_loop_restarts: must be at least 1"},
		{"[manager]\nhealth_interval = \"-1s\"\n", "manager.health_interval: must be positive"},
		{fleetA + "herdr_health_interval = \"0s\"\n", "fleets.a.herdr_health_interval: must be positive"},
		{"[manager]\nrestart_backoff_initial = \"10s\"\nrestart_backoff_max = \"1s\"\n", "restart_backoff_max: 1s is less than"},
		{fleetA + "health_failures = \"3\"\n", "fleets.a.health_failures"},
		{"[manager]\nlog_max_mb = 0\n", "manager.log_max_mb"},
		{"[manager]\nstart_retries = -1\n", "manager.start_retries: must be 0 (no retry) or more, got -1"},
		{fleetA + "start_retries = \"3\"\n", "fleets.a.start_retries"},
	} {
		_, err, _ := loadBody(t, c.body)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.body, err, c.want)
		}
	}
}
