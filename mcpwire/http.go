package mcpwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
)

// MaxHeaderBytes bounds what is read of a response's head, interim (1xx)
// heads included: net/http's Transport's default MaxResponseHeaderBytes.
const MaxHeaderBytes = 10 << 20

// ResponseReader reads HTTP/1.1 responses off one connection, one after
// the other, as net/http's Transport reads them: http.ReadResponse frames
// each (Content-Length, chunked transfer coding, or a body to the end of
// the connection), interim 1xx responses other than 101 are skipped, and
// the heads are bounded by MaxHeaderBytes. A Transport's other work
// (redirects, retries, decompression it asked for) is not done: the hot
// path asks for none of it.
type ResponseReader struct {
	lim limitReader
	br  *bufio.Reader
}

// NewResponseReader returns a ResponseReader over r with a read buffer of
// size bytes.
func NewResponseReader(r io.Reader, size int) *ResponseReader {
	rr := &ResponseReader{lim: limitReader{r: r, n: math.MaxInt64}}
	rr.br = bufio.NewReaderSize(&rr.lim, size)
	return rr
}

// Buffered returns how many bytes are read and not yet consumed (on an
// idle connection, anything is a sign that it is out of step).
func (rr *ResponseReader) Buffered() int { return rr.br.Buffered() }

// ReadResponse reads the next response's head; its Body reads the body
// off the connection and must be read to its end before the next
// response can be read.
func (rr *ResponseReader) ReadResponse() (*http.Response, error) { return rr.readResponse(nil) }

// readResponse is ReadResponse for req (nil: a POST; a HEAD's response
// has no body, which http.ReadResponse learns from req).
func (rr *ResponseReader) readResponse(req *http.Request) (*http.Response, error) {
	rr.lim.n = MaxHeaderBytes
	defer func() { rr.lim.n = math.MaxInt64 }()
	for {
		resp, err := http.ReadResponse(rr.br, req)
		if err != nil {
			if rr.lim.n <= 0 {
				return nil, fmt.Errorf("the response's head is longer than %s", FormatSize(MaxHeaderBytes))
			}
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // interim: the final response follows
		}
		return resp, nil
	}
}

// limitReader reads from r until n bytes are read, then reports EOF.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// ErrSessionNotFound is CheckStatus's error for HTTP 404: the server does
// not know the session (MCP "Streamable HTTP", session management: it
// ended it, or restarted), so the request was not handled.
var ErrSessionNotFound = errors.New("upstream session not found (HTTP 404)")

// StatusError is CheckStatus's error for any other status outside 2xx.
type StatusError struct {
	// Status is the response's status line ("500 Internal Server Error").
	Status string
	// Body is the start of the response's body (at most 512 bytes), trimmed.
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	if e.Body == "" {
		return "HTTP " + e.Status
	}
	return "HTTP " + e.Status + ": " + e.Body
}

// CheckStatus returns nil for a 2xx response to a POST of a message,
// ErrSessionNotFound for 404, and a *StatusError (having read the start
// of the body) for anything else, as the go-sdk's client treats them.
func CheckStatus(resp *http.Response) error {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return ErrSessionNotFound
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &StatusError{Status: resp.Status, Body: strings.TrimSpace(string(b))}
}
