package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

func answer(ct, body string) *http.Response {
	return &http.Response{Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body))}
}

func TestReadAnswer(t *testing.T) {
	sse := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1,\"total\":2}}\n\n" +
		": a comment\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":\"other\",\"result\":{}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\n" + // one message over two data lines
		"data:  \"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":2,\"total\":2}}\r\n\r\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":\"fleetmgr-call-7\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n"
	var got []float64
	m, err := readAnswer(answer("text/event-stream", sse), "fleetmgr-call-7", func(p *mcp.ProgressNotificationParams) { got = append(got, p.Progress) })
	if err != nil || m == nil || !strings.Contains(string(m.Result), `"ok"`) {
		t.Fatalf("sse: %v %+v", err, m)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("progress seen %v, want [1 2] before the result", got)
	}

	m, err = readAnswer(answer("application/json; charset=utf-8", `{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"bad"}}`), "x", nil)
	if err != nil || m.Error == nil || m.Error.Code != -32602 {
		t.Fatalf("json error answer: %v %+v", err, m)
	}

	if _, err := readAnswer(answer("text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n"), "x", nil); err == nil ||
		!strings.Contains(err.Error(), "ended before the call's response") {
		t.Fatalf("truncated stream: %v", err)
	}
	if _, err := readAnswer(answer("text/html", "<html>"), "x", nil); err == nil {
		t.Fatal("text/html accepted")
	}
}

// TestEncodeCallAndResponse: the hand-built messages are the JSON they
// claim (equal to what encoding/json makes of the same values), and a
// line break in spliced raw JSON never reaches an SSE data line or a
// socket line.
func TestEncodeCallAndResponse(t *testing.T) {
	b, err := encodeCall("fleetmgr-call-7", `odd "name"`, json.RawMessage(`{"q":"a\"b"}`), map[string]any{"k": []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("encodeCall made invalid JSON %s: %v", b, err)
	}
	_ = json.Unmarshal([]byte(`{"jsonrpc":"2.0","id":"fleetmgr-call-7","method":"tools/call",
		"params":{"name":"odd \"name\"","arguments":{"q":"a\"b"},"_meta":{"k":[1]}}}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("encodeCall: %s", b)
	}
	if b, _ := encodeCall("x", "t", nil, nil); string(b) != `{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"t"}}` {
		t.Fatalf("without arguments and _meta: %s", b)
	}

	for _, c := range []struct {
		id   string
		key  string
		v    any
		want string
	}{
		{`7`, "result", json.RawMessage(`{"content":[]}`), `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`},
		{`"a"`, "result", json.RawMessage("{\n  \"x\": 1\n}"), `{"jsonrpc":"2.0","id":"a","result":{"x":1}}`},
		{`1`, "error", &jsonrpc.Error{Code: -32602, Message: "bad"}, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}`},
		{`1`, "result", func() {}, `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"json: unsupported type: func()"}}`},
	} {
		f := encodeResponse(json.RawMessage(c.id), c.key, c.v)
		got := string(f.Bytes())
		if got != c.want {
			t.Errorf("encodeResponse(%s, %s): %s, want %s", c.id, c.key, got, c.want)
		}
		if strings.ContainsAny(got, "\r\n") || !json.Valid([]byte(got)) {
			t.Errorf("not one line of JSON: %q", got)
		}
	}
}

// endless is an io.Reader of a JSON string that never ends: `{"x":"aaaa…`.
type endless struct{ started bool }

func (e *endless) Read(p []byte) (int, error) {
	n := 0
	if !e.started {
		e.started = true
		n = copy(p, `{"x":"`)
	}
	for i := n; i < len(p); i++ {
		p[i] = 'a'
	}
	return len(p), nil
}

// TestReadAnswerIsBounded: an upstream message larger than maxAnswer (a
// JSON body, or one event of a stream) fails the call instead of growing
// the daemon; a stream's bound is per message.
func TestReadAnswerIsBounded(t *testing.T) {
	for _, ct := range []string{"application/json", "text/event-stream"} {
		body := io.Reader(&endless{})
		if ct == "text/event-stream" {
			body = io.MultiReader(strings.NewReader("data: "), body)
		}
		resp := &http.Response{Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(body)}
		var tl *mcpwire.TooLargeError
		if _, err := readAnswer(resp, "1", nil); !errors.As(err, &tl) || tl.Max != maxAnswer {
			t.Errorf("%s without end: %v, want a TooLargeError", ct, err)
		}
	}
	// Many events whose sum exceeds the bound are fine.
	progress := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1,\"note\":\"" + strings.Repeat("b", 1<<20) + "\"}}\n\n"
	var sb strings.Builder
	for range maxAnswer>>20 + 2 {
		sb.WriteString(progress)
	}
	sb.WriteString("data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n\n")
	m, err := readAnswer(answer("text/event-stream", sb.String()), "1", nil)
	if err != nil || string(m.Result) != "{}" {
		t.Fatalf("a long stream of small events: %v", err)
	}
}

// TestCompactID: ids that name the same call are one key.
func TestCompactID(t *testing.T) {
	for _, c := range [][2]string{{"1", "1.0"}, {"1", "1e0"}, {"-2", "-2.00"}, {`"a"`, `"a"`}} {
		if compactID(json.RawMessage(c[0])) != compactID(json.RawMessage(c[1])) {
			t.Errorf("%s and %s are different keys", c[0], c[1])
		}
	}
	if compactID(json.RawMessage(`"1"`)) == compactID(json.RawMessage(`1`)) {
		t.Error(`"1" and 1 are one key`)
	}
}
