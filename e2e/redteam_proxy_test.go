package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// Red-team tests of the tools/call fast paths (proxy/fastpath.go,
// proxy/socketfast.go): a message must be read the way the SDK reads it
// (case-sensitive keys, the ids it accepts), the caller's id must come back
// as it was sent, on one line, and concurrent, cancelled and timed-out
// calls must never get another call's answer.

type rtEnv struct {
	e    *harness.Env
	w    *watcher
	sid  string
	vers string
}

func newRTEnv(t *testing.T) *rtEnv {
	t.Helper()
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: `call_timeout = "4s"`}, harness.Fleet{Name: "docs"})
	e.MustRun("start", "kb")
	e.MustRun("start", "docs")
	e.StartServe()
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"docs", "kb"}, false, 15*time.Second)
	return &rtEnv{e: e, w: w, sid: w.cs.ID(), vers: w.cs.InitializeResult().ProtocolVersion}
}

// rtResp is one raw HTTP answer.
type rtResp struct {
	status int
	ct     string
	body   string
}

// request is a POST of body on session sid with the headers a client sends.
func (r *rtEnv) request(ctx context.Context, sid, body string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", r.e.URL(), strings.NewReader(body))
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", r.vers)
	return req
}

// post sends body on session sid and reads the whole answer (bounded by 15 s).
func (r *rtEnv) post(t *testing.T, sid, body string) rtResp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req := r.request(ctx, sid, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", body, err)
		return rtResp{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("POST %s: reading the answer: %v", body, err)
	}
	return rtResp{status: resp.StatusCode, ct: resp.Header.Get("Content-Type"), body: string(b)}
}

// stream sends body (a call with a progress token) on session sid, waits
// for its first SSE event and hands the rest of the answer (the events
// read so far included) to the channel it returns, read in the background.
func (r *rtEnv) stream(sid, body string) (<-chan rtResp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req := r.request(ctx, sid, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	br := bufio.NewReader(resp.Body)
	var first string
	for l := ""; err == nil && !strings.HasPrefix(l, "data: "); {
		l, err = br.ReadString('\n')
		first += l
	}
	if err != nil {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("no first event: %q %v", first, err)
	}
	out := make(chan rtResp, 1)
	go func() {
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(br)
		out <- rtResp{status: resp.StatusCode, ct: resp.Header.Get("Content-Type"), body: first + string(b)}
	}()
	return out, nil
}

// messages are the JSON-RPC messages of an answer: the body itself
// (application/json), or each SSE event's data, which must be one line.
func (a rtResp) messages(t *testing.T) []string {
	t.Helper()
	if strings.HasPrefix(a.ct, "application/json") {
		if strings.ContainsAny(strings.TrimRight(a.body, "\n"), "\r\n") {
			t.Errorf("a JSON answer spans lines: %q", a.body)
		}
		return []string{strings.TrimSpace(a.body)}
	}
	var out []string
	for _, ev := range strings.Split(a.body, "\n\n") {
		var data []string
		for _, l := range strings.Split(ev, "\n") {
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				data = append(data, d)
			}
		}
		if len(data) > 1 {
			t.Errorf("an SSE event carries its message over %d data lines: %q", len(data), ev)
		}
		if len(data) > 0 {
			out = append(out, strings.Join(data, "\n"))
		}
	}
	return out
}

// final is the answer's response message (the last one), decoded.
func (a rtResp) final(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	ms := a.messages(t)
	if len(ms) == 0 {
		t.Errorf("no JSON-RPC message in the answer: %d %s %q", a.status, a.ct, a.body)
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(ms[len(ms)-1]), &m); err != nil {
		t.Errorf("the answer is not JSON: %q: %v", ms[len(ms)-1], err)
	}
	return m
}

// whoamiResult marks an answer that is fleet_whoami's result (its
// structured content), not a tool list that merely describes it.
const whoamiResult = `"role":"primary"`

