package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/dashboard"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestSecurityHeadersEveryRoute: every response of serve's HTTP listener
// carries nosniff, frame denial, no referrer and a CSP — the dashboard's
// own routes the dashboard's policy, everything else (MCP, /metrics,
// /healthz, 404s, and the guard's refusals, which come before any
// handler) a policy that loads and runs nothing. Before, only the
// dashboard's handler set them: /mcp, /metrics, /healthz and every 403 of
// the guard (whose text quotes the refused Host or Origin) had none.
func TestSecurityHeadersEveryRoute(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	e.StartServe()
	base := "http://" + e.Listen
	type req struct {
		method, path, host, origin string
		dash                       bool // the dashboard's CSP
		status                     int  // 0: any
	}
	var reqs []req
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "POST"} {
		reqs = append(reqs,
			req{method: m, path: "/mcp"},
			// Other methods than GET and HEAD fall through to the dashboard's 404.
			req{method: m, path: "/metrics", dash: m != "GET" && m != "HEAD"},
			req{method: m, path: "/healthz", dash: m != "GET" && m != "HEAD"},
			req{method: m, path: "/no/such/path", dash: true},
			req{method: m, path: "/", dash: true},
			req{method: m, path: "/api/snapshot", dash: true},
			req{method: m, path: "/api/logs?fleet=../../etc", dash: true},
			req{method: m, path: "/mcp", host: "evil.example", status: http.StatusForbidden},
			req{method: m, path: "/", host: "evil.example", status: http.StatusForbidden},
			req{method: m, path: "/metrics", origin: "null", status: http.StatusForbidden},
			req{method: m, path: "/api/action", origin: "http://<script>alert(1)</script>", status: http.StatusForbidden},
		)
	}
	for _, c := range reqs {
		r, err := http.NewRequest(c.method, base+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			r.Host = c.host
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		resp, err := e.HTTPClient().Do(r)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		resp.Body.Close()
		name := c.method + " " + c.path + " host=" + c.host + " origin=" + c.origin
		if c.status != 0 && resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", name, resp.StatusCode, c.status)
		}
		h := resp.Header
		want := "default-src 'none'; frame-ancestors 'none'"
		if c.dash && c.status == 0 {
			want = dashboard.ContentSecurityPolicy
		}
		if csp := h.Get("Content-Security-Policy"); !strings.HasPrefix(csp, want) || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s (%d): CSP %q, want %q…", name, resp.StatusCode, csp, want)
		}
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if h.Get(k) != v {
				t.Errorf("%s (%d): %s %q, want %q", name, resp.StatusCode, k, h.Get(k), v)
			}
		}
	}
}
