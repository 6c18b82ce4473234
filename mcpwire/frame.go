package mcpwire

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
)

// Frame is one outgoing JSON-RPC message in pieces, written in order and
// never joined: a large result from an upstream goes out from the buffer
// it was read into, with the caller's id spliced in front of it.
type Frame struct {
	parts [3][]byte
}

// Len is the message's length in bytes.
func (f *Frame) Len() int { return len(f.parts[0]) + len(f.parts[1]) + len(f.parts[2]) }

// WriteTo writes the message to w (one writev where w is a connection).
func (f *Frame) WriteTo(w io.Writer) (int64, error) {
	bufs := net.Buffers{f.parts[0], f.parts[1], f.parts[2]}
	return bufs.WriteTo(w)
}

// Bytes returns the message joined (a copy).
func (f *Frame) Bytes() []byte {
	return bytes.Join(f.parts[:], nil)
}

// ResponseFrame is the JSON-RPC response {"jsonrpc":"2.0","id":id,key:raw}
// (key "result" or "error") on one line: id and raw, valid JSON both, are
// spliced in as they are, unless they hold a line break (JSON allows one
// only as white space), which would cut an SSE data line or a socket
// line; they are then compacted (a copy). Empty raw, or raw that is not
// valid JSON after all, is written as null.
func ResponseFrame(id json.RawMessage, key string, raw json.RawMessage) Frame {
	head := make([]byte, 0, 32+len(id)+len(key))
	head = append(head, `{"jsonrpc":"2.0","id":`...)
	head = append(head, oneLine(id)...)
	head = append(head, `,"`...)
	head = append(head, key...)
	head = append(head, `":`...)
	return Frame{parts: [3][]byte{head, oneLine(raw), closeBrace}}
}

var closeBrace = []byte{'}'}

// RawFrame is msg, one whole message on one line, as a frame.
func RawFrame(msg []byte) Frame { return Frame{parts: [3][]byte{msg}} }

// oneLine returns raw, or a compacted copy when it holds a line break;
// null for empty or invalid raw.
func oneLine(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return raw
	}
	var c bytes.Buffer
	c.Grow(len(raw))
	if json.Compact(&c, raw) != nil {
		return []byte("null")
	}
	return c.Bytes()
}

// sseHead and sseTail frame one message as a server-sent event of type
// "message" (what the go-sdk server writes, without an event id):
// EventStream.Message.
var (
	sseHead = []byte("event: message\ndata: ")
	sseTail = []byte("\n\n")
)

// WriteLine writes f as one line of newline-delimited JSON-RPC (MCP's
// stdio framing, fleetmgr's unix socket).
func WriteLine(w io.Writer, f *Frame) error {
	bufs := net.Buffers{f.parts[0], f.parts[1], f.parts[2], newline}
	_, err := bufs.WriteTo(w)
	return err
}
