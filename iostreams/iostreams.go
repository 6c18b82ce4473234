// Package iostreams is a command's standard streams and what the CLI asks
// of them: whether standard output is a terminal, whether to colour it,
// and whether its reader is still there. Commands get an *IOStreams from
// their caller (System in main, buffers in tests), never os.Stdout itself.
package iostreams

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// IOStreams are a command's standard streams; tests give buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	// Getenv reads the environment (NO_COLOR); nil is os.Getenv.
	Getenv func(string) string
}

// System is the process's own stdin, stdout and stderr.
func System() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// Test is streams over an empty stdin and two buffers, stdout's and
// stderr's, for tests.
func Test() (ios *IOStreams, out, errOut *bytes.Buffer) {
	out, errOut = &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, out, errOut
}

// IsStdoutTTY reports whether Out is a terminal (an *os.File that
// term.IsTerminal accepts); a buffer, pipe or regular file is not.
func (s *IOStreams) IsStdoutTTY() bool {
	f, ok := s.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// CanPrompt reports whether the command may ask the operator a question:
// In and ErrOut (where the question goes) are both terminals.
func (s *IOStreams) CanPrompt() bool {
	in, ok := s.In.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return false
	}
	e, ok := s.ErrOut.(*os.File)
	return ok && term.IsTerminal(int(e.Fd()))
}

// ColorEnabled reports whether Out gets colour: a terminal, and NO_COLOR
// unset or empty (https://no-color.org).
func (s *IOStreams) ColorEnabled() bool {
	getenv := s.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	return s.IsStdoutTTY() && getenv("NO_COLOR") == ""
}

// UntilReaderGoes returns a context derived from ctx that also ends once
// Out, a pipe or socket, has lost its reader (poll(2) reports POLLERR,
// POLLHUP or POLLNVAL on it), so that a follower such as `logs -f … |
// grep -m1 …` ends with its reader, as tail -f does, even while it gets
// nothing whose write would fail. Out of any other kind (a terminal, a
// regular file, a buffer) is not watched: the context ends with ctx or
// cancel only. Call cancel when done; it stops the watching goroutine
// within 250 ms.
func (s *IOStreams) UntilReaderGoes(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if out, ok := s.Out.(*os.File); ok {
		go cancelWhenReaderGoes(ctx, out, cancel)
	}
	return ctx, cancel
}

// cancelWhenReaderGoes calls cancel once out, a pipe or socket, has lost
// its reader; it returns when ctx ends, at once for other files.
func cancelWhenReaderGoes(ctx context.Context, out *os.File, cancel context.CancelFunc) {
	fi, err := out.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return
	}
	fds := []unix.PollFd{{Fd: int32(out.Fd())}}
	for ctx.Err() == nil {
		n, err := unix.Poll(fds, 250)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
			cancel()
			return
		}
	}
}

// IsStderrTTY reports whether ErrOut is a terminal.
func (s *IOStreams) IsStderrTTY() bool {
	f, ok := s.ErrOut.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
