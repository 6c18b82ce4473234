package herdr

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// DefaultTimeout bounds one call when Client.Timeout is zero. herdr has no server-side timeout
// on ordinary calls (herdr src/api/server.rs), so the client must bring its own.
const DefaultTimeout = 5 * time.Second

// MaxResponseBytes bounds one response line read by Client.Call (64 MiB). A pane.read of a large
// scrollback or a session.snapshot of a busy server stays well below it.
const MaxResponseBytes = 64 << 20

// Client talks to one herdr API socket. It opens a new connection per call, because herdr
// answers exactly one request line per connection (herdr src/api/server.rs). A Client holds no state
// besides its two fields: it may be copied, and is safe for concurrent use. Request ids are
// random strings (herdr only echoes them).
type Client struct {
	// Socket is the path of the API socket, e.g. SocketPath(ConfigDir(os.Getenv), "fleet-a").
	Socket string
	// Timeout bounds each call (dial, write and read); zero means DefaultTimeout. The effective
	// deadline is the earlier of this and the context's deadline.
	Timeout time.Duration
}

// New returns a Client for the API socket at socket with the default timeout.
func New(socket string) *Client { return &Client{Socket: socket} }

// Error is an error object returned by herdr: {"code":"<string>","message":"<string>"}.
// Codes are per resource (pane_not_found, tab_not_found, workspace_not_found), plus
// invalid_request, invalid_params, invalid_env, invalid_key, server_unavailable, internal_error
// and others (herdr src/api/server.rs).
type Error struct {
	// Code is herdr's machine-readable error code.
	Code string `json:"code"`
	// Message is herdr's human-readable text; its wording is not stable.
	Message string `json:"message"`
}

// Error implements error as "herdr: <code>: <message>".
func (e *Error) Error() string { return "herdr: " + e.Code + ": " + e.Message }

// IsCode reports whether err is (or wraps) a *Error with the given code.
func IsCode(err error, code string) bool {
	var he *Error
	return errors.As(err, &he) && he.Code == code
}

// request is the wire form of one call.
type request struct {
	ID     string          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// Call sends method with params (nil or a value that encodes to null sends {}) and decodes the
// response's "result" object into result when result is non-nil. A herdr error line is returned
// as *Error; transport failures and malformed lines as other errors. The call's deadline is the
// earlier of ctx's deadline and c.Timeout (DefaultTimeout when zero); cancelling ctx aborts the
// call.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	p := json.RawMessage("{}")
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("herdr: encode %s params: %w", method, err)
		}
		if !bytes.Equal(b, []byte("null")) {
			p = b
		}
	}
	line, err := json.Marshal(request{ID: strconv.FormatUint(rand.Uint64(), 36), Method: method, Params: p})
	if err != nil {
		return fmt.Errorf("herdr: encode %s request: %w", method, err)
	}
	line = append(line, '\n')

	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return fmt.Errorf("herdr: %s: %w", method, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("herdr: %s: %w", method, err)
	}
	// Unblock the read if ctx is cancelled before the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := conn.Write(line); err != nil {
		return fmt.Errorf("herdr: %s: write: %w", method, ctxErr(ctx, err))
	}
	resp, err := readLine(conn, MaxResponseBytes)
	if err != nil {
		return fmt.Errorf("herdr: %s: read: %w", method, ctxErr(ctx, err))
	}
	if err := DecodeResponse(resp, result); err != nil {
		var he *Error
		if errors.As(err, &he) {
			return he
		}
		return fmt.Errorf("herdr: %s: %w", method, err)
	}
	return nil
}

// ctxErr prefers the context's error (deadline or cancellation) over the I/O error it caused.
// A connection deadline that fired a moment before the context noticed counts as
// context.DeadlineExceeded.
func ctxErr(ctx context.Context, err error) error {
	if ce := ctx.Err(); ce != nil {
		return fmt.Errorf("%w (%v)", ce, err)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// readLine reads up to and excluding the first '\n'. A final line without '\n' is accepted at
// EOF if non-empty. More than max bytes is an error.
func readLine(r io.Reader, max int) ([]byte, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > max+1 {
			return nil, fmt.Errorf("response line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return buf, nil
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// response is the wire form of one answer line.
type response struct {
	ID     *string         `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// DecodeResponse decodes one response line. A line with an "error" object yields *Error; a line
// with a "result" object decodes it into result (skipped when result is nil). Anything else —
// invalid JSON, no id, neither result nor error, a non-object result — is a plain error.
// It never panics, whatever the input (see FuzzDecodeResponse).
func DecodeResponse(line []byte, result any) error {
	var r response
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("malformed response: %w", err)
	}
	if r.ID == nil {
		return errors.New("malformed response: missing id")
	}
	if r.Error != nil {
		if r.Error.Code == "" {
			return errors.New("malformed response: error without code")
		}
		return r.Error
	}
	raw := bytes.TrimSpace(r.Result)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("malformed response: missing result object")
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(raw, result); err != nil {
		return fmt.Errorf("malformed result: %w", err)
	}
	return nil
}

// WaitReady polls the socket every 50 ms, as herdr's own launcher does (herdr src/server/autodetect.rs), until a
// ping succeeds or ctx ends, and returns that ping's answer. Each attempt is bounded by the
// client's Timeout.
func (c *Client) WaitReady(ctx context.Context) (*Pong, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		p, err := c.Ping(ctx)
		if err == nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("herdr: %s not ready: %w (last error: %v)", c.Socket, ctx.Err(), err)
		case <-t.C:
		}
	}
}
