package proxy

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzFastMessage: whatever arrives, decodeMessage never panics, and for
// any message the fast path would answer (a valid id), the response it
// builds around any valid result is one line of valid JSON whose id is
// the caller's id.
func FuzzFastMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fleet_whoami","arguments":{"fleet":"kb"}}}`,
		`{"jsonrpc":"2.0","id":"a\u2028b","method":"tools/call","params":{"name":"x","_meta":{"progressToken":"t"}}}`,
		`{"jsonrpc":"2.0","id":  -0.5e3 ,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1"}}`,
		`[{"jsonrpc":"2.0","id":1}]`,
		`{"Method":"tools/call","METHOD":"x"}`,
		`{"id":{},"method":1}`,
	} {
		f.Add([]byte(s), []byte(`{"content":[{"type":"text","text":"hi\n"}]}`))
	}
	f.Fuzz(func(t *testing.T, msg, result []byte) {
		var m fastMessage
		if decodeMessage(msg, &m) != nil || !validID(m.ID) || !json.Valid(result) {
			return
		}
		f := encodeResponse(m.ID, "result", json.RawMessage(result))
		resp := f.Bytes()
		if bytes.ContainsAny(resp, "\r\n") {
			t.Fatalf("response spans lines: %q", resp)
		}
		var back struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(resp, &back); err != nil {
			t.Fatalf("response is not JSON: %q: %v", resp, err)
		}
		if compactID(back.ID) != compactID(m.ID) {
			t.Fatalf("id %s came back as %s", m.ID, back.ID)
		}
	})
}
