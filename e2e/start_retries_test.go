package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// retryRow is the part of `fleetmgr list --json` TestStartRetries reads.
type retryRow struct {
	Name             string    `json:"name"`
	State            string    `json:"state"`
	Restarts         int       `json:"restarts"`
	CrashLoop        bool      `json:"crash_loop"`
	WhatNext         string    `json:"what_next"`
	StartRetriesLeft *int      `json:"start_retries_left"`
	NextRestartAt    time.Time `json:"next_restart_at"`
}

func retryList(t *testing.T, e *harness.Env, name string) retryRow {
	t.Helper()
	r := e.MustRun("list", "--json")
	var rows []retryRow
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.Stdout)
	}
	for _, row := range rows {
		if row.Name == name {
			return row
		}
	}
	t.Fatalf("no fleet %s in list --json:\n%s", name, r.Stdout)
	return retryRow{}
}

// TestStartRetries (issue 24 item 5): a start that never becomes healthy
// is retried start_retries times with the backoff, then the fleet is
// failed and serve stops retrying; every step says what happens next in
// one sentence: `fleetmgr start` (exit 1), status --json (what_next,
// start_retries_left, next_restart_at), list. `fleetmgr start` and
// `fleetmgr restart` after that try again, counting afresh, and a fleetd
// that becomes healthy ends the count.
func TestStartRetries(t *testing.T) {
	// start_retries = 2 below the crash loop's 10: the retries end first.
	// A 3 s backoff leaves time to read the pending retry.
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"3s\"\nrestart_backoff_max = \"3s\"\ncrash_loop_restarts = 10\ncrash_loop_window = \"10m\"\nstart_retries = 2")
	flag := filepath.Join(e.Dir, "unhealthy")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(e.Dir, "proj-retry")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	// fleetd exits during its start while the flag exists: it never
	// answers /healthz.
	script := fmt.Sprintf("if [ -e %s ]; then echo not today; exit 3; fi; exec %s --config \"$1\"", flag, bins.Fleetd)
	editConfig(t, e, func(s string) string {
		return s + fmt.Sprintf("\n[fleets.retry]\nproject = %q\ncommand = [\"sh\", \"-c\", %q, \"sh\", \"{{.ConfigPath}}\"]\nport = %d\n", proj, script, port)
	})
	serve := e.StartServe()

	// The operator's start fails: exit 1, and it says what happens next.
	const cause = "retry did not become healthy: fleetd exited during start (exit status 3)"
	pending := regexp.MustCompile(regexp.QuoteMeta(cause) + "; serve retries 2 more times, next in [1-3] s; `fleetmgr stop retry` to give up")
	r := e.Run("start", "retry")
	if r.Code != 1 || !pending.MatchString(r.Stderr) {
		t.Fatalf("start of a fleet that never becomes healthy: exit %d, want 1 and %q in:\n%s%s", r.Code, pending, r.Stdout, r.Stderr)
	}
	t.Logf("fleetmgr start retry (exit %d):\n%s", r.Code, r.Stderr)

	// status --json, valid for its schema: the retry pending, 2 left, due
	// at next_restart_at; list says the same.
	sch := statusSchema(t)
	var f1 status.Fleet
	if !svWait(10*time.Second, func() bool {
		f1 = fleetRow(t, statusJSON(t, e, sch, "retry"), "retry")
		return f1.State == "restarting"
	}) {
		t.Fatalf("the supervisor recorded no retry: %+v\nserve log:\n%s", f1, serve.Log())
	}
	if f1.StartRetriesLeft == nil || *f1.StartRetriesLeft != 2 || f1.NextRestartAt.IsZero() || !strings.HasPrefix(f1.WhatNext, cause+"; serve ") {
		t.Errorf("status of the pending retry: left %v, next_restart_at %v, what_next %q", f1.StartRetriesLeft, f1.NextRestartAt, f1.WhatNext)
	}
	out := e.MustRun("status", "--wide", "retry").Stdout
	t.Logf("status --wide retry:\n%s", out)
	if !strings.Contains(out, cause) || !strings.Contains(out, "`fleetmgr stop retry` to give up") {
		t.Errorf("status table of the pending retry:\n%s", out)
	}
	if row := retryList(t, e, "retry"); row.WhatNext == "" || row.StartRetriesLeft == nil {
		t.Errorf("list of the pending retry: %+v", row)
	}

	// After the retries: failed, with the reason, and no more retries.
	// Until then it never reads failed (the moment between a retry's
	// failure and the supervisor's next decision read failed once).
	var shownFailed []string
	if !svWait(60*time.Second, func() bool {
		done := readState(t, e, "retry").StartRetriesExhausted
		if row := retryList(t, e, "retry"); !done && row.State == "failed" && !readState(t, e, "retry").StartRetriesExhausted {
			shownFailed = append(shownFailed, fmt.Sprintf("%+v", row))
		}
		return done
	}) {
		t.Fatalf("start retries never exhausted: %+v\nserve log:\n%s", readState(t, e, "retry").Supervision, serve.Log())
	}
	if len(shownFailed) > 0 {
		t.Errorf("list read failed while start retries were left, %d times: %s", len(shownFailed), shownFailed[0])
	}
	const failed = "retry failed: did not become healthy after 2 retries, the last: fleetd exited during start (exit status 3); `fleetmgr start retry` to try again"
	row := retryList(t, e, "retry")
	if row.State != "failed" || row.Restarts != 2 || row.CrashLoop || row.WhatNext != failed || row.StartRetriesLeft == nil || *row.StartRetriesLeft != 0 {
		t.Errorf("after the retries: %+v", row)
	}
	if st := readState(t, e, "retry"); st.StartRetries != 2 || !strings.HasPrefix(st.PhaseReason, "supervisor: no more start retries") {
		t.Errorf("record after the retries: start_retries %d, phase reason %q", st.StartRetries, st.PhaseReason)
	}
	if f := fleetRow(t, statusJSON(t, e, sch, "retry"), "retry"); f.State != "failed" || f.WhatNext != failed || !f.NextRestartAt.IsZero() {
		t.Errorf("status after the retries: %+v", f)
	}
	// The journal has the retries and the failure as phase changes.
	var events string
	if !svWait(10*time.Second, func() bool {
		events = e.MustRun("events", "retry", "--kind", "fleet.phase").Stdout
		return strings.Contains(events, "no more start retries")
	}) || !strings.Contains(events, "start retry 1 of 2 after a failed start, fleetd exited during start (exit status 3)") {
		t.Errorf("events retry --kind fleet.phase lacks the retries or the failure:\n%s\nall:\n%s", events, e.MustRun("events").Stdout)
	}
	// One failed event, the supervisor's giving up; each retry once.
	var phases []struct {
		Outcome, Detail string
	}
	if err := json.Unmarshal([]byte(e.MustRun("events", "retry", "--kind", "fleet.phase", "--json").Stdout), &phases); err != nil {
		t.Fatal(err)
	}
	failedEvents, retryEvents := 0, map[string]int{}
	for _, p := range phases {
		if p.Outcome == "failed" {
			failedEvents++
		}
		if m := regexp.MustCompile(`start retry \d of 2`).FindString(p.Detail); m != "" {
			retryEvents[m]++
		}
	}
	if failedEvents != 1 || retryEvents["start retry 1 of 2"] != 1 || retryEvents["start retry 2 of 2"] != 1 {
		t.Errorf("journal: %d fleet.phase failed events (want 1), retries %v (want each once):\n%s", failedEvents, retryEvents, events)
	}
	// The dashboard's card says it, as the failure it is.
	page := openDashboard(t, e)
	card := `document.querySelector('[data-fleet="retry"]')`
	pageWait(t, page, card+`?.querySelector('.alerts li.bad')?.textContent === `+strconv.Quote(failed), 20*time.Second)
	pageClean(t, page, e)
	if !strings.Contains(serve.Log(), "start_retries are exhausted") {
		t.Errorf("serve's log does not say it gave up:\n%s", serve.Log())
	}
	wait.Never(t, 4*time.Second, "a retry after start_retries were spent (the backoff is 3 s)", func() (bool, string) {
		row := retryList(t, e, "retry")
		return row.Restarts != 2 || row.State != "failed", fmt.Sprintf("%+v", row)
	})

	// `fleetmgr start` tries again, counting afresh; so does `restart`.
	attempts := func() int {
		b, _ := os.ReadFile(filepath.Join(e.StateDir, "fleets", "retry", "fleetd.log"))
		return strings.Count(string(b), "not today")
	}
	before := attempts()
	r = e.Run("start", "retry", "--json")
	var outs []struct {
		State            string `json:"state"`
		Error            string `json:"error"`
		WhatNext         string `json:"what_next"`
		StartRetriesLeft *int   `json:"start_retries_left"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &outs); err != nil || len(outs) != 1 {
		t.Fatalf("start --json: %v\n%s", err, r.Stdout)
	}
	if r.Code != 1 || !pending.MatchString(outs[0].WhatNext) || !pending.MatchString(outs[0].Error) || attempts() != before+1 ||
		outs[0].StartRetriesLeft == nil || *outs[0].StartRetriesLeft != 2 {
		t.Errorf("start --json after the retries: exit %d, attempts %d → %d, want 1, one more, and %q in what_next and error: %+v", r.Code, before, attempts(), pending, outs[0])
	}
	r = e.Run("restart", "--yes", "retry")
	if r.Code != 1 || !pending.MatchString(r.Stderr) {
		t.Errorf("restart of a fleet that never becomes healthy: exit %d, want 1 and %q in:\n%s", r.Code, pending, r.Stderr)
	}

	// Healthy ends the count: the next retry comes up.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	if !svWait(30*time.Second, func() bool { return retryList(t, e, "retry").State == "running" }) {
		t.Fatalf("the retry did not bring the fleet up: %+v\nserve log:\n%s", retryList(t, e, "retry"), serve.Log())
	}
	if st := readState(t, e, "retry"); st.StartRetries != 0 || st.StartRetriesExhausted || svHealth(port) != "retry" {
		t.Errorf("running again, yet start_retries %d, exhausted %v", st.StartRetries, st.StartRetriesExhausted)
	}
	if row := retryList(t, e, "retry"); row.WhatNext != "" || row.StartRetriesLeft != nil {
		t.Errorf("a running fleet still says what next: %+v", row)
	}
}
