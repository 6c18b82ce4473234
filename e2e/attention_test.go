package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/doctor"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// eventsJSON runs `fleetmgr events ARGS… --json`.
func eventsJSON(t *testing.T, e *harness.Env, args ...string) []journal.Event {
	t.Helper()
	var ev []journal.Event
	out := e.MustRun(append(append([]string{"events"}, args...), "--json")...).Stdout
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("events --json: %v\n%s", err, out)
	}
	return ev
}

// TestJournalRestartEndedMembersAcrossServes (issue 25): a restart that
// ends 3 members says so in `events`, a call through the mount and the
// operator's start are journalled with their origin, and after serve is
// killed and started again `events --json` still has the earlier events.
func TestJournalRestartEndedMembersAcrossServes(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	for _, id := range []string{"alpha", "beta", "gamma"} {
		callTool(t, fd, "fleet_spawn", map[string]any{"id": id, "command": "sleep 600"}, nil)
	}
	mgr := connect(t, e.URL())
	callTool(t, mgr, "fleet_whoami", map[string]any{"fleet": "kb"}, nil)
	killFleetdAwaitRestart(t, e, "kb", 30*time.Second, serve.Log, func(st lifecycle.State) bool { return st.MembersLost == 3 })
	var text string
	if !svWait(10*time.Second, func() bool {
		text = e.MustRun("events", "kb", "--kind", "fleet.restart").Stdout
		return strings.Contains(text, "ended 3 members")
	}) {
		t.Fatalf("events kb --kind fleet.restart does not say ended 3 members:\n%s\nall:\n%s", text, e.MustRun("events").Stdout)
	}
	if !strings.Contains(text, "fleetd exited") {
		t.Errorf("the restart's cause is missing:\n%s", text)
	}

	before := eventsJSON(t, e)
	var sawStart, sawCall, sawPhase bool
	for _, ev := range before {
		switch {
		case ev.Kind == journal.KindControl && ev.Detail == "start" && ev.Fleet == "kb":
			sawStart = ev.Outcome == "ok" && strings.Contains(ev.Origin, fmt.Sprintf("uid=%d", os.Getuid())) && strings.Contains(ev.Origin, "client fleetmgr-cli")
		case ev.Kind == journal.KindCall && ev.Detail == "fleet_whoami":
			// Its outcome is the call's (ok, or a tool error when the
			// fleetd was being killed as it came); never its arguments.
			sawCall = ev.Fleet == "kb" && ev.Outcome != "" && ev.Data["duration_ms"] != nil && ev.Data["arguments"] == nil &&
				strings.Contains(ev.Origin, "client ")
		case ev.Kind == journal.KindPhase && ev.Fleet == "kb" && ev.Outcome == "restarting":
			sawPhase = true
		}
	}
	if !sawStart || !sawCall || !sawPhase {
		t.Fatalf("start by the CLI %v, the call %v, the phase change %v; journal:\n%s", sawStart, sawCall, sawPhase, e.MustRun("events").Stdout)
	}

	killServe(t, serve)
	// No serve: the file itself is read.
	if n := len(eventsJSON(t, e)); n < len(before) {
		t.Fatalf("without serve, events has %d events, had %d", n, len(before))
	}
	e.StartServe()
	after := eventsJSON(t, e)
	if len(after) < len(before) || after[len(before)-1].Seq != before[len(before)-1].Seq {
		t.Fatalf("after a serve restart events has %d events (had %d); last before %+v", len(after), len(before), before[len(before)-1])
	}
}

// hookReceiver is a real local webhook receiver.
type hookReceiver struct {
	mu     sync.Mutex
	events []map[string]any
	srv    *httptest.Server
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		h.mu.Lock()
		h.events = append(h.events, m)
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) got() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]any(nil), h.events...)
}