func short(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

func compact(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

// TestRedteamFastPathReadsMessagesAsTheSDK: a message the SDK would refuse
// or read as something else (an id that is no JSON-RPC id, keys in another
// case) is never answered by the fast path as a call of a fleet tool.
func TestRedteamFastPathReadsMessagesAsTheSDK(t *testing.T) {
	skipWithoutFastPath(t, "without the fast path there is nothing to compare with the SDK")
	r := newRTEnv(t)
	call := func(id, name string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":{"fleet":"kb"}}}`, id, name)
	}
	t.Run("ids the SDK refuses", func(t *testing.T) {
		for _, id := range []string{`{"a":1}`, `[1]`, `true`, `null`, `1e400`} {
			fast := r.post(t, r.sid, call(id, "fleet_whoami"))
			sdk := r.post(t, r.sid, call(id, "fleetmgr_list"))
			if strings.Contains(fast.body, whoamiResult) || fast.status != sdk.status {
				t.Errorf("id %s: the fast path answered %d %q; the SDK answers the same message (for its own tool) %d %q",
					id, fast.status, fast.body, sdk.status, sdk.body)
			}
		}
	})
	t.Run("keys in another case", func(t *testing.T) {
		for _, c := range []struct{ body, want string }{
			{`{"jsonrpc":"2.0","id":5,"method":"tools/list","Method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`, `"tools":[`},
			{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"fleetmgr_list"},"PARAMS":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`, `\"fleets\"`},
			{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fleetmgr_list","NAME":"fleet_whoami","arguments":{}}}`, `\"fleets\"`},
			{`{"jsonrpc":"2.0","id":8,"METHOD":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`, ""},
			{`{"JSONRPC":"2.0","id":9,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`, ""},
		} {
			a := r.post(t, r.sid, c.body)
			if strings.Contains(a.body, whoamiResult) || !strings.Contains(a.body, c.want) {
				t.Errorf("%s\n  answered %d %q, want an answer with %q and no fleet_whoami result", c.body, a.status, short(a.body), c.want)
			}
		}
	})
}

// TestRedteamFastPathIDsAndErrors: valid ids of every shape come back as
// sent (compacted), on one line, as JSON and as SSE; params of the wrong
// type get a JSON-RPC error with a body, never a hang or an empty answer;
// "fleet" tricks route as the SDK path routes them.
func TestRedteamFastPathIDsAndErrors(t *testing.T) {
	skipWithoutFastPath(t, "the go-sdk turns id 12345678901234567890123 into -9223372036854775808, -0 into 0, 1.5 into 1, and U+2028 in a string id into its escape; the fast path echoes ids as sent")
	r := newRTEnv(t)
	ids := []string{`"a\u2028b\n"`, "\"a\u2028b\"", `"q\"uo\\te"`, `"é\u0000"`, `12345678901234567890123`, `-0`, `1.5`, "\n 7 \n", `""`}
	for _, id := range ids {
		for _, progress := range []bool{false, true} {
			meta := ""
			if progress {
				meta = `,"_meta":{"progressToken":"p"}`
			}
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"docs","seconds":0.05,"steps":1}%s}}`, id, meta)
			a := r.post(t, r.sid, body)
			m := a.final(t)
			if got, want := string(m["id"]), compact(id); got != want || !strings.Contains(string(m["result"]), `"completed":true`) {
				t.Errorf("id %q (progress %v): answered %d %q; want id %s and the result", id, progress, a.status, a.body, want)
			}
			if progress && len(a.messages(t)) != 2 {
				t.Errorf("id %q: want one progress event and the result, got %q", id, a.body)
			}
		}
	}
	for _, c := range []struct{ args, want string }{
		{`"kb"`, "-32602"}, {`[1]`, "-32602"}, {`{"fleet":5}`, "-32602"}, {`{"fleet":null}`, "-32602"},
		{`{"Fleet":"kb"}`, "-32602"}, {`{}`, "-32602"}, {`null`, "-32602"}, {`{"fleet":"kb\u0000"}`, "-32602"},
		{`{"fleet":"kb","fleet":"docs"}`, `"fleet":"docs"`}, {`{"\u0066leet":"docs"}`, `"fleet":"docs"`},
	} {
		for _, name := range []string{"fleet_whoami", "fleet_status"} {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"e","method":"tools/call","params":{"name":%q,"arguments":%s}}`, name, c.args)
			a := r.post(t, r.sid, body)
			if name == "fleet_status" && strings.HasPrefix(c.want, `"fleet"`) {
				continue // fleet_status needs an id: only the routing of whoami is checked
			}
			if a.status != 200 || !strings.Contains(a.body, c.want) || !strings.Contains(a.body, `"id":"e"`) {
				t.Errorf("%s arguments %s: answered %d %q, want 200 with %s", name, c.args, a.status, a.body, c.want)
			}
		}
	}
	for _, params := range []string{`[]`, `"x"`, `null`, `{"name":"fleet_whoami","arguments":{"fleet":"kb"},"_meta":"x"}`, `{"name":5}`} {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"p","method":"tools/call","params":%s}`, params)
		a := r.post(t, r.sid, body)
		if a.status >= 500 || strings.TrimSpace(a.body) == "" || strings.Contains(a.body, whoamiResult) {
			t.Errorf("params %s: answered %d %q: want the SDK's error with a body", params, a.status, a.body)
		}
	}
}

// TestRedteamFastPathConcurrencyCancelTimeout: 160 concurrent calls on two
// sessions, some timed out upstream (kb's call_timeout is 4 s), some
// cancelled by their caller, some cancelled in the name of the other
// session: every answer carries its own id and its own fleet, a call
// cancelled for another session is not cancelled, and calls made after
// the time-outs (on the connections they left) get their own answers.
func TestRedteamFastPathConcurrencyCancelTimeout(t *testing.T) {
	skipWithoutFastPath(t, "its timings are the fast path's: through the go-sdk, 160 concurrent calls on this machine pass the 4 s call_timeout")
	r := newRTEnv(t)
	other := connectWatcher(t, r.e.URL())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	fail := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(f, a...))
		}
	}
	sid := r.sid
	for i := range 160 {
		wg.Go(func() {
			fleet := []string{"kb", "docs"}[i%2]
			id := fmt.Sprintf(`"c-%d"`, i)
			if i%3 == 0 {
				id = fmt.Sprint(1000 + i)
			}
			switch {
			case i%10 == 0 && fleet == "kb": // times out upstream
				a := r.post(t, r.sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"kb","seconds":8,"steps":4}}}`, id))
				m := a.final(t)
				if string(m["id"]) != id || !strings.Contains(string(m["result"]), "call_timeout") {
					fail("timed-out call %s: %q", id, a.body)
				}
			case i%10 == 5 || i%10 == 7:
				// Cancelled in the other session's name (must complete),
				// or by its caller (no answer is due), once the call runs
				// (its first progress event arrived).
				rest, err := r.stream(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"docs","seconds":1.6,"steps":8},"_meta":{"progressToken":"t"}}}`, id))
				if err != nil {
					fail("call %s: %v", id, err)
					return
				}
				by := other.cs.ID()
				if i%10 == 7 {
					by = sid
				}
				r.post(t, by, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s}}`, id))
				select {
				case a := <-rest:
					m := a.final(t)
					switch {
					case i%10 == 5 && (string(m["id"]) != id || !strings.Contains(string(m["result"]), `"completed":true`)):
						fail("call %s cancelled in another session's name: %q", id, a.body)
					case i%10 == 7 && strings.Contains(a.body, `"result"`):
						fail("call %s cancelled by its caller was answered: %q", id, a.body)
					}
				case <-time.After(10 * time.Second):
					fail("call %s still runs after 10 s", id)
				}
			default:
				a := r.post(t, r.sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":%q}}}`, id, fleet))
				m := a.final(t)
				if string(m["id"]) != id || !strings.Contains(string(m["result"]), `\"fleet\":\"`+fleet+`\"`) {
					fail("call %s to %s: %q", id, fleet, a.body)
				}
			}
		})
	}
	wg.Wait()
	// After the time-outs: the connections they used must not carry a late
	// answer into these calls.
	for i := range 20 {
		id := fmt.Sprintf(`"after-%d"`, i)
		a := r.post(t, r.sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`, id))
		m := a.final(t)
		if string(m["id"]) != id || !strings.Contains(string(m["result"]), `caller_pid`) {
			fail("call %s after the time-outs: %q", id, a.body)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// sockClient is a raw line client of the unix socket mount.
type sockClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialSock(t *testing.T, e *harness.Env) *sockClient {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(e.StateDir, "fleetmgr.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &sockClient{c: c, br: bufio.NewReaderSize(c, 1<<20)}
	s.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"rt","version":"0"}}}`)
	if l := s.line(t, 10*time.Second); !strings.Contains(l, `"id":0`) {
		t.Fatalf("initialize: %q", l)
	}
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *sockClient) send(t *testing.T, l string) {
	t.Helper()
	if _, err := s.c.Write([]byte(l + "\n")); err != nil {
		t.Fatal(err)
	}
}

