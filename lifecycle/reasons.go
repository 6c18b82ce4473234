package lifecycle

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The reasons below are every text the supervisor records as a fleet's
// last_restart_reason, last_exit or last_error, and so every reason
// status, list and the dashboard can show for it (issue 24 item 8). Each
// is one sentence: it never nests another reason's label ("crash loop:
// crash loop: …", "(exit: …)") and never says the same thing twice; the
// renderers show it as it is. TestEveryReasonIsOneSentence lists them all
// with their texts.

// reasonExited is why fleetd is restarted after it exited with status
// ("signal: killed", "exit status 3").
func reasonExited(status string) string { return "fleetd exited: " + status }

// exitUnknown is the last_exit of a fleetd this fleetmgr did not start
// (adopted), whose exit status it cannot learn.
func exitUnknown(pid int) string {
	return fmt.Sprintf("exit status unknown (pid %d was not started by this fleetmgr)", pid)
}

// reasonDiedUnsupervised is why a new supervisor restarts a fleet whose
// recorded fleetd ended (or whose pid is now another process's) before it
// started watching.
func reasonDiedUnsupervised(pid int) string {
	return fmt.Sprintf("fleetd (pid %d) ended while no fleetmgr serve was supervising it", pid)
}

// reasonInterrupted is why a new supervisor starts a fleet whose record
// shows an operator's verb ("start", "restart") that the fleetmgr making
// it (a serve killed mid-way, or a CLI) left half-done; pid is the
// recorded fleetd found gone (0: none recorded): the interrupted restart
// had signalled it, or the start had not recorded one yet.
func reasonInterrupted(verb string, pid int) string {
	if pid > 0 {
		return fmt.Sprintf("%s interrupted: the fleetmgr serve or CLI making it died mid-way, and fleetd (pid %d) is gone", verb, pid)
	}
	return fmt.Sprintf("%s interrupted: the fleetmgr serve or CLI making it died mid-way", verb)
}

// interruptedVerb is the operator's verb st's record shows under way
// ("start", "restart"; "" for none): a start, or a restart with no due
// time (the supervisor's have one). decide asks it once no process
// holds the fleet's lock, so whoever was making it is gone. It is pure.
func interruptedVerb(st *State) string {
	switch {
	case st.Phase == PhaseStarting:
		return "start"
	case st.Phase == PhaseRestarting && st.NextRestartAt.IsZero():
		return "restart"
	}
	return ""
}

// errExitedUnsupervised is the last_error shown for a fleet whose fleetd
// exited while no serve supervised it (no restart was decided).
const errExitedUnsupervised = "fleetd exited and no fleetmgr serve was supervising it"

// reasonStale is why a record naming a process that is not this fleet's
// fleetd (forged, or a pid reused) is replaced; why says what differed.
func reasonStale(why string) string { return "stale state entry: " + why }

// reasonNotRunning is why a wanted fleet with no fleetd is started.
const reasonNotRunning = "fleetd not running"

// reasonStartFailed is why a fleet whose last start failed with lastErr is
// started again: the error's first clause, without the fleet's name (the
// row says it) and without the log lines a start error carries.
func reasonStartFailed(name, lastErr string) string {
	return "start failed: " + startErrorClause(name, lastErr)
}

// startErrorClause is a start error cut to its one-sentence cause: the
// first line, without a leading "fleet NAME: " and the trailing "; last
// log lines of FILE:" that introduces the log tail.
func startErrorClause(name, err string) string {
	s := strings.TrimPrefix(firstLine(err), "fleet "+name+": ")
	if i := strings.Index(s, "; last log lines of "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, ":")
}

// withoutLogTail is a start error as readers are shown it (Shown.LastError):
// the log lines it carries after "; last log lines of FILE:" (or "; last
// herdr log lines:", "; last log lines:") are left out, and the sentence
// says where they are instead. The error `fleetmgr start` prints keeps
// them. Other errors are returned as they are.
func withoutLogTail(name, err string) string {
	for _, intro := range []string{"; last log lines of ", "; last herdr log lines:", "; last log lines:"} {
		if i := strings.Index(err, intro); i >= 0 && strings.Contains(err[i:], "\n") {
			if intro == "; last log lines of " && !strings.Contains(err[:i], "herdr server") {
				return err[:i] + "; `fleetmgr logs " + name + "` shows fleetd's last lines"
			}
			return err[:i] + "; `fleetmgr logs --herdr " + name + "` shows herdr's last lines"
		}
	}
	return err
}

// reasonHerdrDied is why fleetd is restarted after its herdr server died.
func reasonHerdrDied(pid int) string { return fmt.Sprintf("herdr session died (server pid %d)", pid) }

// reasonHerdrHung is why fleetd is restarted when its herdr session does
// not answer at socket.
func reasonHerdrHung(socket string, err error) string {
	return fmt.Sprintf("herdr session not answering at %s (%v)", socket, err)
}