// notifyEnv is an Env whose fleets.toml has one rule on member.blocked
// with hold, a webhook sink (url_file, 0600) and a command sink appending
// to a file.
func notifyEnv(t *testing.T, hold string) (*harness.Env, *hookReceiver, string) {
	e := harness.NewEnv(t, bins, "\n[status]\ninterval = \"500ms\"\n", harness.Fleet{Name: "kb"})
	h := newHookReceiver(t)
	urlFile := filepath.Join(e.Dir, "hook.url")
	if err := os.WriteFile(urlFile, []byte(h.srv.URL+"/hook\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.Dir, "command-sink.out")
	rule := fmt.Sprintf(`
[[notify]]
name = "blocked"
on = ["member.blocked"]
fleets = ["kb"]
hold = %q

[[notify.sinks]]
type = "webhook"
url_file = %q

[[notify.sinks]]
type = "command"
command = ["sh", "-c", "echo \"$FLEETMGR_EVENT_STATE $FLEETMGR_EVENT_MEMBER\" >> %s"]
`, hold, urlFile, out)
	f, err := os.OpenFile(e.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(rule); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return e, h, out
}

func states(h *hookReceiver) []string {
	var s []string
	for _, m := range h.got() {
		s = append(s, fmt.Sprint(m["state"], " ", m["member"]))
	}
	return s
}

// TestNotifyBlockedOnceResolvedOnceAcrossKill (issue 25): a member made
// BLOCKED (the herdr stand-in's status escape) notifies once after the
// hold, to a real local webhook receiver and through a command sink;
// serve killed with SIGKILL mid-episode and started again sends no
// duplicate; the member back to working resolves it once.
func TestNotifyBlockedOnceResolvedOnceAcrossKill(t *testing.T) {
	e, h, out := notifyEnv(t, "2s")
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "asker", "command": `printf '\033]777;herdr-status;blocked\007'; sleep 6; printf '\033]777;herdr-status;working\007'; sleep 600`}, nil)
	t0 := time.Now()
	if !svWait(30*time.Second, func() bool { return len(h.got()) >= 1 }) {
		t.Fatalf("no notification for the blocked member; log:\n%s", serve.Log())
	}
	if held := time.Since(t0); held < 2*time.Second {
		t.Errorf("notified %s after the member blocked, before the 2s hold", held)
	}
	if s := states(h); s[0] != "firing asker" {
		t.Fatalf("first notification: %v", s)
	}
	// Both sinks took it, and the journal has both attempts.
	if !svWait(10*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "firing asker") && len(eventsJSON(t, e, "--kind", "notify")) == 2
	}) {
		t.Fatalf("the command sink or the journal lacks the firing:\n%s", e.MustRun("events", "--kind", "notify").Stdout)
	}
	// Mid-episode: kill -9, and a new serve that still sees it blocked.
	killServe(t, serve)
	serve2 := e.StartServe()
	if !svWait(30*time.Second, func() bool { return len(h.got()) >= 2 }) {
		t.Fatalf("no resolution; got %v; log:\n%s", states(h), serve2.Log())
	}
	// Anything further would come within 2 s.
	wait.Never(t, 2*time.Second, "notifications other than one firing and one resolved", func() (bool, string) {
		s := states(h)
		return len(s) != 2 || s[1] != "resolved asker", fmt.Sprint(s)
	})
	// The second serve delivered the resolution: /metrics counts it.
	if v := serveMetric(t, e, `fleetmgr_notify_sent_total{rule="blocked",sink="webhook#0"}`); v != 1 {
		t.Errorf("fleetmgr_notify_sent_total for the webhook = %v, want 1", v)
	}
	if v := serveMetric(t, e, `fleetmgr_journal_events_written_total`); v < 1 {
		t.Errorf("fleetmgr_journal_events_written_total = %v", v)
	}
	b, _ := os.ReadFile(out)
	if got := strings.TrimSpace(string(b)); got != "firing asker\nresolved asker" {
		t.Errorf("command sink got:\n%s", got)
	}
	var sent int
	for _, ev := range eventsJSON(t, e, "--kind", "notify") {
		if ev.Outcome == "sent" {
			sent++
		}
	}
	if sent != 4 { // two sinks, two notifications
		t.Errorf("journal has %d notify attempts sent, want 4:\n%s", sent, e.MustRun("events", "--kind", "notify").Stdout)
	}
}

