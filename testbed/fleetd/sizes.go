package fleetd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fleet_echo_size is a test probe (not a tool of the real fleetd): it
// answers with a JSON-RPC message of a requested size and, when the caller
// gave a progress token, sends one progress notification of a requested
// size first, so tests can put messages exactly around a reader's buffers
// and caps. Sizes are those of the JSON-RPC message as the go-sdk server
// encodes it (the data of its SSE event, or the JSON body), which the
// stand-in computes with the SDK's own encoder (jsonrpc.EncodeMessage).
//
// The padding is Filler text: the result's only content is a text of
// Filler(n), and its _meta carries the text's length and SHA-256, so a
// client can check that what reached it is intact; a progress message is
// Filler(n) too.

// EchoSizeTool is the probe's tool name.
const EchoSizeTool = "fleet_echo_size"

// MaxEchoSize bounds the sizes fleet_echo_size accepts (128 MiB, twice
// fleetmgr's per-message cap, so tests can go over the cap).
const MaxEchoSize = 128 << 20

// headerRequestID carries the JSON-RPC id of a POST to the tool handler
// (set by the /mcp wrapper, client values removed), so fleet_echo_size can
// size its response message exactly.
const headerRequestID = "X-Fleetd-Standin-Request-Id"

// echoSizeInput is fleet_echo_size's input.
type echoSizeInput struct {
	Bytes         int `json:"bytes" jsonschema:"size in bytes of the JSON-RPC response message carrying the result"`
	ProgressBytes int `json:"progress_bytes,omitempty" jsonschema:"size in bytes of one progress notification message sent first (needs a progress token; 0: none)"`
}

// EchoSizeMeta is the _meta of fleet_echo_size's result.
type EchoSizeMeta struct {
	// TextBytes is the length of the result's text.
	TextBytes int `json:"text_bytes"`
	// TextSHA256 is the hex SHA-256 of the result's text.
	TextSHA256 string `json:"text_sha256"`
	// MessageBytes is the size of the JSON-RPC response message as sent.
	MessageBytes int `json:"message_bytes"`
}

// Filler returns n bytes of deterministic text in [a-z0-9] (no byte JSON
// escapes): a prefix of one fixed pseudo-random stream, so a block lost,
// repeated or moved changes it.
func Filler(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = alphabet[x%uint64(len(alphabet))]
	}
	return string(b)
}

// SHA256Hex is the hex SHA-256 of s.
func SHA256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// echoSizeSchema is fleet_echo_size's input schema.
var echoSizeSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"bytes":{"type":"integer","minimum":0,"description":"size in bytes of the JSON-RPC response message carrying the result"},` +
	`"progress_bytes":{"type":"integer","minimum":0,"description":"size in bytes of one progress notification message sent first (needs a progress token; 0: none)"}},` +
	`"required":["bytes"]}`)

// echoSize is fleet_echo_size's handler (a raw tool handler: its result is
// exactly the CallToolResult built here, no structured content added).
func (d *Daemon) echoSize(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	res, err := d.echoSizeResult(ctx, req)
	if err != nil {
		// A tool error, as mcp.AddTool makes of a typed handler's error.
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
	}
	return res, nil
}

func (d *Daemon) echoSizeResult(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in echoSizeInput
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return nil, fmt.Errorf("%s: %v", ErrInvalid, err)
	}
	if in.Bytes < 0 || in.Bytes > MaxEchoSize || in.ProgressBytes < 0 || in.ProgressBytes > MaxEchoSize {
		return nil, fmt.Errorf("%s: bytes and progress_bytes must be 0-%d", ErrInvalid, MaxEchoSize)
	}
	var id jsonrpc.ID
	if req.Extra != nil {
		if raw := req.Extra.Header.Get(headerRequestID); raw != "" {
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err == nil {
				id, _ = jsonrpc.MakeID(v)
			}
		}
	}
	if !id.IsValid() {
		return nil, fmt.Errorf("%s: the request's JSON-RPC id is unknown to the stand-in", ErrInvalid)
	}
	if in.ProgressBytes > 0 {
		if tok := req.Params.GetProgressToken(); tok != nil {
			msg, err := progressOfSize(tok, in.ProgressBytes)
			if err != nil {
				return nil, err
			}
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: msg}); err != nil {
				d.log.Printf("%s: progress: %v", EchoSizeTool, err)
			}
		}
	}
	res, err := resultOfSize(id, in.Bytes)
	if err != nil {
		return nil, err
	}
	d.log.Printf("%s: answering with a %d-byte message", EchoSizeTool, in.Bytes)
	return res, nil
}

// resultOfSize is the CallToolResult whose JSON-RPC response to id the
// go-sdk encodes in exactly n bytes.
func resultOfSize(id jsonrpc.ID, n int) (*mcp.CallToolResult, error) {
	build := func(text string) *mcp.CallToolResult {
		return &mcp.CallToolResult{
			Meta:    mcp.Meta{"echo_size": EchoSizeMeta{TextBytes: len(text), TextSHA256: SHA256Hex(text), MessageBytes: n}},
			Content: []mcp.Content{&mcp.TextContent{Text: text}},
		}
	}
	size := func(res *mcp.CallToolResult) (int, error) {
		raw, err := sdkJSON(res)
		if err != nil {
			return 0, err
		}
		msg, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: raw})
		return len(msg), err
	}
	// The text's length changes the _meta's digits (text_bytes) too:
	// settle it in a few rounds.
	pad := 0
	for range 4 {
		m, err := size(build(strings.Repeat("a", pad)))
		if err != nil {
			return nil, err
		}
		if m == n {
			return build(Filler(pad)), nil
		}
		if pad += n - m; pad < 0 {
			break
		}
	}
	return nil, fmt.Errorf("%s: no result fits in %d bytes", ErrInvalid, n)
}

// progressOfSize is the message text that makes the go-sdk encode the
// progress notification for tok in exactly n bytes.
func progressOfSize(tok any, n int) (string, error) {
	size := func(text string) (int, error) {
		raw, err := sdkJSON(&mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: text})
		if err != nil {
			return 0, err
		}
		msg, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: raw})
		return len(msg), err
	}
	m, err := size("a") // not "": an empty message is left out
	if err != nil {
		return "", err
	}
	if m > n {
		return "", fmt.Errorf("%s: no progress notification fits in %d bytes", ErrInvalid, n)
	}
	return Filler(n - m + 1), nil
}

// sdkJSON encodes v as the go-sdk encodes params and results (no HTML
// escaping, no trailing newline).
func sdkJSON(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// noteRequestID sets headerRequestID on a POST to /mcp from its body's
// JSON-RPC id (removing any value the client sent), leaving the body as it
// was for the MCP handler.
func noteRequestID(r *http.Request) {
	r.Header.Del(headerRequestID)
	if r.Method != http.MethodPost || r.Body == nil {
		return
	}
	orig := r.Body
	body, err := io.ReadAll(io.LimitReader(orig, 4<<20))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), orig), orig} // what was not read follows
	if err != nil {
		return
	}
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &msg) == nil && len(msg.ID) > 0 {
		r.Header.Set(headerRequestID, string(msg.ID))
	}
}
