package mcpwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
)

// TooLargeError is the error for a message over a Reader's cap.
type TooLargeError struct {
	// Max is the cap in bytes.
	Max int
}

// Error implements error.
func (e *TooLargeError) Error() string {
	return "a message from the upstream is larger than the cap of " + FormatSize(e.Max) + " on one message"
}

// FormatSize gives n bytes as "64 MiB", "16 KiB" or "1000 bytes".
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Body kinds.
const (
	kindJSON = iota + 1
	kindSSE
)

// sseBufferSize is the size of the buffered reader an event stream is
// scanned through: lines longer than it arrive in pieces.
const sseBufferSize = 16 << 10

var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, sseBufferSize) }}

// Reader reads the JSON-RPC messages of one response body of an MCP
// streamable-HTTP POST, in order: an application/json body is one message,
// a text/event-stream body one message per event that carries data and is
// named "message" or not named (other events, such as a priming event with
// only an id, are skipped). Each message is read into one buffer of its
// own and decoded in place (see Decode); the caller releases it.
//
// The cap applies to what is read for one message: a JSON body's length,
// or an SSE event's lines with their line ends (what the go-sdk client's
// MaxEventSize counts). Past it, Next fails with a *TooLargeError, having
// held at most the cap in memory.
//
// Events are scanned as the go-sdk client (v1.8.0) scans them: lines end
// at '\n' (any '\r' before it is dropped); an empty line ends an event, as
// does the end of the body; a line without ':' is an error; "data" lines'
// values, trimmed of white space, are joined with '\n'; the "event"
// line's value, trimmed, names the event; other fields and comments are
// read and ignored. FuzzReadAgainstSDK holds Reader to the go-sdk's
// client transport.
type Reader struct {
	kind   int
	body   io.Reader
	length int64 // Content-Length of a JSON body; -1 unknown
	max    int
	br     *bufio.Reader // SSE only; from sseReaders
	done   bool
	err    error
}

// NewReader returns a Reader of resp's body (not closed by the Reader),
// capping each message at max bytes (max ≥ 1). A Content-Type other than
// application/json or text/event-stream is an error.
func NewReader(resp *http.Response, max int) (*Reader, error) {
	r := &Reader{body: resp.Body, length: resp.ContentLength, max: max}
	switch ct := MediaType(resp.Header.Get("Content-Type")); ct {
	case "application/json":
		r.kind = kindJSON
	case "text/event-stream":
		r.kind = kindSSE
		r.br = sseReaders.Get().(*bufio.Reader)
		r.br.Reset(resp.Body)
	default:
		return nil, fmt.Errorf("unsupported content type %q", resp.Header.Get("Content-Type"))
	}
	return r, nil
}

// Close lets go of the Reader's own buffers (not of messages returned, nor
// of the body). Next must not be called afterwards.
func (r *Reader) Close() {
	if r.br != nil {
		r.br.Reset(nil)
		sseReaders.Put(r.br)
		r.br = nil
	}
	r.done = true
	if r.err == nil {
		r.err = errors.New("mcpwire: Reader closed")
	}
}

// Next returns the next message; io.EOF when the body ended cleanly after
// the last one. Any other error is final: the body is broken or lies
// (read error, message over the cap, a malformed event, data that is not
// a JSON-RPC message).
func (r *Reader) Next() (*Message, error) {
	if r.done {
		return nil, r.err
	}
	var m *Message
	var err error
	if r.kind == kindJSON {
		m, err = r.readJSON()
		r.done, r.err = true, io.EOF
	} else {
		m, err = r.readEvent()
	}
	if err != nil {
		r.done, r.err = true, err
	}
	return m, err
}

// readJSON reads the whole body as one message.
func (r *Reader) readJSON() (*Message, error) {
	if r.length > int64(r.max) {
		return nil, &TooLargeError{Max: r.max}
	}
	b := newBuffer()
	if r.length >= 0 {
		b.reserve(int(r.length) + 1) // +1: the end is seen without growing
	}
	for {
		free := b.reserve(1) // all the free space, growing when there is none
		n, err := r.body.Read(free[:min(len(free), r.max+1-len(b.bytes()))])
		b.grow(n)
		if len(b.bytes()) > r.max {
			b.release()
			return nil, &TooLargeError{Max: r.max}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			b.release()
			return nil, err
		}
	}
	return decodeOwned(b)
}

// decodeOwned decodes b's content into a message that owns b.
func decodeOwned(b *buffer) (*Message, error) {
	m, err := Decode(b.bytes())
	if err != nil {
		b.release()
		return nil, err
	}
	m.buf = b
	return m, nil
}

