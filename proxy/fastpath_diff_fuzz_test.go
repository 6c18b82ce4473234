package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// diffServer is one MCP streamable-HTTP handler of a Proxy with a session
// opened on it.
type diffServer struct {
	h       http.Handler
	sid     string
	version string
}

// newDiffPair returns the same Proxy served twice: with the fast path in
// front of the go-sdk's handler, and the go-sdk's handler alone
// (fast_path = false), a session initialized on each. Its one fleet, kb,
// is stopped, with fleet_whoami (taking an object) and fleet_echo (no
// schema beyond an object) in its cached catalogue: a call of either
// goes through the whole forwarding path (fleet argument, catalogue,
// routing) to a deterministic answer, fleetmgr's tool error "fleet kb is
// stopped", whichever entry point took it.
func newDiffPair(t testing.TB) (fast, sdk *diffServer) {
	m := kbOnPort(t, 1025)
	tools := []*mcp.Tool{
		{Name: "fleet_whoami", InputSchema: map[string]any{"type": "object"}},
		{Name: "fleet_echo", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
	}
	b, _ := json.Marshal(tools)
	if err := os.MkdirAll(m.FleetDir("kb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.FleetDir("kb")+"/catalogue.json", b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Manager: m, Version: "test"})
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Catalogue().Tools["fleet_whoami"] == nil {
		t.Fatal("the stopped fleet's cached tools are not in the catalogue")
	}
	open := func(h http.Handler) *diffServer {
		d := &diffServer{h: h}
		init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}}`
		rec := d.post(init, nil)
		d.sid = rec.Header().Get("Mcp-Session-Id")
		if rec.Code != 200 || d.sid == "" {
			t.Fatalf("initialize: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
		d.version = "2025-06-18"
		if rec := d.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); rec.Code != http.StatusAccepted {
			t.Fatalf("notifications/initialized: %d %s", rec.Code, rec.Body)
		}
		return d
	}
	fast, sdk = open(p.HTTPHandler(mcp.StreamableHTTPOptions{}, true)), open(p.HTTPHandler(mcp.StreamableHTTPOptions{}, false))
	// The comparison means something only if the fast path answers: it
	// answers a call in JSON where the SDK streams it.
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`
	if ct := fast.post(call, nil).Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("the fast path did not answer a plain call (Content-Type %q)", ct)
	}
	if ct := sdk.post(call, nil).Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("the SDK handler alone answered a call with Content-Type %q", ct)
	}
	return fast, sdk
}

// post sends body on the session with the headers a client sends, then
// hdr's (a key with an empty value removes the header).
func (d *diffServer) post(body string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if d.sid != "" {
		req.Header.Set("Mcp-Session-Id", d.sid)
	}
	if d.version != "" {
		req.Header.Set("Mcp-Protocol-Version", d.version)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	d.h.ServeHTTP(rec, req)
	return rec
}

// sayings is what a response says, in the terms both sides must agree on:
// the status, and for a 2xx the JSON-RPC messages in it (as read by
// mcpwire's reader, whatever the framing: the fast path answers a call in
// JSON where the SDK streams it, a difference the protocol allows), each
// as its id, its result (compacted JSON) or its error's code and message.
func sayings(rec *httptest.ResponseRecorder) string {
	res := rec.Result()
	var b strings.Builder
	fmt.Fprintf(&b, "status %d\n", res.StatusCode)
	if res.StatusCode < 200 || res.StatusCode > 299 || res.StatusCode == http.StatusAccepted {
		return b.String()
	}
	r, err := mcpwire.NewReader(res, 64<<20)
	if err != nil {
		fmt.Fprintf(&b, "unreadable body: %v\n", err)
		return b.String()
	}
	defer r.Close()
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Fprintf(&b, "read error: %v\n", err)
			break
		}
		var c bytes.Buffer
		switch {
		case m.Error != nil:
			fmt.Fprintf(&b, "id %s error %d %s\n", idText(m.ID), m.Error.Code, m.Error.Message)
		case m.Result != nil:
			_ = json.Compact(&c, m.Result)
			fmt.Fprintf(&b, "id %s result %s\n", idText(m.ID), c.String())
		default:
			_ = json.Compact(&c, m.Params)
			fmt.Fprintf(&b, "%s %s\n", m.Method, c.String())
		}
		m.Release()
	}
	return b.String()
}

// FuzzServeAgainstSDK is the server side's differential fuzz (the client
// side's is mcpwire's FuzzReadAgainstSDK): for any message POSTed on an
// initialized session, with the headers a client may vary, the fast path
// in front of the go-sdk's handler answers what the go-sdk's handler alone
// answers (same status; same JSON-RPC messages, ids, results and errors).
// Run it for a while with
//
//	go test -run '^$' -fuzz FuzzServeAgainstSDK -fuzztime 10m ./proxy
func FuzzServeAgainstSDK(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"fleet_echo","arguments":{"fleet":"kb","text":"hi"},"_meta":{"progressToken":"t"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"nope"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fleet_whoami"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"fleet_nope","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":6.0,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`[{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}]`,
		`{"jsonrpc":"1.0","id":10,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}} x`,
		`{"jsonrpc":"2.0","id":12,"Method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"fleet_whoami","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"fleet_echo","arguments":{"fleet":"kb","text":7}}}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	fast, sdk := newDiffPair(f)
	headers := []map[string]string{
		nil,
		{"Accept": "application/json"},
		{"Accept": "text/event-stream"},
		{"Content-Type": "text/plain"},
		{"Mcp-Protocol-Version": "1999-01-01"},
		{"Mcp-Protocol-Version": "2026-07-28"},
		{"Mcp-Protocol-Version": "2025-03-26"},
		{"Mcp-Protocol-Version": ""},
		{"Mcp-Session-Id": "no-such-session"},
		{"Accept": "application/json;q=0.5, text/event-stream"},
	}
	f.Fuzz(func(t *testing.T, body []byte, hv uint8) {
		hdr := headers[int(hv)%len(headers)]
		h2 := hdr
		if sid, ok := hdr["Mcp-Session-Id"]; ok && sid != "" {
			h2 = hdr // the same unknown id on both sides
		}
		got := sayings(fast.post(string(body), hdr))
		want := sayings(sdk.post(string(body), h2))
		if got != want {
			t.Fatalf("for %q (headers %v)\nfast path answered:\n%s\nthe go-sdk answered:\n%s", body, hdr, got, want)
		}
	})
}

// idText is a message's id as text (a number in its shortest form).
func idText(id jsonrpc.ID) string {
	b, err := json.Marshal(id.Raw())
	if err != nil {
		return "?"
	}
	return compactID(b)
}