// line reads one line ("" on timeout or a closed connection).
func (s *sockClient) line(t *testing.T, d time.Duration) string {
	t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(d))
	l, err := s.br.ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimRight(l, "\n")
}

// TestRedteamSocketFastPath: on the unix socket mount, ids come back as
// sent on one line, and messages the SDK would read otherwise (ids it
// refuses, keys in another case) are not answered as fleet calls.
func TestRedteamSocketFastPath(t *testing.T) {
	skipWithoutFastPath(t, "the go-sdk turns id 12345678901234567890123 into -9223372036854775808 and U+2028 in a string id into its escape; the fast path echoes ids as sent")
	r := newRTEnv(t)
	s := dialSock(t, r.e)
	for i, id := range []string{"\"a\u2028b\\n\\\"\"", `12345678901234567890123`, `"é"`, ` 7 `} {
		meta := ""
		if i%2 == 1 {
			meta = `,"_meta":{"progressToken":"p"}`
		}
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"docs","seconds":0.05,"steps":1}%s}}`, id, meta))
		for range 3 {
			l := s.line(t, 10*time.Second)
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("id %s: a line that is not one JSON message: %q", id, l)
			}
			if _, ok := m["method"]; ok {
				continue // progress
			}
			if string(m["id"]) != compact(id) || !strings.Contains(string(m["result"]), `"completed":true`) {
				t.Errorf("id %s: answered %q", id, l)
			}
			break
		}
	}
	for _, l := range []string{
		`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":[1],"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":51,"METHOD":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":52,"method":"tools/list","Method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":53,"method":"tools/call","params":{"name":"fleetmgr_list"},"Params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
	} {
		c := dialSock(t, r.e) // one connection each: the SDK may end a connection over a bad message
		c.send(t, l)
		if got := c.line(t, 2*time.Second); strings.Contains(got, whoamiResult) {
			t.Errorf("%s\n  answered as a fleet call: %q", l, got)
		}
	}
}
