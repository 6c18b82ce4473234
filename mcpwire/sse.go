package mcpwire

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The one writer of server-sent events (text/event-stream, WHATWG HTML
// "Server-sent events") in fleetmgr: the MCP fast path's streamed answers
// (progress, then the response) and the dashboard's two streams (/events
// and the log tails) all write through EventStream, and every event's
// bytes are made by AppendEvent.

// AppendEvent appends one server-sent event to dst and returns the
// extended slice: an "id:" line when id is not empty, an "event:" line
// when name is not empty, one "data:" line per line of data (a line break
// in data, \n, \r\n or \r, starts a new data line, as a reader joins them
// back with \n), and the blank line that ends the event. id and name must
// not hold line breaks (they are cut at the first one).
func AppendEvent(dst []byte, id, name string, data []byte) []byte {
	if id != "" {
		dst = append(append(append(dst, "id: "...), oneField(id)...), '\n')
	}
	if name != "" {
		dst = append(append(append(dst, "event: "...), oneField(name)...), '\n')
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			dst = append(append(append(dst, "data: "...), data...), '\n')
			break
		}
		dst = append(append(append(dst, "data: "...), data[:i]...), '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(dst, '\n')
}

// oneField cuts s at its first line break.
func oneField(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return s[:i]
		}
	}
	return s
}

// ErrStreamClosed is what EventStream's writes return once it is closed.
var ErrStreamClosed = errors.New("event stream closed")

// EventStream writes one text/event-stream response. Its methods may be
// called from several goroutines (a progress sink and the handler); each
// write is whole under one lock, so events never interleave. Nothing is
// written to the ResponseWriter once Close has been called (the handler
// may return then, and a late writer gets ErrStreamClosed instead).
type EventStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter // guarded by mu; nil once closed
	rc      *http.ResponseController
	timeout time.Duration
	started bool // guarded by mu: the head is written
}

// NewEventStream returns a stream writing to w. When writeTimeout is
// positive, every write (and the response's end, at Close) gets that long
// as its deadline, so a reader that stopped reading ends the stream
// instead of holding its writer for ever.
func NewEventStream(w http.ResponseWriter, writeTimeout time.Duration) *EventStream {
	return &EventStream{w: w, rc: http.NewResponseController(w), timeout: writeTimeout}
}

// Header is the response's header, to add to before Start (Content-Type
// is set by Start; Cache-Control defaults to no-cache).
func (s *EventStream) Header() http.Header { return s.w.Header() }

// Start writes the response head (200, text/event-stream) once.
func (s *EventStream) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start()
}

func (s *EventStream) start() error {
	if s.w == nil {
		return ErrStreamClosed
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		if h.Get("Cache-Control") == "" {
			h.Set("Cache-Control", "no-cache")
		}
		s.w.WriteHeader(http.StatusOK)
	}
	return nil
}

// write writes the pieces of one event (starting the stream first).
func (s *EventStream) write(parts ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.start(); err != nil {
		return err
	}
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		if _, err := s.w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// WriteEncoded writes events already encoded by AppendEvent (the
// dashboard encodes each once for all its streams).
func (s *EventStream) WriteEncoded(events []byte) error { return s.write(events) }

// Event writes one event (AppendEvent's encoding).
func (s *EventStream) Event(id, name string, data []byte) error {
	return s.write(AppendEvent(make([]byte, 0, len(data)+len(id)+len(name)+24), id, name, data))
}

// Message writes f as an event of type "message" (what a go-sdk server
// writes, without an event id). f's pieces are written as they are, never
// joined; a JSON-RPC message holds no line break (ResponseFrame's, or
// compact JSON), so it is one data line.
func (s *EventStream) Message(f *Frame) error {
	return s.write(sseHead, f.parts[0], f.parts[1], f.parts[2], sseTail)
}

// Comment writes a comment line (": text"), which readers ignore: a
// keep-alive.
func (s *EventStream) Comment(text string) error {
	return s.write([]byte(": " + oneField(text) + "\n\n"))
}

// Retry tells the reader how long to wait before reconnecting (the
// "retry:" field, in milliseconds).
func (s *EventStream) Retry(d time.Duration) error {
	return s.write([]byte("retry: " + strconv.FormatInt(d.Milliseconds(), 10) + "\n\n"))
}

// Flush sends what is written so far.
func (s *EventStream) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return ErrStreamClosed
	}
	return s.rc.Flush()
}

// Close ends the stream: the head is written if nothing was (an empty,
// well-formed event stream), the response's end gets a fresh write
// deadline (net/http writes the last chunk after the handler returns,
// however long the stream idled), and nothing is written afterwards.
func (s *EventStream) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return
	}
	_ = s.start()
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	s.w = nil
}
