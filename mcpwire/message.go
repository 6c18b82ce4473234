package mcpwire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sjson "github.com/segmentio/encoding/json"
)

// Message is one JSON-RPC message read from an upstream, decoded as the
// go-sdk decodes it (jsonrpc.DecodeMessage): a request or notification
// when the "method" key is present (even as ""), else a response.
//
// Params, Result and Data are the message's own bytes, not copies: they
// stay valid until Release.
type Message struct {
	// ID is the message's id (not IsValid for a notification).
	ID jsonrpc.ID
	// Method is the method of a request or notification.
	Method string
	// IsRequest is true for a request or notification ("method" present).
	IsRequest bool
	// Params are a request's params as sent (nil when absent).
	Params json.RawMessage
	// Result is a response's result as sent (nil when absent).
	Result json.RawMessage
	// Error is a response's error (nil when absent).
	Error *jsonrpc.Error
	// Data is the whole message as read (a JSON body, or the joined data
	// of an SSE event), trailing bytes included.
	Data []byte

	buf *buffer // owns Data, Params and Result; nil when the caller owns them
}

// IsResponseTo reports whether m is a response whose id is the string id.
func (m *Message) IsResponseTo(id string) bool {
	want, _ := jsonrpc.MakeID(id)
	return !m.IsRequest && m.ID == want
}

// Release gives the message's buffer back; its Data, Params and Result
// must not be used afterwards. Release on a nil message, or twice, does
// nothing.
func (m *Message) Release() {
	if m == nil || m.buf == nil {
		return
	}
	m.buf.release()
	m.buf = nil
	m.Data, m.Params, m.Result = nil, nil, nil
}

// wireMessage is the go-sdk's decoding form of a message (its jsonrpc2
// wireDecode): Method raw, so that a present "method" is told from an
// absent one.
type wireMessage struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id,omitempty"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *jsonrpc.Error  `json:"error,omitempty"`
}

// maxDepth is the nesting the go-sdk's decoder accepts (its internal/json
// defaultMaxDepth).
const maxDepth = 1000

// errTooDeep is Decode's error for data nested deeper than maxDepth.
var errTooDeep = fmt.Errorf("json: exceeded maximum nesting depth of %d", maxDepth)

// errMissingID is Decode's error for a response without an id (the
// go-sdk's jsonrpc2.ErrInvalidRequest).
var errMissingID = errors.New("JSON RPC invalid request: response without an id")

// Decode decodes data, one JSON-RPC message, without copying it: the
// message's Params and Result are slices of data. It accepts and refuses
// exactly what jsonrpc.DecodeMessage (go-sdk v1.8.0) does, with the same
// decoder (segmentio/encoding, object keys matched case-sensitively, the
// last of duplicate keys winning, anything after the first JSON value
// ignored, nesting bounded by 1000 over all of data) and the same rules:
// "jsonrpc" must be "2.0", an id is a string or a number (read as a
// float64, kept as an int64), a message with "method" is a request, any
// other needs an id. FuzzDecode and FuzzReadAgainstSDK hold it to that.
func Decode(data []byte) (*Message, error) {
	if err := checkDepth(data); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	var w wireMessage
	if _, err := sjson.Parse(data, &w, sjson.DontMatchCaseInsensitiveStructFields|sjson.DontCopyRawMessage); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if w.VersionTag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", w.VersionTag, "2.0")
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, err
	}
	m := &Message{ID: id, Params: w.Params, Data: data}
	if len(w.Method) > 0 {
		if _, err := sjson.Parse(w.Method, &m.Method, sjson.DontMatchCaseInsensitiveStructFields); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		m.IsRequest = true
		return m, nil
	}
	if !id.IsValid() {
		return nil, errMissingID
	}
	m.Params = nil
	m.Result, m.Error = w.Result, w.Error
	return m, nil
}

// checkDepth fails when data nests objects and arrays deeper than
// maxDepth, counting brackets outside strings over all of data (the
// go-sdk's check, run before it decodes).
func checkDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return errTooDeep
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