// reasonUnhealthy is why fleetd is restarted after n consecutive /healthz
// failures, the last with err.
func reasonUnhealthy(n int, err error) string {
	return fmt.Sprintf("health: %d consecutive /healthz failures (last: %v)", n, err)
}

// crashLoopError is a crash loop's last_error: how many restarts within
// window, the failure that ended it (reason, a sentence from above, told
// as a clause rather than nested under its label) and how to get out.
// Status and the dashboard show it as it is, after no label of their own.
func crashLoopError(name string, restarts int, window time.Duration, reason string) string {
	return fmt.Sprintf("crash loop: %d restarts within %s, the last after %s; not restarting until `fleetmgr start %s` or `fleetmgr restart %s`",
		restarts, window, clause(reason), name, name)
}

// clause turns a reason into a clause that reads inside a sentence:
// "fleetd exited: signal: killed" → "fleetd exited with signal: killed",
// "start failed: port taken" → "a failed start, port taken".
func clause(reason string) string {
	reason = firstLine(reason)
	for label, as := range map[string]string{
		"fleetd exited: ":     "fleetd exited with ",
		"start failed: ":      "a failed start, ",
		"stale state entry: ": "a stale state entry, ",
		"health: ":            "",
	} {
		if rest, ok := strings.CutPrefix(reason, label); ok {
			return as + rest
		}
	}
	return reason
}

// A start that never became healthy (decide.go, start_retries): the
// supervisor retries it with the backoff, then gives up. The texts below
// say so; whatNext (shown.go) chooses among the operator's sentences.

// reasonStartRetry is the phase reason of the supervisor's retry n (of
// max) of a start that failed with reason (reasonStartFailed's text).
func reasonStartRetry(n, max int, reason string) string {
	return fmt.Sprintf("start retry %d of %d after %s", n, max, clause(reason))
}

// reasonStartRetriesExhausted is the phase reason of a fleet the
// supervisor marks failed after retries retries of a start that never
// became healthy, the last failing with reason; with start_retries = 0
// (retries 0) there was no retry, and it says so.
func reasonStartRetriesExhausted(retries int, reason string) string {
	if retries == 0 {
		return "no start retry (start_retries = 0) after " + clause(reason)
	}
	return fmt.Sprintf("no more start retries: the start did not become healthy %s, the last after %s", retriesText(retries), clause(reason))
}

// startRetriesError is the last_error of such a fleet: what failed (the
// cause from the last start's error, lastErr) and how to try again.
// Status and the dashboard show it as it is; the CLI says "NAME failed: "
// before it.
func startRetriesError(name string, retries int, lastErr string) string {
	if retries == 0 {
		return fmt.Sprintf("did not become healthy: %s; start_retries = 0 allows no retry; `fleetmgr start %s` to try again",
			startErrorClause(name, lastErr), name)
	}
	return fmt.Sprintf("did not become healthy %s, the last: %s; `fleetmgr start %s` to try again",
		retriesText(retries), startErrorClause(name, lastErr), name)
}

// retriesText is "after 3 retries", "after 1 retry".
func retriesText(n int) string {
	if n == 1 {
		return "after 1 retry"
	}
	return fmt.Sprintf("after %d retries", n)
}

// nextRetrying is the operator's sentence for a fleet whose start did not
// become healthy (cause: the start error's clause) while serve retries
// it: left more times, the next in `in` (≤ 0: now, retry n of max under
// way when underWay).
func nextRetrying(name, cause string, left int, in time.Duration, underWay bool, n, max int) string {
	if underWay {
		return fmt.Sprintf("%s did not become healthy: %s; serve is retrying it now (retry %d of %d); `fleetmgr stop %s` to give up", name, cause, n, max, name)
	}
	times := "times"
	if left == 1 {
		times = "time"
	}
	when := "now"
	if in > 0 {
		when = fmt.Sprintf("in %d s", int(math.Ceil(in.Seconds())))
	}
	return fmt.Sprintf("%s did not become healthy: %s; serve retries %d more %s, next %s; `fleetmgr stop %s` to give up", name, cause, left, times, when, name)
}

// nextFailed is the operator's sentence for a fleet that is failed and
// not retried any more: its last_error (a crash loop's or
// startRetriesError's), after the fleet's name.
func nextFailed(name, lastErr string) string { return name + " failed: " + firstLine(lastErr) }

// nextNotRetried is the operator's sentence for a fleet whose start did
// not become healthy and that nothing retries: why (no serve runs, or
// restart = never) and what to run.
func nextNotRetried(name, cause string, serveRuns bool) string {
	if serveRuns {
		return fmt.Sprintf("%s did not become healthy: %s; restart = never, so serve does not retry it; `fleetmgr start %s` to try again", name, cause, name)
	}
	return fmt.Sprintf("%s did not become healthy: %s; no fleetmgr serve runs, so nothing retries it; `fleetmgr start %s` to try again, or `fleetmgr serve` to retry it", name, cause, name)
}
