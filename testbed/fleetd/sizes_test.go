package fleetd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawPost POSTs body on session sid and returns the answer's Content-Type
// and the JSON-RPC messages in it: the JSON body, or the data of each SSE
// event, as read off the wire.
func rawPost(t *testing.T, url, sid, version, body string) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+MCPPath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
	if strings.HasPrefix(ct, "application/json") {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return ct, []string{string(b)}
	}
	var msgs []string
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			msgs = append(msgs, strings.TrimSuffix(d, "\n"))
			if strings.Contains(d, `"result"`) {
				return ct, msgs
			}
		}
		if err != nil {
			return ct, msgs
		}
	}
}

// TestEchoSizeExact: fleet_echo_size's response message and progress
// notification are exactly the requested sizes on the wire, as SSE event
// data and as a JSON body, and carry the filler text.
func TestEchoSizeExact(t *testing.T) {
	for _, jsonMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonMode), func(t *testing.T) {
			cfg := noHerdr(t)
			cfg.LeadLaunch = false
			cfg.JSONResponse = jsonMode
			r := startDaemon(t, cfg)
			cs := connect(t, r.url, nil, nil)
			sid, version := cs.ID(), cs.InitializeResult().ProtocolVersion
			for i, n := range []int{400, 16<<10 - 1, 16 << 10, 16<<10 + 1, 1 << 20} {
				id := fmt.Sprintf(`"echo-%d"`, i)
				if i%2 == 1 {
					id = fmt.Sprint(1000 + i) // numeric ids too
				}
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":{"bytes":%d,"progress_bytes":%d},"_meta":{"progressToken":"tok-%d"}}}`,
					id, EchoSizeTool, n, n, i)
				ct, msgs := rawPost(t, r.url, sid, version, body)
				if jsonMode != strings.HasPrefix(ct, "application/json") {
					t.Fatalf("json=%v but Content-Type %q", jsonMode, ct)
				}
				want := 2 // progress, then the response
				if jsonMode {
					want = 1 // progress goes out on the GET stream
				}
				if len(msgs) != want {
					t.Fatalf("size %d: %d messages, want %d", n, len(msgs), want)
				}
				for _, m := range msgs {
					if len(m) != n {
						t.Errorf("size %d: message of %d bytes: %.120s…%s", n, len(m), m, m[max(0, len(m)-150):])
					}
				}
				if !jsonMode {
					var prog struct {
						Method string                         `json:"method"`
						Params mcp.ProgressNotificationParams `json:"params"`
					}
					if err := json.Unmarshal([]byte(msgs[0]), &prog); err != nil || prog.Method != "notifications/progress" ||
						prog.Params.Message != Filler(len(prog.Params.Message)) {
						t.Errorf("size %d: progress %.200s: %v", n, msgs[0], err)
					}
				}
				var resp struct {
					Result struct {
						Meta    map[string]EchoSizeMeta `json:"_meta"`
						Content []struct{ Text string } `json:"content"`
					} `json:"result"`
				}
				if err := json.Unmarshal([]byte(msgs[len(msgs)-1]), &resp); err != nil || len(resp.Result.Content) != 1 {
					t.Fatalf("size %d: response %.200s: %v", n, msgs[len(msgs)-1], err)
				}
				text, meta := resp.Result.Content[0].Text, resp.Result.Meta["echo_size"]
				if text != Filler(len(text)) || meta.TextBytes != len(text) || meta.TextSHA256 != SHA256Hex(text) || meta.MessageBytes != n {
					t.Errorf("size %d: text of %d bytes, meta %+v", n, len(text), meta)
				}
			}
		})
	}
}

// TestEchoSizeRefusals: sizes out of range and sizes too small for any
// message are tool errors.
func TestEchoSizeRefusals(t *testing.T) {
	cfg := noHerdr(t)
	cfg.LeadLaunch = false
	r := startDaemon(t, cfg)
	cs := connect(t, r.url, nil, nil)
	for _, args := range []map[string]any{{"bytes": 10}, {"bytes": -1}, {"bytes": MaxEchoSize + 1}, {"bytes": 100, "progress_bytes": MaxEchoSize + 1}} {
		if e := errText(call(t, cs, EchoSizeTool, args, nil)); !strings.HasPrefix(e, ErrInvalid) {
			t.Errorf("%v: %q, want an %s tool error", args, e, ErrInvalid)
		}
	}
}
