package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/status"
	poll "github.com/fleetmgr/fleetmgr/testbed/wait" // "wait" is browser_test.go's page helper
)

// sseEvent is one event read from a stream.
type sseEvent struct{ id, name, data string }

// sseStream reads a text/event-stream response.
type sseStream struct {
	res    *http.Response
	cancel func()
	ch     chan sseEvent
}

// openSSE opens url with the headers and reads its events in the
// background.
func openSSE(t testing.TB, url string, hdr map[string]string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		cancel()
		t.Fatalf("GET %s: %s %s %s", url, res.Status, res.Header.Get("Content-Type"), b)
	}
	s := &sseStream{res: res, cancel: cancel, ch: make(chan sseEvent, 1024)}
	go func() {
		defer close(s.ch)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					s.ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[6:]
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() { s.cancel(); s.res.Body.Close() }

// next returns the next event, failing t after timeout.
func (s *sseStream) next(t testing.TB, timeout time.Duration) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %s", timeout)
	}
	return sseEvent{}
}

// until returns the first event satisfying ok.
func (s *sseStream) until(t testing.TB, timeout time.Duration, ok func(sseEvent) bool) sseEvent {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev := s.next(t, time.Until(deadline))
		if ok(ev) {
			return ev
		}
	}
}

// TestSecurityHeadersOnEveryResponse: the page, the assets, the API, a
// 404 and a refusal all carry the CSP (no unsafe-inline, frames denied,
// <base> and plugins off, Trusted Types), nosniff and no-referrer.
func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	w := newWorld(t, "kb")
	_, ts := w.serve(w.options())
	cases := []struct {
		method, path string
		status       int
	}{
		{"GET", "/", 200}, {"GET", "/app.js", 200}, {"GET", "/app.css", 200}, {"GET", "/favicon.svg", 200},
		{"GET", "/api/snapshot", 200}, {"GET", "/nope", 404}, {"POST", "/", 405}, {"GET", "/api/action", 405},
		{"PUT", "/api/action", 405}, {"GET", "/api/logs?fleet=nope", 400},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := res.Header
		if res.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, res.StatusCode, c.status)
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'",
			"object-src 'none'", "require-trusted-types-for 'script'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s %s: CSP %q lacks %q", c.method, c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") || strings.Contains(csp, "*") {
			t.Errorf("%s %s: CSP %q allows unsafe sources", c.method, c.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: headers %v", c.method, c.path, h)
		}
	}
	// The page and its assets hold no inline script or style and load
	// nothing from another origin.
	res, body := get(t, ts.URL+"/", nil)
	if res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("page type %q", res.Header.Get("Content-Type"))
	}
	if m := regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>|<style|\sstyle=|\son[a-z]+=|https?://`).Find(body); m != nil {
		t.Errorf("page holds inline code or an absolute URL: %q", m)
	}
	for _, a := range []string{"/app.js", "/app.css"} {
		_, b := get(t, ts.URL+a, nil)
		b = bytes.ReplaceAll(b, []byte("'http://www.w3.org/2000/svg'"), nil) // the SVG namespace, not a request
		if m := regexp.MustCompile(`https?://[a-z]|innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|@import|url\(`).Find(b); m != nil {
			t.Errorf("%s uses %q", a, m)
		}
	}
}

// TestPageWeight: the page and everything it loads stay far below the
// 150 KB budget (measured in BenchmarkDashboard with a full snapshot).
func TestPageWeight(t *testing.T) {
	w := newWorld(t, "kb")
	_, ts := w.serve(w.options())
	total := 0
	for _, p := range []string{"/", "/app.js", "/app.css", "/favicon.svg"} {
		_, b := get(t, ts.URL+p, nil)
		total += len(b)
	}
	if total > 100<<10 {
		t.Errorf("static page weight %d bytes", total)
	}
}

var schemaOnce = struct {
	s   *jsonschema.Schema
	err error
}{}

func statusSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	if schemaOnce.s == nil && schemaOnce.err == nil {
		c := jsonschema.NewCompiler()
		f, err := os.Open("../docs/status-schema.json")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("status-schema.json", doc); err != nil {
			t.Fatal(err)
		}
		schemaOnce.s, schemaOnce.err = c.Compile("status-schema.json")
	}
	if schemaOnce.err != nil {
		t.Fatal(schemaOnce.err)
	}
	return schemaOnce.s
}

// validReport checks raw report JSON against docs/status-schema.json.
func validReport(t testing.TB, raw json.RawMessage) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := statusSchema(t).Validate(v); err != nil {
		t.Errorf("report does not follow docs/status-schema.json: %v\n%s", err, raw)
	}
}

// TestSnapshotFollowsStatusSchema: the report in /api/snapshot and in
// report/fleet events is `fleetmgr status --json`'s schema, before any
// sampling (rows only) and after; one stopped, one running, one remote.
func TestSnapshotFollowsStatusSchema(t *testing.T) {
	w := newWorld(t, "docs", "kb", "far@far")
	w.run("kb")
	w.stop("docs")
	w.setMembers("kb", status.Member{ID: "m1", Verdict: status.Working, Evidence: []string{"files"}, LastChangeAgeS: ptr(0.4)},
		status.Member{ID: "m2", Verdict: status.Stalled, Reason: "claims busy, but no file change for 14m", LastChangeAgeS: ptr(842.0)})
	opt := w.options()
	opt.Status = func(ctx context.Context, names []string) (*status.Report, error) {
		<-ctx.Done() // no sampling: the snapshot is rows only
		return nil, ctx.Err()
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	rec := func() (snap struct {
		EventID string          `json:"event_id"`
		Report  json.RawMessage `json:"report"`
		Meta    map[string]FleetMeta
	}) {
		req, _ := http.NewRequest("GET", "/api/snapshot", nil)
		rw := &recorder{h: http.Header{}}
		s.ServeHTTP(rw, req)
		if rw.code != 0 && rw.code != 200 {
			t.Fatalf("snapshot: %d %s", rw.code, rw.body.String())
		}
		if err := json.Unmarshal(rw.body.Bytes(), &snap); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	snap := rec()
	validReport(t, snap.Report)
	var rep status.Report
	_ = json.Unmarshal(snap.Report, &rep)
	states := map[string]string{}
	for _, f := range rep.Fleets {
		states[f.Name] = f.State
	}
	if states["kb"] != "running" || states["docs"] != "stopped" || states["far"] != "remote" {
		t.Errorf("states %v", states)
	}
	// After a sampling.
	full, err := w.Status(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.hub.applyReport(full, time.Now())
	snap = rec()
	validReport(t, snap.Report)
	_ = json.Unmarshal(snap.Report, &rep)
	for _, f := range rep.Fleets {
		if f.Name == "kb" && (len(f.Members) != 2 || f.Members[1].Verdict != status.Stalled) {
			t.Errorf("kb after sampling: %+v", f)
		}
	}
	if snap.Meta["kb"].SampledAt.IsZero() {
		t.Error("kb: sampled_at not set")
	}
}

// recorder is a minimal http.ResponseWriter.
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(c int)           { r.code = c }

// token fetches the page and returns its CSRF token.
func token(t testing.TB, url string) string {
	t.Helper()
	_, body := get(t, url+"/", nil)
	m := regexp.MustCompile(`name="fleetmgr-csrf" content="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return string(m[1])
}

// post sends an action request.
func post(t testing.TB, url string, hdr map[string]string, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/api/action", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// TestActionRefusals: every request that is not the page's own POST is
// refused with nothing done, logged and counted by reason; the page's own
// runs the action once, and again (idempotent) when repeated.
func TestActionRefusals(t *testing.T) {
	w := newWorld(t, "docs", "kb", "far@far")
	w.run("kb")
	w.run("docs")
	s, ts := w.serve(w.options())
	tok := token(t, ts.URL)
	origin := ts.URL
	good := map[string]string{"Origin": origin, "Content-Type": "application/json", CSRFHeader: tok, "Sec-Fetch-Site": "same-origin"}
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for a, b := range good {
			h[a] = b
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	other := newServerToken(t, w)
	body := `{"verb":"stop","fleet":"docs"}`
	cases := []struct {
		name   string
		hdr    map[string]string
		body   string
		status int
		reason string
	}{
		{"no Origin", with("Origin", ""), body, 403, "origin"},
		{"another origin", with("Origin", "http://127.0.0.1:1"), body, 403, "origin"},
		{"evil origin", with("Origin", "http://evil.example"), body, 403, "origin"},
		{"opaque origin", with("Origin", "null"), body, 403, "origin"},
		{"cross-site fetch", with("Sec-Fetch-Site", "cross-site"), body, 403, "origin"},
		{"same-site fetch", with("Sec-Fetch-Site", "same-site"), body, 403, "origin"},
		{"form post", with("Content-Type", "application/x-www-form-urlencoded"), "verb=stop&fleet=docs", 415, "content_type"},
		{"text/plain", with("Content-Type", "text/plain"), body, 415, "content_type"},
		{"no token", with(CSRFHeader, ""), body, 403, "csrf"},
		{"forged token", with(CSRFHeader, "AAAAAAAAAAAAAAAAAAAAAA.AAAA"), body, 403, "csrf"},
		{"another serve's token", with(CSRFHeader, other), body, 403, "csrf"},
		{"token with a flipped bit", with(CSRFHeader, flip(tok)), body, 403, "csrf"},
		{"unknown verb", good, `{"verb":"delete","fleet":"docs"}`, 400, "bad_request"},
		{"unknown field", good, `{"verb":"stop","fleet":"docs","force":true}`, 400, "bad_request"},
		{"two objects", good, body + body, 400, "bad_request"},
		{"stop with lead", good, `{"verb":"stop","fleet":"docs","lead":true}`, 400, "bad_request"},
		{"big body", good, `{"verb":"stop","fleet":"` + strings.Repeat("d", 5000) + `"}`, 400, "bad_request"},
		{"unknown fleet", good, `{"verb":"stop","fleet":"nope"}`, 400, "unknown_fleet"},
		{"NAME@HOST", good, `{"verb":"stop","fleet":"kb@beta"}`, 400, "unknown_fleet"},
		{"another host's fleet", good, `{"verb":"stop","fleet":"far"}`, 400, "remote"},
	}
	for _, c := range cases {
		before := w.refusals(c.reason)
		code, out := post(t, ts.URL, c.hdr, c.body)
		if code != c.status || out["refused"] != c.reason || out["ok"] != false {
			t.Errorf("%s: %d %v, want %d refused %s", c.name, code, out, c.status, c.reason)
		}
		if got := w.refusals(c.reason); got != before+1 {
			t.Errorf("%s: refusals{%s} %v → %v", c.name, c.reason, before, got)
		}
	}
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH"} {
		req, _ := http.NewRequest(m, ts.URL+"/api/action?verb=stop&fleet=docs", strings.NewReader(body))
		for k, v := range good {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 405 || res.Header.Get("Allow") != "POST" {
			t.Errorf("%s: %d Allow %q", m, res.StatusCode, res.Header.Get("Allow"))
		}
	}
	if a := w.actionsDone(); len(a) != 0 {
		t.Fatalf("refused requests ran actions: %v", a)
	}
	if st := w.state("docs"); st.Shown.Phase != lifecycle.PhaseRunning {
		t.Fatalf("docs is %s after refused requests", st.Shown.Phase)
	}
	if !strings.Contains(w.log.String(), "dashboard: refused") || !strings.Contains(w.log.String(), "reason=csrf") {
		t.Errorf("refusals not logged:\n%s", w.log.String())
	}

	// The page's own request, twice: stopped, then stopped again (ok).
	for i := range 2 {
		code, out := post(t, ts.URL, good, body)
		if code != 200 || out["ok"] != true || out["state"] != "stopped" {
			t.Fatalf("stop #%d: %d %v", i+1, code, out)
		}
	}
	// Start of a running fleet: ok, nothing changes.
	pid := w.state("kb").Fleetd.PID
	code, out := post(t, ts.URL, good, `{"verb":"start","fleet":"kb"}`)
	if code != 200 || out["ok"] != true || out["state"] != "running" || w.state("kb").Fleetd.PID != pid {
		t.Fatalf("start of running kb: %d %v", code, out)
	}
	if a := w.actionsDone(); len(a) != 3 || a[0] != (Action{Verb: VerbStop, Fleet: "docs"}) || a[2] != (Action{Verb: VerbStart, Fleet: "kb"}) {
		t.Fatalf("actions %v", a)
	}

	// A second action on a fleet while one runs: 409, not run.
	w.mu.Lock()
	w.actWait = make(chan struct{})
	w.mu.Unlock()
	done := make(chan int)
	go func() { c, _ := post(t, ts.URL, good, `{"verb":"restart","fleet":"kb","lead":true}`); done <- c }()
	poll.For(t, 5*time.Second, "len(w.actionsDone()) == 4", poll.Bool(func() bool { return len(w.actionsDone()) == 4 }))
	if code, out := post(t, ts.URL, good, `{"verb":"stop","fleet":"kb"}`); code != 409 || out["refused"] != "busy" {
		t.Errorf("second action: %d %v", code, out)
	}
	close(w.actWait)
	if c := <-done; c != 200 {
		t.Errorf("restart: %d", c)
	}
	if a := w.actionsDone(); len(a) != 4 || a[3] != (Action{Verb: VerbRestart, Fleet: "kb", Lead: true}) {
		t.Errorf("actions %v", a)
	}
	_ = s
}

// newServerToken returns a valid token of another Server (another serve).
func newServerToken(t testing.TB, w *world) string {
	opt := w.options()
	opt.Metrics = nil
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.newToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// flip changes one character of the token's MAC.
func flip(tok string) string {
	b := []byte(tok)
	i := len(b) - 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestCSRFToken: a token verifies only unchanged and only with the secret
// that made it.
func TestCSRFToken(t *testing.T) {
	w := newWorld(t, "kb")
	opt := w.options()
	opt.Metrics = nil
	s, _ := New(opt)
	tok, err := s.newToken()
	if err != nil {
		t.Fatal(err)
	}
	if !s.validToken(tok) {
		t.Fatal("own token refused")
	}
	tok2, _ := s.newToken()
	if tok2 == tok || !s.validToken(tok2) {
		t.Fatal("each page must get its own valid token")
	}
	n, m, _ := strings.Cut(tok, ".")
	n2, m2, _ := strings.Cut(tok2, ".")
	for _, bad := range []string{"", ".", tok + "A", "A" + tok, n, m, n + "." + m2, n2 + "." + m, n + ".", "." + m, flip(tok),
		strings.ToUpper(tok), n + "." + m + ".x", "%%%." + m, n + ".%%%", n[:len(n)-2] + "." + m} {
		if s.validToken(bad) {
			t.Errorf("token %q accepted", bad)
		}
	}
	if other := newServerToken(t, w); s.validToken(other) {
		t.Error("another Server's token accepted")
	}
}

// TestEventsResume: a stream resumed with Last-Event-ID gets exactly the
// events it missed, in order, and no snapshot; an id the ring no longer
// holds, an id of another serve, a future or malformed id get a snapshot.
func TestEventsResume(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	opt := w.options()
	opt.EventRing = 4
	opt.SampleEvery = time.Hour // only the warm sampling: the events are the test's
	opt.Calls = nil
	s, ts := w.serve(opt)
	// The warm-up sampling applied first: one still running when the test
	// writes the state below reads the new restart count itself, and its
	// "report" stands for the "fleet" event this test waits for (seen
	// under a load of 26 on two cores).
	poll.For(t, 10*time.Second, "the warm-up sampling applied", poll.Bool(func() bool {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		fs := s.hub.fleets["kb"]
		return fs != nil && !fs.meta.SampledAt.IsZero()
	}))
	first := openSSE(t, ts.URL+"/events", nil)
	snap := first.next(t, 5*time.Second)
	if snap.name != "snapshot" || snap.id == "" {
		t.Fatalf("first event %+v", snap)
	}
	// Three lifecycle changes → three fleet events.
	restarts := func(n int) {
		st := *w.state("kb")
		st.Restarts = n
		w.writeState(st)
	}
	var ids []string
	for i := 1; i <= 3; i++ {
		restarts(i)
		ev := first.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "fleet" })
		if !strings.Contains(ev.data, fmt.Sprintf(`"restarts":%d`, i)) {
			t.Fatalf("fleet event %d: %s", i, ev.data)
		}
		ids = append(ids, ev.id)
	}
	first.close()
	// Two more while nobody listens (Linger keeps the rows read).
	restarts(4)
	poll.For(t, 5*time.Second, "s.hub.fleets[\"kb\"].row.Restarts == 4", poll.Bool(func() bool { s.hub.mu.Lock(); defer s.hub.mu.Unlock(); return s.hub.fleets["kb"].row.Restarts == 4 }))
	restarts(5)
	poll.For(t, 5*time.Second, "s.hub.fleets[\"kb\"].row.Restarts == 5", poll.Bool(func() bool { s.hub.mu.Lock(); defer s.hub.mu.Unlock(); return s.hub.fleets["kb"].row.Restarts == 5 }))

	resumed := openSSE(t, ts.URL+"/events", map[string]string{"Last-Event-ID": ids[2]})
	for _, want := range []int{4, 5} {
		ev := resumed.next(t, 5*time.Second)
		if ev.name != "fleet" || !strings.Contains(ev.data, fmt.Sprintf(`"restarts":%d`, want)) {
			t.Fatalf("resumed: got %s %s, want the fleet event with restarts %d", ev.name, ev.data, want)
		}
	}
	resumed.close()
	// ?since= works like the header (the page's first connection).
	since := openSSE(t, ts.URL+"/events?since="+ids[2], nil)
	if ev := since.next(t, 5*time.Second); ev.name != "fleet" || !strings.Contains(ev.data, `"restarts":4`) {
		t.Fatalf("since: %s %s", ev.name, ev.data)
	}
	since.close()

	epoch, _, _ := strings.Cut(ids[0], ".")
	// The snapshot's id is before the first fleet event: the ring (4)
	// no longer holds what follows it.
	for _, id := range []string{snap.id, "deadbeefdead.2", epoch + ".999999", "garbage", epoch + ".x", ""} {
		st := openSSE(t, ts.URL+"/events", map[string]string{"Last-Event-ID": id})
		if ev := st.next(t, 5*time.Second); ev.name != "snapshot" {
			t.Errorf("Last-Event-ID %q: first event %s, want snapshot", id, ev.name)
		}
		st.close()
	}
}

// TestRingBounds: the ring keeps at most maxN events and maxBytes bytes
// (never dropping the newest), and since() resumes exactly or refuses.
func TestRingBounds(t *testing.T) {
	mk := func(seq uint64, n int) *event { return &event{seq: seq, frame: bytes.Repeat([]byte("x"), n)} }
	r := eventRing{maxN: 3, maxBytes: 100}
	if evs, ok := r.since(0); !ok || len(evs) != 0 {
		t.Fatalf("empty ring since 0: %v %v", evs, ok)
	}
	if _, ok := r.since(1); ok {
		t.Fatal("future id resumed")
	}
	for i := uint64(1); i <= 5; i++ {
		r.push(mk(i, 10))
		if len(r.buf) > 3 {
			t.Fatalf("ring holds %d > 3", len(r.buf))
		}
	}
	// Holds 3,4,5: resume from 2 (just before) .. 5; not from 1.
	for seq, want := range map[uint64]int{2: 3, 3: 2, 4: 1, 5: 0} {
		evs, ok := r.since(seq)
		if !ok || len(evs) != want || (want > 0 && evs[0].seq != seq+1) {
			t.Errorf("since %d: %d events ok=%v, want %d", seq, len(evs), ok, want)
		}
	}
	for _, seq := range []uint64{0, 1, 6} {
		if _, ok := r.since(seq); ok {
			t.Errorf("since %d resumed", seq)
		}
	}
	// Bytes: 45+45 fit in 100, a third 45 drops the oldest.
	r = eventRing{maxN: 10, maxBytes: 100}
	r.push(mk(1, 45))
	r.push(mk(2, 45))
	r.push(mk(3, 45))
	if len(r.buf) != 2 || r.buf[0].seq != 2 || r.bytes != 90 {
		t.Fatalf("byte bound: %d events from %d, %d bytes", len(r.buf), r.buf[0].seq, r.bytes)
	}
	// One event larger than the bound is kept alone.
	r.push(mk(4, 500))
	if len(r.buf) != 1 || r.buf[0].seq != 4 {
		t.Fatalf("huge event: %d events", len(r.buf))
	}
	if evs, ok := r.since(3); !ok || len(evs) != 1 {
		t.Fatalf("since 3 after huge: %v %v", evs, ok)
	}
}

// TestLifecycleChangeWithoutSampling: a fleetd killed is a "fleet" event
// from the rows alone (no member sampling runs for it), with the state
// `fleetmgr list` would print; a fleet coming back is sampled at once.
func TestLifecycleChangeWithoutSampling(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	w.setMembers("kb", status.Member{ID: "m1", Verdict: status.Idle})
	opt := w.options()
	opt.SampleEvery = time.Hour
	opt.Calls = nil
	_, ts := w.serve(opt)
	es := openSSE(t, ts.URL+"/events", nil)
	es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "snapshot" })
	poll.For(t, 5*time.Second, "w.samples == 1", poll.Bool(func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.samples == 1 }))
	w.kill9("kb")
	ev := es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "fleet" })
	var d struct{ Row status.Fleet }
	if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
		t.Fatal(err)
	}
	if d.Row.State != string(w.state("kb").Shown.Phase) || d.Row.State == "running" || len(d.Row.Members) != 0 {
		t.Fatalf("after kill -9: %+v (lifecycle says %s)", d.Row, w.state("kb").Shown.Phase)
	}
	w.mu.Lock()
	n := w.samples
	w.mu.Unlock()
	if n != 1 {
		t.Errorf("%d samplings for a lifecycle change, want none beyond the warm one", n)
	}
	w.run("kb")
	es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "fleet" && strings.Contains(e.data, `"state":"running"`) })
	rep := es.until(t, 5*time.Second, func(e sseEvent) bool { return e.name == "report" })
	if !strings.Contains(rep.data, `"id":"m1"`) {
		t.Errorf("report after the restart: %s", rep.data)
	}
}

// TestIdleDoesNothing: with no page open (past Linger), neither Rows,
// Status nor the counters are read.
func TestIdleDoesNothing(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	opt := w.options()
	opt.StateEvery, opt.SampleEvery, opt.CallsEvery, opt.Linger = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	reads := 0
	calls := opt.Calls
	var mu = &w.mu
	opt.Calls = func() (map[string]CallCounts, error) { mu.Lock(); reads++; mu.Unlock(); return calls() }
	s, ts := w.serve(opt)
	counts := func() (int, int, int) { mu.Lock(); defer mu.Unlock(); return w.rowsN, w.samples, reads }
	// Open a page for a while: all three loops run.
	es := openSSE(t, ts.URL+"/events", nil)
	poll.For(t, 5*time.Second, "more than 3 row, sample and calls reads each", poll.Bool(func() bool { r, s, c := counts(); return r > 3 && s > 3 && c > 3 }))
	es.close()
	poll.For(t, 5*time.Second, "s.hub.streams() == 0", poll.Bool(func() bool { return s.hub.streams() == 0 }))
	// Past Linger, then one period for a loop that was mid-wait: it reads
	// once more at its period's end, and nothing marks that it has (a
	// sleep, as the claim is about what the loops do with time passing).
	poll.For(t, 5*time.Second, "the hub idle past Linger", poll.Bool(func() bool { on, _ := s.hub.active(); return !on }))
	time.Sleep(3 * opt.StateEvery)
	r0, s0, c0 := counts()
	poll.Never(t, 10*opt.StateEvery, "a read while idle", func() (bool, string) {
		r, s, c := counts()
		return r != r0 || s != s0 || c != c0, fmt.Sprintf("rows %d→%d, samplings %d→%d, counter reads %d→%d", r0, r, s0, s, c0, c)
	})
}

// TestShutdownEndsStreams: ending Run closes open streams, so an
// http.Server's Shutdown is not held up by them.
func TestShutdownEndsStreams(t *testing.T) {
	w := newWorld(t, "kb")
	s, err := New(w.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	hs := &http.Server{Handler: s}
	l := newListener(t)
	go func() { _ = hs.Serve(l) }()
	url := "http://" + l.Addr().String()
	es := openSSE(t, url+"/events", nil)
	logs := openSSE(t, url+"/api/logs?fleet=kb", nil)
	es.next(t, 5*time.Second)
	logs.next(t, 5*time.Second)
	cancel()
	<-done
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, st := range []*sseStream{es, logs} {
		for range st.ch { // drained and closed: the stream ended
		}
	}
}

// TestLogStream: a tail first, then appended lines; lines are text (the
// payloads arrive verbatim in JSON strings), terminal sequences are
// removed, long lines cut, unknown fleets and procs refused.
func TestLogStream(t *testing.T) {
	w := newWorld(t, "docs", "kb")
	for i := range 120 {
		w.appendLog("kb", fmt.Sprintf("old line %d", i))
	}
	_, ts := w.serve(w.options())
	st := openSSE(t, ts.URL+"/api/logs?fleet=kb&fleet=docs", nil)
	tails := map[string]logEvent{}
	for range 2 {
		ev := st.next(t, 5*time.Second)
		var d logEvent
		if ev.name != "tail" || json.Unmarshal([]byte(ev.data), &d) != nil {
			t.Fatalf("want tail events first, got %s %s", ev.name, ev.data)
		}
		tails[d.Fleet] = d
	}
	if kb := tails["kb"].Lines; len(kb) != 100 || kb[0] != "old line 20" || kb[99] != "old line 119" {
		t.Fatalf("kb tail: %d lines %q…", len(kb), kb[:min(2, len(kb))])
	}
	if d := tails["docs"]; d.Lines == nil || len(d.Lines) != 0 {
		t.Fatalf("docs (no log yet) tail: %+v", d)
	}
	xss := `<img src=x onerror="window.__pwned=1"></script><script>window.__pwned=1</script>`
	long := strings.Repeat("é", 1500) // 3000 bytes
	// FollowLog starts at the end of the file once it runs: write until
	// the first line shows (a line written before it opened is not sent).
	deadline := time.Now().Add(5 * time.Second)
	got := []string{}
	for len(got) == 0 && time.Now().Before(deadline) {
		w.appendLog("kb", "ready")
		select {
		case ev := <-st.ch:
			var d logEvent
			_ = json.Unmarshal([]byte(ev.data), &d)
			got = d.Lines
		case <-time.After(300 * time.Millisecond):
		}
	}
	if len(got) == 0 {
		t.Fatal("no appended line within 5s")
	}
	w.appendLog("kb", xss, "\x1b[31mred\x1b[0m plain", long, "\xff\xfebad utf8")
	var lines []string
	for len(lines) < 4 {
		ev := st.next(t, 5*time.Second)
		var d logEvent
		_ = json.Unmarshal([]byte(ev.data), &d)
		for _, l := range d.Lines {
			if l != "ready" {
				lines = append(lines, l)
			}
		}
	}
	if lines[0] != xss || lines[1] != "red plain" || !strings.HasSuffix(lines[2], " …[cut]") || len(lines[2]) > maxLineBytes+10 ||
		!strings.HasPrefix(lines[3], "\uFFFD") {
		t.Errorf("lines: %q", lines)
	}
	for _, q := range []string{"fleet=nope", "fleet=kb&proc=shell", "fleet=kb&proc=../../etc/passwd"} {
		if res, _ := get(t, ts.URL+"/api/logs?"+q, nil); res.StatusCode != 400 {
			t.Errorf("%s: %d", q, res.StatusCode)
		}
	}
}

// TestLineQueueBounded: a fleet writing faster than the page reads loses
// its oldest queued lines, counted, never blocking the writer.
func TestLineQueueBounded(t *testing.T) {
	n := make(chan struct{}, 1)
	q := &lineQueue{notify: n}
	for i := range maxPendingLogs + 7 {
		fmt.Fprintf(q, "line %d\n", i)
	}
	_, _ = q.Write([]byte("partial"))
	lines, skipped := q.take()
	if skipped != 7 || len(lines) != maxPendingLogs || lines[0] != "line 7" {
		t.Fatalf("%d lines from %q, %d skipped", len(lines), lines[0], skipped)
	}
	_, _ = q.Write([]byte(" end\n"))
	if lines, _ := q.take(); len(lines) != 1 || lines[0] != "partial end" {
		t.Fatalf("partial: %q", lines)
	}
	_, _ = q.Write(bytes.Repeat([]byte("z"), maxLineBytes+1)) // no newline
	if lines, _ := q.take(); len(lines) != 1 {
		t.Fatalf("an endless line must be shipped, got %d", len(lines))
	}
}

// newListener listens on a loopback port, closed with the test.
func newListener(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestStreamBounds: at most maxEventStreams event streams and
// maxLogStreams log streams are open at once; one more is 503 (refused,
// counted) until one closes.
func TestStreamBounds(t *testing.T) {
	w := newWorld(t, "kb")
	_, ts := w.serve(w.options())
	for _, c := range []struct {
		path string
		max  int
	}{{"/events", maxEventStreams}, {"/api/logs?fleet=kb", maxLogStreams}} {
		var open []*sseStream
		for range c.max {
			open = append(open, openSSE(t, ts.URL+c.path, nil))
		}
		before := w.refusals("too_many_streams")
		res, _ := get(t, ts.URL+c.path, nil)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Errorf("%s #%d: %s", c.path, c.max+1, res.Status)
		}
		if w.refusals("too_many_streams") != before+1 {
			t.Errorf("%s: refusal not counted", c.path)
		}
		open[0].close()
		poll.For(t, 5*time.Second, c.path+" accepted again after one closed", func() (bool, string) {
			req, _ := http.NewRequest("GET", ts.URL+c.path, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res, err := http.DefaultClient.Do(req.WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK, res.Status
		})
		for _, st := range open[1:] {
			st.close()
		}
	}
}

// TestCallsAfterIdleStartFresh: calls made while no page was open do not
// land in one spike: the first counter read after an idle time is a
// baseline; later points count only their own period.
func TestCallsAfterIdleStartFresh(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	opt := w.options()
	opt.CallsEvery, opt.Linger = 30*time.Millisecond, 30*time.Millisecond
	s, ts := w.serve(opt)
	callsOf := func(ev sseEvent) uint64 {
		var d struct {
			Fleets map[string]callPoint `json:"fleets"`
		}
		if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
			t.Fatal(err)
		}
		return d.Fleets["kb"].Calls
	}
	isCalls := func(e sseEvent) bool { return e.name == "calls" }
	es := openSSE(t, ts.URL+"/events", nil)
	// The first point is the baseline taken when the page connected: a
	// call made before it would be part of the baseline, not of a point.
	es.until(t, 5*time.Second, isCalls)
	w.call("kb", "ok", time.Millisecond)
	es.until(t, 5*time.Second, func(e sseEvent) bool { return isCalls(e) && callsOf(e) == 1 })
	es.close()
	poll.For(t, 5*time.Second, "the hub idle", poll.Bool(func() bool { on, _ := s.hub.active(); return !on }))
	// The calls loop, mid-period when the hub went idle, ends that period
	// and then waits for a page; nothing marks that it has (a sleep).
	time.Sleep(3 * opt.CallsEvery)
	for range 5 {
		w.call("kb", "ok", time.Millisecond)
	}
	es = openSSE(t, ts.URL+"/events", nil)
	for range 3 {
		if ev := es.until(t, 5*time.Second, isCalls); callsOf(ev) != 0 {
			t.Fatalf("a point holds the %d calls made while idle", callsOf(ev))
		}
	}
	w.call("kb", "ok", time.Millisecond)
	es.until(t, 5*time.Second, func(e sseEvent) bool { return isCalls(e) && callsOf(e) == 1 })
}
