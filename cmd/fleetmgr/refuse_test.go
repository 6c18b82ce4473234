package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/guard"
)

// TestRefuseUnixAnswersALongRequest: a refused unix-socket client is
// answered with its own request id (docs/SECURITY.md). A request line
// longer than the refusal's 4 KiB read buffer (an initialize with a large
// clientInfo or _meta) got id null instead.
func TestRefuseUnixAnswersALongRequest(t *testing.T) {
	for _, size := range []int{100, 5000, 60 << 10} {
		srv, cli := net.Pipe()
		go refuseUnix(srv, guard.Decision{Rule: "pane-session", Reason: "in a pane"})
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "initialize",
			"params": map[string]any{"clientInfo": map[string]any{"name": strings.Repeat("x", size), "version": "1"}}})
		_ = cli.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = cli.Write(append(req, '\n')) }()
		line, err := bufio.NewReader(cli).ReadBytes('\n')
		cli.Close()
		if err != nil {
			t.Fatalf("%d-byte name: no answer: %v", size, err)
		}
		var resp struct {
			ID    json.RawMessage    `json:"id"`
			Error struct{ Code int } `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil || string(resp.ID) != "7" || resp.Error.Code != refusalCode {
			t.Errorf("%d-byte name: answer %s, want id 7 and code %d", size, line, refusalCode)
		}
	}
}

// TestVerbRefusedByDaemonExits3: a start/stop/restart that the daemon's
// guard refuses exits 3, as `fleetmgr mcp` does for the same refusal and as
// a verb refused in a pane does (docs/SECURITY.md); it exited 1, like any
// other failure.
func TestVerbRefusedByDaemonExits3(t *testing.T) {
	dir, err := os.MkdirTemp("", "fm") // short: the socket path must stay < 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	body := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [20000, 20010]\n[fleets.a]\nproject = %q\ncommand = [\"fleetd\"]\nport = 20001\n[fleets.b]\nproject = %q\ncommand = [\"fleetd\"]\nport = 20002\n", state, dir, dir)
	cfgPath := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// A "daemon" on this process's pid whose guard refuses every caller.
	sock := filepath.Join(dir, "d.sock")
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
			go refuseUnix(c, guard.Decision{Rule: "uid", Reason: "uid 0 is not in [guard] allowed_uids [65534]"})
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	info, _ := json.Marshal(daemonInfo{PID: os.Getpid(), Socket: sock, Version: "test"})
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "serve.json"), info, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"stop", "a"}, {"restart", "--all"}} {
		var stdout, stderr bytes.Buffer
		root := newRoot(&app{stdout: &stdout, stderr: &stderr})
		root.SetArgs(append([]string{"--config", cfgPath}, args...))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := root.ExecuteContext(ctx)
		cancel()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 3 || !strings.Contains(err.Error(), "rule uid") {
			t.Errorf("%v refused by the daemon: %v (exit error %+v), want exit 3 naming the rule", args, err, ee)
		}
	}
}
