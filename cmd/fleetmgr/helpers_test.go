package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// fakeDaemon writes a fleets.toml of fleets (ports 20001…) in a short
// temporary dir and a serve.json naming this process as the running daemon,
// whose unix socket hands each connection to serveConn. It returns the
// config path and the socket path.
func fakeDaemon(t *testing.T, fleets []string, serveConn func(net.Conn)) (cfgPath, sock string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm") // short: the socket path must stay < 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n", state)
	for i, n := range fleets {
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", n, dir, 20001+i)
	}
	cfgPath = filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveConn(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: sock, Version: "test"})
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "serve.json"), info, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, sock
}

// runCLI runs fleetmgr --config cfgPath ARGS in this process (30 s bound)
// and returns its output and error.
func runCLI(cfgPath string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := NewCmdRoot(&cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}})
	root.SetArgs(append([]string{"--config", cfgPath}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}
