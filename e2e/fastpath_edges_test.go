package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestFastPathEdges: the HTTP fast path's answers where the protocol leaves
// room: a cancelled call's POST, requests with headers the SDK refuses, and
// a client reusing an id while its first call runs.
func TestFastPathEdges(t *testing.T) {
	skipWithoutFastPath(t, "these are the fast path's own answers (the go-sdk answers a cancelled call with an error response, code 0)")
	r := newRTEnv(t)
	slow := func(id string, seconds float64) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"fleet_slow","arguments":{"fleet":"kb","seconds":%g,"steps":2}}}`, id, seconds)
	}
	cancelMsg := func(id string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s}}`, id)
	}
	// cancelUntil sends notifications/cancelled for id every 200 ms (one
	// sent before the call is registered goes to the SDK, which ignores
	// it) until the call's POST ends, and returns its answer; false after
	// 4 s.
	cancelUntil := func(id string, done <-chan rtResp) (rtResp, bool) {
		deadline := time.After(4 * time.Second)
		for {
			r.post(t, r.sid, cancelMsg(id))
			select {
			case a := <-done:
				return a, true
			case <-deadline:
				return rtResp{}, false
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	t.Run("a cancelled call's POST ends as an empty event stream", func(t *testing.T) {
		done := make(chan rtResp, 1)
		go func() { done <- r.post(t, r.sid, slow(`"cx"`, 8)) }()
		a, ok := cancelUntil(`"cx"`, done)
		if !ok {
			t.Fatal("the cancelled call's POST did not end")
		}
		if a.status != http.StatusOK || !strings.HasPrefix(a.ct, "text/event-stream") || strings.Contains(a.body, "data:") {
			t.Fatalf("cancelled call answered %d %q %q, want 200, an event stream, no message", a.status, a.ct, a.body)
		}
	})

	t.Run("headers the SDK refuses are refused alike for fleet tools", func(t *testing.T) {
		call := func(tool, args, ct, accept, version string) (int, string) {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"h","method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args)
			req, _ := http.NewRequest("POST", r.e.URL(), strings.NewReader(body))
			req.Header.Set("Mcp-Session-Id", r.sid)
			req.Header.Set("Mcp-Protocol-Version", version)
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		both := "application/json, text/event-stream"
		for _, h := range []struct{ ct, accept, version string }{
			{"application/json", "application/json", r.vers},
			{"application/json", "text/event-stream", r.vers},
			{"application/json", "", r.vers},
			{"text/plain", both, r.vers},
			{"", both, r.vers},
			{"application/json", both, "1999-01-01"},
		} {
			fleet, fbody := call("fleet_whoami", `{"fleet":"kb"}`, h.ct, h.accept, h.version)
			manager, mbody := call("fleetmgr_list", `{}`, h.ct, h.accept, h.version)
			if fleet != manager || fleet == http.StatusOK || strings.Contains(fbody, whoamiResult) {
				t.Errorf("Content-Type %q, Accept %q, Mcp-Protocol-Version %q: fleet tool answered %d %q, manager tool (the SDK) %d %q",
					h.ct, h.accept, h.version, fleet, short(fbody), manager, short(mbody))
			}
		}
	})

	t.Run("an id reused while its first call runs: the newer call stays cancellable", func(t *testing.T) {
		first := make(chan rtResp, 1)
		go func() { first <- r.post(t, r.sid, slow("77", 0.4)) }()
		// A sleep: the first call must be registered before the second
		// reuses its id, and its plain JSON POST shows nothing until it ends.
		time.Sleep(100 * time.Millisecond)
		second := make(chan rtResp, 1)
		go func() { second <- r.post(t, r.sid, slow("77", 8)) }()
		select {
		case <-first:
		case <-time.After(5 * time.Second):
			t.Fatal("the first call did not end")
		}
		a, ok := cancelUntil("77", second)
		if !ok {
			t.Fatal("the second call was not cancelled")
		}
		if strings.Contains(a.body, `"result"`) {
			t.Fatalf("the cancelled second call was answered: %q", a.body)
		}
	})
}

// skipWithoutFastPath skips a test (or subtest) of the fast path's own
// answers when the e2e tests run with it off (FLEETMGR_TEST_FAST_PATH=off,
// scripts/test's second pass): why says what the go-sdk answers instead.
func skipWithoutFastPath(t *testing.T, why string) {
	t.Helper()
	if harness.FastPathOff() {
		t.Skip("fast_path = false: " + why)
	}
}
