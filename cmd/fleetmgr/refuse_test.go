package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
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
	// A "daemon" on this process's pid whose guard refuses every caller.
	cfgPath, _ := fakeDaemon(t, []string{"a", "b"}, func(c net.Conn) {
		refuseUnix(c, guard.Decision{Rule: "uid", Reason: "uid 0 is not in [guard] allowed_uids [65534]"})
	})
	for _, args := range [][]string{{"stop", "a"}, {"restart", "--all"}} {
		_, _, err := runCLI(cfgPath, args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 3 || !strings.Contains(err.Error(), "rule uid") {
			t.Errorf("%v refused by the daemon: %v (exit error %+v), want exit 3 naming the rule", args, err, ee)
		}
	}
}
