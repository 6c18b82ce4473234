package mcpwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The differential fuzz target: the same bytes, sent by an upstream in
// answer to a POSTed tools/call, go through mcpwire (ResponseReader,
// CheckStatus, Reader, as the hot path reads them) and through the go-sdk's
// own client transport (mcp.StreamableClientTransport over net/http, served
// the bytes verbatim on a connection of its own); both must yield the same
// messages, in the same order, up to the call's response, and agree on
// whether that response came.

// callID is the id of the call both readers wait for.
const callID = "fleetmgr-call-1"

// wireMsg is one message as both readers report it.
type wireMsg struct {
	Request bool
	ID      any
	Method  string
	Params  string
	Result  string
	Err     string // code, message and data of a JSON-RPC error
}

func (m wireMsg) String() string { b, _ := json.Marshal(m); return string(b) }

// outcome is what a reader made of one answer.
type outcome struct {
	msgs     []wireMsg
	answered bool   // the call's response came (it is the last of msgs)
	tooLarge bool   // mcpwire refused a message over the cap
	jsonBody bool   // the body was application/json
	why      string // how it ended, for failure messages
}

func errString(e *jsonrpc.Error) string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("%d %q %s", e.Code, e.Message, e.Data)
}

// readOurs reads raw as the hot path does, fed in pieces of chunk bytes.
func readOurs(raw []byte, max, chunk int) outcome {
	rr := NewResponseReader(&chunkReader{b: raw, n: chunk}, 16<<10)
	resp, err := rr.ReadResponse()
	if err != nil {
		return outcome{why: "head: " + err.Error()}
	}
	defer resp.Body.Close()
	if err := CheckStatus(resp); err != nil {
		return outcome{why: "status: " + err.Error()}
	}
	r, err := NewReader(resp, max)
	if err != nil {
		return outcome{why: err.Error()}
	}
	defer r.Close()
	var o outcome
	o.jsonBody = r.kind == kindJSON
	for {
		m, err := r.Next()
		if err != nil {
			var tl *TooLargeError
			o.tooLarge = errors.As(err, &tl)
			o.why = "next: " + err.Error()
			return o
		}
		o.msgs = append(o.msgs, wireMsg{Request: m.IsRequest, ID: m.ID.Raw(), Method: m.Method,
			Params: string(m.Params), Result: string(m.Result), Err: errString(m.Error)})
		ours := m.IsResponseTo(callID)
		m.Release()
		if ours {
			o.answered, o.why = true, "answered"
			return o
		}
	}
}

// chunkReader returns b in reads of at most n bytes.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// ctRecorder records the Content-Type of the responses the SDK gets.
type ctRecorder struct {
	rt http.RoundTripper
	ct string
}

func (r *ctRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost {
		r.ct = resp.Header.Get("Content-Type")
	}
	return resp, err
}

// serveRaw answers the request read from c with raw (a POST) or an empty
// 405 (the DELETE of a session the SDK saw an id for), then closes c.
func serveRaw(c net.Conn, raw []byte) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	if req.Method != http.MethodPost {
		_, _ = c.Write([]byte("HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n"))
		return
	}
	_, _ = c.Write(raw)
}

