package lifecycle

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEveryReasonIsOneSentence lists every reason the supervisor and a
// start record (last_restart_reason, last_exit, last_error), and so every
// reason status, list and the dashboard can show, with its text; each is
// one sentence: one line, no label nested under another ("crash loop:
// crash loop:", "fleetd exited: … fleetd exited"), no "(exit: …)" repeat,
// no second sentence such as a log tail's "last log lines of FILE:".
func TestEveryReasonIsOneSentence(t *testing.T) {
	startErr := "fleet kb: fleetd exited during start (exit status 7); last log lines of /state/fleets/kb/fleetd.log:\nboom\nbang"
	cases := []struct{ name, got, want string }{
		{"fleetd exited", reasonExited("signal: killed"), "fleetd exited: signal: killed"},
		{"fleetd exited with a status", reasonExited("exit status 3"), "fleetd exited: exit status 3"},
		{"adopted fleetd exited", reasonExited(exitUnknown(7413)), "fleetd exited: exit status unknown (pid 7413 was not started by this fleetmgr)"},
		{"adopted fleetd's last exit", exitUnknown(7413), "exit status unknown (pid 7413 was not started by this fleetmgr)"},
		{"fleetd died while unsupervised", reasonDiedUnsupervised(7413), "fleetd (pid 7413) ended while no fleetmgr serve was supervising it"},
		{"a restart interrupted after its kill", reasonInterrupted("restart", 7413), "restart interrupted: the fleetmgr serve or CLI making it died mid-way, and fleetd (pid 7413) is gone"},
		{"a start interrupted", reasonInterrupted("start", 0), "start interrupted: the fleetmgr serve or CLI making it died mid-way"},
		{"forged or reused record", reasonStale("pid 7413 is not fleetd"), "stale state entry: pid 7413 is not fleetd"},
		{"fleetd exited, no serve", errExitedUnsupervised, "fleetd exited and no fleetmgr serve was supervising it"},
		{"wanted, no fleetd", reasonNotRunning, "fleetd not running"},
		{"start failed", reasonStartFailed("kb", startErr), "start failed: fleetd exited during start (exit status 7)"},
		{"start failed, short error", reasonStartFailed("kb", "fleet kb: port 4100 taken"), "start failed: port 4100 taken"},
		{"herdr died", reasonHerdrDied(99), "herdr session died (server pid 99)"},
		{"herdr hung", reasonHerdrHung("/run/h.sock", errors.New("i/o timeout")), "herdr session not answering at /run/h.sock (i/o timeout)"},
		{"unhealthy", reasonUnhealthy(3, errors.New("connection refused")), "health: 3 consecutive /healthz failures (last: connection refused)"},
		{"crash loop after exits", crashLoopError("kb", 5, 5*time.Minute, reasonExited("exit status 3")),
			"crash loop: 5 restarts within 5m0s, the last after fleetd exited with exit status 3; not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"crash loop after an adopted exit", crashLoopError("kb", 5, 5*time.Minute, reasonExited(exitUnknown(7413))),
			"crash loop: 5 restarts within 5m0s, the last after fleetd exited with exit status unknown (pid 7413 was not started by this fleetmgr); not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"crash loop after failed starts", crashLoopError("kb", 5, time.Minute, reasonStartFailed("kb", startErr)),
			"crash loop: 5 restarts within 1m0s, the last after a failed start, fleetd exited during start (exit status 7); not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"crash loop after health failures", crashLoopError("kb", 3, time.Minute, reasonUnhealthy(3, errors.New("timeout"))),
			"crash loop: 3 restarts within 1m0s, the last after 3 consecutive /healthz failures (last: timeout); not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"crash loop after a stale record", crashLoopError("kb", 3, time.Minute, reasonStale("pid 1 is not fleetd")),
			"crash loop: 3 restarts within 1m0s, the last after a stale state entry, pid 1 is not fleetd; not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"crash loop after herdr died", crashLoopError("kb", 3, time.Minute, reasonHerdrDied(9)),
			"crash loop: 3 restarts within 1m0s, the last after herdr session died (server pid 9); not restarting until `fleetmgr start kb` or `fleetmgr restart kb`"},
		{"start retry", reasonStartRetry(2, 3, reasonStartFailed("kb", startErr)),
			"start retry 2 of 3 after a failed start, fleetd exited during start (exit status 7)"},
		{"start retries exhausted (phase)", reasonStartRetriesExhausted(3, reasonStartFailed("kb", startErr)),
			"no more start retries: the start did not become healthy after 3 retries, the last after a failed start, fleetd exited during start (exit status 7)"},
		{"start retries exhausted", startRetriesError("kb", 3, startErr),
			"did not become healthy after 3 retries, the last: fleetd exited during start (exit status 7); `fleetmgr start kb` to try again"},
		{"start not retried (start_retries = 0)", startRetriesError("kb", 0, "fleet kb: port 4100 taken"),
			"did not become healthy: port 4100 taken; start_retries = 0 allows no retry; `fleetmgr start kb` to try again"},
		{"start not retried (start_retries = 0, phase)", reasonStartRetriesExhausted(0, reasonStartFailed("kb", "fleet kb: port 4100 taken")),
			"no start retry (start_retries = 0) after a failed start, port 4100 taken"},
		{"what next: retrying", nextRetrying("kb", "fleetd exited during start (exit status 7)", 2, 3500*time.Millisecond, false, 0, 0),
			"kb did not become healthy: fleetd exited during start (exit status 7); serve retries 2 more times, next in 4 s; `fleetmgr stop kb` to give up"},
		{"what next: the last retry", nextRetrying("kb", "port 4100 taken", 1, 0, false, 0, 0),
			"kb did not become healthy: port 4100 taken; serve retries 1 more time, next now; `fleetmgr stop kb` to give up"},
		{"what next: a retry under way", nextRetrying("kb", "port 4100 taken", 1, -time.Second, true, 3, 3),
			"kb did not become healthy: port 4100 taken; serve is retrying it now (retry 3 of 3); `fleetmgr stop kb` to give up"},
		{"what next: failed", nextFailed("kb", startRetriesError("kb", 3, startErr)),
			"kb failed: did not become healthy after 3 retries, the last: fleetd exited during start (exit status 7); `fleetmgr start kb` to try again"},
		{"what next: no serve", nextNotRetried("kb", "port 4100 taken", false),
			"kb did not become healthy: port 4100 taken; no fleetmgr serve runs, so nothing retries it; `fleetmgr start kb` to try again, or `fleetmgr serve` to retry it"},
		{"what next: restart = never", nextNotRetried("kb", "port 4100 taken", true),
			"kb did not become healthy: port 4100 taken; restart = never, so serve does not retry it; `fleetmgr start kb` to try again"},
		{"a failed start's error as shown", withoutLogTail("kb", startErr),
			"fleet kb: fleetd exited during start (exit status 7); `fleetmgr logs kb` shows fleetd's last lines"},
		{"a failed herdr start's error as shown", withoutLogTail("kb", "fleet kb: herdr server for session kb exited during start; last log lines:\nno socket"),
			"fleet kb: herdr server for session kb exited during start; `fleetmgr logs --herdr kb` shows herdr's last lines"},
		{"a herdr session lost during the start, as shown", withoutLogTail("kb", "fleet kb: herdr session kb stopped answering on /h.sock while fleetd started (EOF); last herdr log lines:\nbye"),
			"fleet kb: herdr session kb stopped answering on /h.sock while fleetd started (EOF); `fleetmgr logs --herdr kb` shows herdr's last lines"},
	}
	labels := []string{"crash loop", "fleetd exited", "start failed", "stale state entry", "health:", "exit status", "last log lines", "(exit:"}
	nested := regexp.MustCompile(`\([^()]*\(`) // a parenthesis inside another
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
		if strings.ContainsAny(c.got, "\n") || strings.HasSuffix(c.got, ":") || strings.HasSuffix(c.got, ".") {
			t.Errorf("%s: %q is not one line ending in its last word", c.name, c.got)
		}
		for _, l := range labels {
			if n := strings.Count(strings.ToLower(c.got), l); n > 1 {
				t.Errorf("%s: %q says %q %d times", c.name, c.got, l, n)
			}
		}
		if strings.Contains(c.got, "last log lines") || nested.MatchString(c.got) {
			t.Errorf("%s: %q nests another text", c.name, c.got)
		}
	}
}