// errMalformedLine is the error for an event-stream line without a ':'.
type errMalformedLine struct{ line string }

func (e errMalformedLine) Error() string {
	return fmt.Sprintf("malformed line in SSE stream: %q", e.line)
}

// Field kinds of an event-stream line.
const (
	fieldUnknown = iota // no ':' seen yet
	fieldData
	fieldEvent
	fieldOther // id, retry, a comment, an unknown field: ignored
)

// readEvent scans events until one that carries a message, and decodes
// it; io.EOF at the end of the stream.
func (r *Reader) readEvent() (*Message, error) {
	var (
		data       *buffer // the event's joined data; nil: no data line yet
		name       []byte  // the event's "event" value, untrimmed
		named      bool
		eventBytes int
	)
	defer func() {
		if data != nil {
			data.release()
		}
	}()
	for {
		// One line, in pieces of at most sseBufferSize.
		var (
			field     = fieldUnknown
			lineBytes int
			valStart  int  // data: where this line's value starts in data
			leading   bool // data: still skipping the value's leading white space
			blank     = true
			lineErr   error
			head      []byte // the start of a line without ':' so far, for the error
		)
		for {
			frag, err := r.br.ReadSlice('\n')
			if eventBytes+lineBytes+len(frag) > r.max {
				return nil, &TooLargeError{Max: r.max}
			}
			first := lineBytes == 0
			lineBytes += len(frag)
			if blank && !onlyLineEnds(frag) {
				blank = false
			}
			rest := frag
			if field == fieldUnknown {
				if i := bytes.IndexByte(frag, ':'); i >= 0 {
					rest = frag[i+1:]
					switch {
					case first && string(frag[:i]) == "data":
						field = fieldData
						if data == nil {
							data = newBuffer()
						} else {
							data.appendBytes(newline)
						}
						valStart, leading = len(data.bytes()), true
					case first && string(frag[:i]) == "event":
						field = fieldEvent
						name, named = name[:0], true
					default:
						field = fieldOther
					}
				} else if first && !blank {
					head = bytes.Clone(frag[:min(len(frag), 200)])
				}
			}
			switch field {
			case fieldData:
				if leading {
					i := 0
					for i < len(rest) && isASCIISpace(rest[i]) {
						i++
					}
					rest = rest[i:]
					leading = len(rest) == 0
				}
				data.appendBytes(rest)
			case fieldEvent:
				name = append(name, rest...) // bounded by the cap, like the rest of the event
			}
			if err != bufio.ErrBufferFull {
				lineErr = err
				break
			}
		}
		if lineErr != nil && lineErr != io.EOF {
			return nil, lineErr
		}
		eventBytes += lineBytes
		eof := lineErr == io.EOF
		switch {
		case blank:
			// The event ends.
		case field == fieldUnknown:
			return nil, errMalformedLine{strings.TrimRight(string(head), "\r\n")}
		case field == fieldData:
			trimValue(data, valStart)
		}
		if blank || eof {
			if data != nil && len(data.bytes()) > 0 && (!named || isMessageName(name)) {
				d := data
				data = nil
				return decodeOwned(d)
			}
			if data != nil {
				data.release()
			}
			data, name, named, eventBytes = nil, name[:0], false, 0
			if eof {
				return nil, io.EOF
			}
		}
	}
}

// newline joins data lines.
var newline = []byte{'\n'}

// onlyLineEnds reports whether p holds nothing but '\r' and '\n' (a line
// of them is empty once its line end is trimmed).
func onlyLineEnds(p []byte) bool {
	for _, c := range p {
		if c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// isMessageName reports whether an "event" value names a message event:
// "message" or nothing, once trimmed of white space.
func isMessageName(v []byte) bool {
	t := bytes.TrimSpace(v)
	return len(t) == 0 || string(t) == "message"
}

// trimValue trims white space (bytes.TrimSpace's) off the value at
// b[start:], the last data line's.
func trimValue(b *buffer, start int) {
	v := b.bytes()[start:]
	t := bytes.TrimSpace(v)
	if len(t) > 0 && &t[0] != &v[0] {
		copy(v, t) // leading white space past the ASCII kind skipped on the way
	}
	b.truncate(start + len(t))
}

// isASCIISpace reports whether c is ASCII white space as bytes.TrimSpace
// sees it.
func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// MediaType is the media type of a Content-Type value, lower case, without
// parameters; "" when the value does not parse (mime.ParseMediaType, as
// the go-sdk reads it).
func MediaType(ct string) string {
	switch t := strings.TrimSpace(ct); t { // the usual values, without the parser's allocations
	case "application/json", "text/event-stream":
		return t
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}
