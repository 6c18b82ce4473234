package mcpwire

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// filler is n bytes of text that JSON needs no escape for, varied enough
// that a piece lost, repeated or moved changes it.
func filler(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[x%36]
	}
	return string(b)
}

// messageOfSize is a JSON-RPC message of exactly n bytes (n ≥ 80): a
// response to callID, or a progress notification.
func messageOfSize(n int, progress bool) string {
	head, tail := `{"jsonrpc":"2.0","id":"`+callID+`","result":{"text":"`, `"}}`
	if progress {
		head, tail = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","message":"`, `"}}`
	}
	return head + filler(n-len(head)-len(tail)) + tail
}

// sseAnswer is an HTTP answer carrying msgs as SSE events (chunked when
// chunk > 0) and read back through a ResponseReader.
func answer(t *testing.T, contentType string, body string, chunk int) *http.Response {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n", contentType)
	if chunk > 0 {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for s := body; len(s) > 0; {
			n := min(chunk, len(s))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
			s = s[n:]
		}
		b.WriteString("0\r\n\r\n")
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	rr := NewResponseReader(strings.NewReader(b.String()), 16<<10)
	resp, err := rr.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// TestReaderSizes: messages of sizes around the scanner's buffer (16 KiB),
// the pooled buffer (64 KiB), and well past them (1 MiB, 10 MiB) come
// through intact, as SSE events (data lines cut anywhere by the chunking)
// and as JSON bodies, progress first.
func TestReaderSizes(t *testing.T) {
	sizes := []int{100, sseBufferSize - 1, sseBufferSize, sseBufferSize + 1, smallCap - 1, smallCap, smallCap + 1, 1 << 20, 10 << 20}
	for _, n := range sizes {
		res, prog := messageOfSize(n, false), messageOfSize(n, true)
		for _, chunk := range []int{0, 1000, 65536} {
			t.Run(fmt.Sprintf("sse/%d/chunk%d", n, chunk), func(t *testing.T) {
				body := "event: message\nid: 1\ndata: " + prog + "\n\nevent: message\nid: 2\ndata: " + res + "\n\n"
				r, err := NewReader(answer(t, "text/event-stream", body, chunk), 64<<20)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				for i, want := range []string{prog, res} {
					m, err := r.Next()
					if err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if sum(m.Data) != sum([]byte(want)) || m.IsRequest != (i == 0) || (i == 1) != m.IsResponseTo(callID) {
						t.Fatalf("message %d: %d bytes, request %v, want %d bytes", i, len(m.Data), m.IsRequest, len(want))
					}
					if i == 1 && !bytes.Equal(m.Result, []byte(res[strings.Index(res, `"result":`)+9:len(res)-1])) {
						t.Fatalf("result is not the message's own")
					}
					m.Release()
				}
				if _, err := r.Next(); err != io.EOF {
					t.Fatalf("after the last message: %v, want EOF", err)
				}
			})
		}
		for _, chunk := range []int{0, 4096} {
			t.Run(fmt.Sprintf("json/%d/chunk%d", n, chunk), func(t *testing.T) {
				r, err := NewReader(answer(t, "application/json", res, chunk), 64<<20)
				if err != nil {
					t.Fatal(err)
				}
				m, err := r.Next()
				if err != nil || sum(m.Data) != sum([]byte(res)) || !m.IsResponseTo(callID) {
					t.Fatalf("%v", err)
				}
				m.Release()
				if _, err := r.Next(); err != io.EOF {
					t.Fatalf("after the message: %v, want EOF", err)
				}
			})
		}
	}
}

// TestReaderCap: an event whose lines take exactly the cap is read, one
// byte more is a *TooLargeError (as the go-sdk's MaxEventSize counts); a
// JSON body of the cap is read, one byte more refused, with or without a
// Content-Length.
func TestReaderCap(t *testing.T) {
	const max = 100 << 10
	for _, over := range []int{0, 1} {
		// "data: " + msg + "\n" + "\n" is the event's bytes.
		msg := messageOfSize(max-8+over, false)
		r, _ := NewReader(answer(t, "text/event-stream", "data: "+msg+"\n\n", 7777), max)
		m, err := r.Next()
		var tl *TooLargeError
		if over == 0 && (err != nil || !m.IsResponseTo(callID)) || over == 1 && (!errors.As(err, &tl) || tl.Max != max) {
			t.Errorf("SSE event of cap+%d: %v", over, err)
		}
		m.Release()
		r.Close()
		for _, chunk := range []int{0, 5000} {
			body := messageOfSize(max+over, false)
			r, _ := NewReader(answer(t, "application/json", body, chunk), max)
			m, err := r.Next()
			if over == 0 && (err != nil || !m.IsResponseTo(callID)) || over == 1 && !errors.As(err, &tl) {
				t.Errorf("JSON body of cap+%d (chunk %d): %v", over, chunk, err)
			}
			m.Release()
		}
	}
	if s := (&TooLargeError{Max: 64 << 20}).Error(); !strings.Contains(s, "64 MiB") {
		t.Errorf("error %q does not name the cap", s)
	}
}

// TestReaderRefusals: what the go-sdk's client refuses is refused.
func TestReaderRefusals(t *testing.T) {
	for _, c := range []struct{ ct, body string }{
		{"text/event-stream", "no colon here\n\n"},
		{"text/event-stream", "data: {\"jsonrpc\":\"1.0\",\"id\":\"x\",\"result\":1}\n\n"},
		{"text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"result\":1}\n\n"},
		{"text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":true,\"result\":1}\n\n"},
		{"text/event-stream", "data: " + strings.Repeat("[", 1001) + "\n\n"},
		{"application/json", "{"},
	} {
		r, err := NewReader(answer(t, c.ct, c.body, 0), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := r.Next(); err == nil || err == io.EOF {
			t.Errorf("%q: %v %v, want an error", c.body, m, err)
		}
		r.Close()
	}
	if _, err := NewReader(answer(t, "text/plain", "x", 0), 100); err == nil {
		t.Error("text/plain accepted")
	}
}

// TestResponseReaderInterimAndHeadCap: 1xx heads are skipped, a head over
// MaxHeaderBytes is refused.
func TestResponseReaderInterimAndHeadCap(t *testing.T) {
	rr := NewResponseReader(strings.NewReader("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), 4096)
	if resp, err := rr.ReadResponse(); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	huge := "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Big: "+strings.Repeat("a", 1000)+"\r\n", MaxHeaderBytes/1000+10) + "\r\n"
	rr = NewResponseReader(strings.NewReader(huge), 4096)
	if _, err := rr.ReadResponse(); err == nil || !strings.Contains(err.Error(), "10 MiB") {
		t.Fatalf("a head over 10 MiB: %v", err)
	}
}

// TestCheckStatus: 2xx passes, 404 is ErrSessionNotFound, anything else a
// StatusError with the start of the body.
func TestCheckStatus(t *testing.T) {
	for _, c := range []struct {
		head string
		want string
	}{
		{"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", ""},
		{"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", ErrSessionNotFound.Error()},
		{"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom", "HTTP 500 Internal Server Error: boom"},
	} {
		resp, err := NewResponseReader(strings.NewReader(c.head), 4096).ReadResponse()
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := CheckStatus(resp); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.head, got, c.want)
		}
	}
}

// TestResponseFrame: the caller's id is spliced in front of the raw
// result, which is passed as it is (not copied) unless it holds a line
// break; the frame is one valid JSON line as an event, a line, a body.
func TestResponseFrame(t *testing.T) {
	raw := json.RawMessage(`{"content":[{"type":"text","text":"a\nb"}]}`)
	f := ResponseFrame(json.RawMessage(`"c-1"`), "result", raw)
	if &f.parts[1][0] != &raw[0] {
		t.Error("the result was copied")
	}
	if got := string(f.Bytes()); got != `{"jsonrpc":"2.0","id":"c-1","result":`+string(raw)+`}` || f.Len() != len(got) {
		t.Errorf("frame %s", got)
	}
	spread := ResponseFrame(json.RawMessage("7"), "result", json.RawMessage("{\n \"a\" :\r\n 1 }"))
	if got := string(spread.Bytes()); got != `{"jsonrpc":"2.0","id":7,"result":{"a":1}}` {
		t.Errorf("compacted frame %s", got)
	}
	var line, body bytes.Buffer
	rec := httptest.NewRecorder()
	es := NewEventStream(rec, 0)
	if err := es.Message(&f); err != nil || rec.Body.String() != "event: message\ndata: "+string(f.Bytes())+"\n\n" ||
		rec.Header().Get("Content-Type") != "text/event-stream" || rec.Code != 200 {
		t.Errorf("event %d %v %q %v", rec.Code, rec.Header(), rec.Body.String(), err)
	}
	es.Close()
	if err := es.Message(&f); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("a message after Close: %v, want ErrStreamClosed", err)
	}
	if err := WriteLine(&line, &f); err != nil || line.String() != string(f.Bytes())+"\n" {
		t.Errorf("line %q %v", line.String(), err)
	}
	if n, err := f.WriteTo(&body); err != nil || int(n) != f.Len() || !json.Valid(body.Bytes()) {
		t.Errorf("body %q %v", body.String(), err)
	}
}

// TestBufferGrowth: a buffer moves from the pooled Go buffer to a mapping
// and grows without losing content; release unmaps it.
func TestBufferGrowth(t *testing.T) {
	b := newBuffer()
	want := []byte(filler(3<<20 + 17))
	for p := want; len(p) > 0; {
		n := min(len(p), 50000)
		b.appendBytes(p[:n])
		p = p[n:]
	}
	if b.mapped == nil || !bytes.Equal(b.bytes(), want) {
		t.Fatalf("mapped %v, content equal %v", b.mapped != nil, bytes.Equal(b.bytes(), want))
	}
	b.release()
	if b.mapped != nil || b.bytes() != nil {
		t.Fatal("release kept the mapping")
	}
	b.release() // twice: nothing
}

// FuzzDecode: Decode accepts what jsonrpc.DecodeMessage accepts and
// decodes it to the same message.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"fleetmgr-call-1","result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":1.9,"error":{"code":-32602,"message":"bad","data":{"x":1}}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}`,
		`{"jsonrpc":"2.0","method":null,"id":"x"}`,
		`{"jsonrpc":"2.0","Method":"x","ID":1,"result":null} trailing`,
		` {"jsonrpc":"2\u002e0","id":"a","result":"\ud800"}`,
		`{"jsonrpc":"2.0","id":[1],"result":1}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1.5}}`,
		`[[[[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ours, oerr := Decode(data)
		sdk, serr := jsonrpc.DecodeMessage(data)
		if (oerr == nil) != (serr == nil) {
			t.Fatalf("%q: mcpwire %v, go-sdk %v", data, oerr, serr)
		}
		if oerr != nil {
			return
		}
		var got, want wireMsg
		got = wireMsg{Request: ours.IsRequest, ID: ours.ID.Raw(), Method: ours.Method, Params: string(ours.Params), Result: string(ours.Result), Err: errString(ours.Error)}
		switch m := sdk.(type) {
		case *jsonrpc.Request:
			want = wireMsg{Request: true, ID: m.ID.Raw(), Method: m.Method, Params: string(m.Params)}
		case *jsonrpc.Response:
			var we *jsonrpc.Error
			errors.As(m.Error, &we)
			want = wireMsg{ID: m.ID.Raw(), Result: string(m.Result), Err: errString(we)}
		}
		if got.String() != want.String() {
			t.Fatalf("%q:\nmcpwire %v\ngo-sdk  %v", data, got, want)
		}
	})
}
