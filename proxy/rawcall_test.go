package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
		!strings.Contains(err.Error(), "ended before the result") {
		t.Fatalf("truncated stream: %v", err)
	}
	if _, err := readAnswer(answer("text/html", "<html>"), "x", nil); err == nil {
		t.Fatal("text/html accepted")
	}
}