// TestNotifyFlappingSendsNothing (issue 25): a member BLOCKED and WORKING
// every 2 s under a 10 s hold sends nothing.
func TestNotifyFlappingSendsNothing(t *testing.T) {
	e, h, _ := notifyEnv(t, "10s")
	serve := e.StartServe()
	e.MustRun("start", "kb")
	fd := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", e.Ports["kb"]))
	callTool(t, fd, "fleet_spawn", map[string]any{"id": "flap", "command": `while true; do printf '\033]777;herdr-status;blocked\007'; sleep 2; printf '\033]777;herdr-status;working\007'; sleep 2; done`}, nil)
	// The flapping is seen (the journal has BLOCKED verdicts) …
	if !svWait(30*time.Second, func() bool {
		for _, ev := range eventsJSON(t, e, "kb", "--kind", "member.verdict") {
			if ev.Member == "flap" && ev.Outcome == "BLOCKED" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the member was never seen BLOCKED:\n%s\n%s", e.MustRun("events").Stdout, serve.Log())
	}
	// … and for 16 s (four flaps, longer than the hold) nothing is sent.
	wait.Never(t, 16*time.Second, "a notification of a flapping member", func() (bool, string) {
		s := states(h)
		return len(s) != 0, fmt.Sprint(s)
	})
}

// TestNotifyFailingSinkShown (issue 25: a sink that fails is reported in
// check, status and /metrics): a rule whose webhook receiver answers 502;
// `fleetmgr notify test` fails through it; then `fleetmgr status` names
// the rule, the sink and its last error (and status --json carries it,
// valid against docs/status-schema.json), `fleetmgr check --json` has a
// warning for it; once the receiver answers again and a test succeeds,
// neither shows it.
func TestNotifyFailingSinkShown(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	var fail atomic.Bool
	fail.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if fail.Load() {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	urlFile := filepath.Join(e.Dir, "hook.url")
	if err := os.WriteFile(urlFile, []byte(srv.URL+"/hook\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendFile(t, e.ConfigPath, fmt.Sprintf("\n[[notify]]\nname = \"needs-me\"\non = [\"fleet.failed\"]\n\n[[notify.sinks]]\ntype = \"webhook\"\nurl_file = %q\n", urlFile))
	e.StartServe()
	if r := e.Run("notify", "test"); r.Code != 1 {
		t.Fatalf("notify test through a failing sink: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	text := e.MustRun("status").Stdout
	if !strings.Contains(text, "notify: rule needs-me, sink webhook#0: the last delivery failed; last error:") || !strings.Contains(text, "not delivered") {
		t.Fatalf("status does not name the failing sink:\n%s", text)
	}
	rep := statusJSON(t, e, statusSchema(t))
	if len(rep.NotifyFailing) != 1 || rep.NotifyFailing[0].Rule != "needs-me" || rep.NotifyFailing[0].Sink != "webhook#0" || rep.NotifyFailing[0].Failures != 1 {
		t.Fatalf("status --json notify_failing: %+v", rep.NotifyFailing)
	}
	checkNotify := func() []doctor.Finding {
		r := e.Run("check", "--json")
		var rep doctor.Report
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("check --json: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
		var out []doctor.Finding
		for _, f := range rep.Findings {
			if f.Check == "notify" {
				out = append(out, f)
			}
		}
		return out
	}
	if fs := checkNotify(); len(fs) != 1 || fs[0].Severity != doctor.SevWarn || fs[0].Subject != "rule needs-me, sink webhook#0" || !strings.Contains(fs[0].Message, "not delivered") {
		t.Fatalf("check's notify findings: %+v", fs)
	}

	fail.Store(false)
	e.MustRun("notify", "test")
	if text := e.MustRun("status").Stdout; strings.Contains(text, "notify: rule") {
		t.Fatalf("status still names a sink that delivers again:\n%s", text)
	}
	if fs := checkNotify(); len(fs) != 1 || fs[0].Severity != doctor.SevOK {
		t.Fatalf("check's notify findings once the sink delivers: %+v", fs)
	}
}
