package iostreams

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestTTY: a pty's terminal end is a terminal and gets colour unless
// NO_COLOR is set; a pipe and a buffer are not terminals.
func TestTTY(t *testing.T) {
	ptm, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptm.Close()
	defer tty.Close()
	env := map[string]string{}
	s := &IOStreams{Out: tty, Getenv: func(k string) string { return env[k] }}
	if !s.IsStdoutTTY() || !s.ColorEnabled() {
		t.Errorf("pty: tty %v, colour %v; want both", s.IsStdoutTTY(), s.ColorEnabled())
	}
	env["NO_COLOR"] = "1"
	if !s.IsStdoutTTY() || s.ColorEnabled() {
		t.Errorf("pty with NO_COLOR=1: tty %v, colour %v; want a tty without colour", s.IsStdoutTTY(), s.ColorEnabled())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	delete(env, "NO_COLOR")
	for name, s := range map[string]*IOStreams{"pipe": {Out: w, Getenv: s.Getenv}, "buffer": func() *IOStreams { s, _, _ := Test(); return s }()} {
		if s.IsStdoutTTY() || s.ColorEnabled() {
			t.Errorf("%s: tty %v, colour %v; want neither", name, s.IsStdoutTTY(), s.ColorEnabled())
		}
	}
}

// TestUntilReaderGoes: the context ends once stdout's pipe loses its
// reader, though nothing is written to it.
func TestUntilReaderGoes(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := (&IOStreams{Out: w}).UntilReaderGoes(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("ended before the reader went")
	}
	r.Close()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still not ended 10 s after the reader went")
	}
}

// TestUntilReaderGoesOtherOut: a regular file or a buffer is not
// watched; the context ends with its parent.
func TestUntilReaderGoesOtherOut(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf, _, _ := Test()
	for name, s := range map[string]*IOStreams{"file": {Out: f}, "buffer": buf} {
		parent, stop := context.WithCancel(context.Background())
		ctx, cancel := s.UntilReaderGoes(parent)
		// Longer than one poll(2) round.
		wait.Never(t, 300*time.Millisecond, name+": ended while its parent runs", wait.Bool(func() bool { return ctx.Err() != nil }))
		stop()
		<-ctx.Done()
		cancel()
	}
}
