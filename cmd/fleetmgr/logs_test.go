package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
)

// TestLogsFollowEndsWhenReaderGoes: `fleetmgr logs -f kb | grep -m1 …`
// ends once its reader has gone, even when the log gets no new line to
// fail writing (as tail -f does), instead of following an idle log for
// ever.
func TestLogsFollowEndsWhenReaderGoes(t *testing.T) {
	cfgPath, _ := fakeDaemon(t, []string{"kb"}, func(c net.Conn) { c.Close() })
	state := filepath.Join(filepath.Dir(cfgPath), "state")
	if err := os.MkdirAll(filepath.Join(state, "fleets", "kb"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "fleets", "kb", "fleetd.log"), []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ios := &iostreams.IOStreams{In: strings.NewReader(""), Out: w, ErrOut: os.Stderr}
	f := &cmdutil.Factory{IO: ios, ConfigPath: cfgPath}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runLogs(ctx, &LogsOptions{f: f, Fleets: []string{"kb"}, Follow: true, Lines: 1}, ios) }()
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	if got := string(buf[:n]); got != "two\n" {
		t.Fatalf("first read %q", got)
	}
	r.Close() // the reader goes (grep -m1 matched)
	select {
	case err := <-done:
		if ctx.Err() != nil {
			t.Fatalf("logs -f ended only at the test's deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("logs -f still follows 5 s after its reader went")
	}
}