// readSDK has the go-sdk's client transport POST the call and read raw as
// its answer. Its HTTP client keeps no connection alive and asks for no
// compression, as the hot path does not.
func readSDK(t *testing.T, raw []byte, max int) outcome {
	rec := &ctRecorder{}
	tr := &http.Transport{
		DisableKeepAlives:  true,
		DisableCompression: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			c1, c2 := net.Pipe()
			go serveRaw(c2, raw)
			return c1, nil
		},
	}
	defer tr.CloseIdleConnections()
	rec.rt = tr
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := (&mcp.StreamableClientTransport{Endpoint: "http://upstream.test/mcp", HTTPClient: &http.Client{Transport: rec},
		MaxRetries: -1, MaxEventSize: max}).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id, _ := jsonrpc.MakeID(callID)
	if err := conn.Write(ctx, &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"t"}`)}); err != nil {
		return outcome{why: "write: " + err.Error()}
	}
	var o outcome
	o.jsonBody = MediaType(rec.ct) == "application/json"
	for {
		msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the SDK's transport neither answered nor failed within 20 s")
			}
			o.why = "read: " + err.Error()
			return o
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			o.msgs = append(o.msgs, wireMsg{Request: true, ID: m.ID.Raw(), Method: m.Method, Params: string(m.Params)})
		case *jsonrpc.Response:
			var we *jsonrpc.Error
			if m.Error != nil && !errors.As(m.Error, &we) {
				// The transport's own "terminated without response".
				o.why = "ended: " + m.Error.Error()
				return o
			}
			o.msgs = append(o.msgs, wireMsg{ID: m.ID.Raw(), Result: string(m.Result), Err: errString(we)})
			if m.ID == id {
				o.answered, o.why = true, "answered"
				return o
			}
		}
		if o.jsonBody {
			// One message per JSON body; not the response: the SDK would
			// wait for ever.
			o.why = "json body without the response"
			return o
		}
	}
}

// FuzzReadAgainstSDK: raw is an upstream's whole HTTP/1.1 answer (status
// line, headers, body); capSel chooses the per-message cap (64 B to 64 KiB
// plus 63), chunk the size of the pieces it arrives in for mcpwire.
func FuzzReadAgainstSDK(f *testing.F) {
	for _, s := range diffSeeds() {
		f.Add(s.raw, s.capSel, s.chunk)
	}
	f.Fuzz(func(t *testing.T, raw []byte, capSel uint16, chunk uint8) {
		max := 64 + int(capSel)
		ours := readOurs(raw, max, 1+int(chunk))
		if ours.tooLarge && ours.jsonBody {
			return // the SDK reads JSON bodies without a cap
		}
		sdk := readSDK(t, raw, max)
		// Once the SDK's transport fails, its Read may report the failure
		// before messages it had already queued (it selects between the
		// two at random), so the messages it reports before a failure are
		// a prefix of what it read.
		same := ours.answered == sdk.answered && len(sdk.msgs) <= len(ours.msgs)
		if sdk.answered {
			same = same && len(sdk.msgs) == len(ours.msgs)
		}
		for i := 0; same && i < len(sdk.msgs); i++ {
			same = ours.msgs[i].String() == sdk.msgs[i].String()
		}
		if !same {
			t.Fatalf("the readers disagree on %q (cap %d):\nmcpwire: %v, %s\n%v\ngo-sdk:  %v, %s\n%v",
				raw, max, ours.answered, ours.why, ours.msgs, sdk.answered, sdk.why, sdk.msgs)
		}
	})
}

// diffSeed is one seed of FuzzReadAgainstSDK.
type diffSeed struct {
	raw    []byte
	capSel uint16
	chunk  uint8
}

// diffSeeds are answers as fleetd (go-sdk server) and other servers write
// them, and near misses.
func diffSeeds() []diffSeed {
	result := `{"jsonrpc":"2.0","id":"fleetmgr-call-1","result":{"content":[{"type":"text","text":"hi"}]}}`
	progress := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"fleetmgr-7","progress":1,"total":2,"message":"half"}}`
	chunked := func(body string, size int) string {
		var b strings.Builder
		for len(body) > 0 {
			n := min(size, len(body))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		b.WriteString("0\r\n\r\n")
		return b.String()
	}
	sse := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nMcp-Session-Id: S1\r\nTransfer-Encoding: chunked\r\n\r\n"
	js := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: S1\r\n"
	ev := func(data string, id int) string { return fmt.Sprintf("event: message\nid: %d\ndata: %s\n\n", id, data) }
	long := fmt.Sprintf(`{"jsonrpc":"2.0","id":"fleetmgr-call-1","result":{"content":[{"type":"text","text":%q}]}}`, strings.Repeat("x", 300))
	seeds := []string{
		sse + chunked(ev(progress, 1)+ev(result, 2), 4096),
		sse + chunked(ev(progress, 1)+ev(result, 2), 7),
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + ev(result, 1), // to the end of the connection
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nContent-Length: 20\r\n\r\n" + ev(result, 1),
		sse + chunked("id: 0\ndata:\n\n"+": comment\r\n"+"data: "+result[:40]+"\r\ndata: "+result[40:]+"\r\n\r\n", 64),
		sse + chunked("event: ping\ndata: {}\n\n"+"retry: 10\nid: 3\ndata:   "+result+"  \n", 4096), // no blank line at the end
		sse + chunked(ev(`{"jsonrpc":"2.0","id":5,"result":{}}`, 1)+ev(`{"jsonrpc":"2.0","id":"fleetmgr-call-1","error":{"code":-32602,"message":"bad","data":[1]}}`, 2), 4096),
		sse + chunked(ev(`{"jsonrpc":"2.0","id":"x","method":"sampling/createMessage","params":{}}`, 1)+ev(result, 2), 4096),
		sse + chunked("data: {\"jsonrpc\":\"2.0\"}\n\n", 4096),
		sse + chunked("this line has no colon\n\n"+ev(result, 1), 4096),
		sse + chunked(ev(long, 1), 4096),
		sse + chunked(ev(progress, 1), 4096), // ends without the result
		js + "Content-Length: " + fmt.Sprint(len(result)) + "\r\n\r\n" + result,
		js + "Transfer-Encoding: chunked\r\n\r\n" + chunked(result, 10),
		js + "\r\n" + result + "\n\n trailing",
		js + "Content-Length: " + fmt.Sprint(len(progress)) + "\r\n\r\n" + progress,
		js + "Content-Length: 5\r\n\r\n" + result, // short body
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(result)) + "\r\n\r\n" + result,
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		sse + chunked(ev(`{"jsonrpc":"2.0","ID":"fleetmgr-call-1","Result":{}}`, 1)+ev(`{"jsonrpc":"2.0","id":"fleetmgr-call-1","id":7,"result":1}`, 2)+ev(result, 3), 4096),
		sse + chunked(ev(`{"jsonrpc":"2.0","method":"","id":"fleetmgr-call-1"}`, 1)+ev(`{"jsonrpc":"2.0","id":1e400,"result":1}`, 2), 4096),
		sse + chunked("data: \u00a0"+result+"\u0085\n\n", 4096),
		sse + chunked(ev(result+"[[[[", 1), 4096),
	}
	out := make([]diffSeed, 0, 2*len(seeds))
	for i, s := range seeds {
		out = append(out, diffSeed{raw: []byte(s), capSel: 65000, chunk: uint8(i * 37)})
		out = append(out, diffSeed{raw: []byte(s), capSel: uint16(100 + i*13), chunk: 255})
	}
	return out
}

// TestDiffSeedsAnswered: the seeds that are well-formed answers are read
// as answered by both readers (the fuzz target alone would also pass if
// both readers failed on everything).
func TestDiffSeedsAnswered(t *testing.T) {
	answered := 0
	for _, s := range diffSeeds() {
		max := 64 + int(s.capSel)
		ours, sdk := readOurs(s.raw, max, 1+int(s.chunk)), readSDK(t, s.raw, max)
		if ours.answered != sdk.answered {
			t.Errorf("%q: mcpwire %v (%s), go-sdk %v (%s)", s.raw, ours.answered, ours.why, sdk.answered, sdk.why)
		}
		if ours.answered {
			answered++
		}
	}
	if answered < 20 {
		t.Errorf("only %d seeds answered", answered)
	}
	_ = bytes.MinRead
}
