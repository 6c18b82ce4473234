package daemon

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// TestRefuseUnixAnswersALongRequest: a refused unix-socket client is
// answered with its own request id (docs/SECURITY.md). A request line
// longer than the refusal's 4 KiB read buffer (an initialize with a large
// clientInfo or _meta) got id null instead.
func TestRefuseUnixAnswersALongRequest(t *testing.T) {
	for _, size := range []int{100, 5000, 60 << 10} {
		srv, cli := net.Pipe()
		go Refuse(srv, guard.Decision{Rule: "pane-session", Reason: "in a pane"})
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
		if err := json.Unmarshal(line, &resp); err != nil || string(resp.ID) != "7" || resp.Error.Code != serveapi.RefusalCode {
			t.Errorf("%d-byte name: answer %s, want id 7 and code %d", size, line, serveapi.RefusalCode)
		}
	}
}
