package fleetd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Environment of the in-pane MCP client role: when FLEETD_TEST_URL is set the
// test binary does not run tests; it calls FLEETD_TEST_TOOL (arguments
// FLEETD_TEST_ARGS, a JSON object) at FLEETD_TEST_URL and writes a
// clientVerdict as JSON to FLEETD_TEST_OUT (written to a temp name, then
// renamed). Tests type this command into herdr panes so that the caller is a
// process inside a pane.
const (
	envClientURL  = "FLEETD_TEST_URL"
	envClientTool = "FLEETD_TEST_TOOL"
	envClientArgs = "FLEETD_TEST_ARGS"
	envClientOut  = "FLEETD_TEST_OUT"
)

// clientVerdict is what the in-pane client reports.
type clientVerdict struct {
	PID        int             `json:"pid"`
	Error      string          `json:"error,omitempty"`
	IsError    bool            `json:"is_error"`
	Text       string          `json:"text"`
	Structured json.RawMessage `json:"structured,omitempty"`
}

func TestMain(m *testing.M) {
	if url := os.Getenv(envClientURL); url != "" {
		os.Exit(runClient(url))
	}
	os.Exit(m.Run())
}

func runClient(url string) int {
	v := clientVerdict{PID: os.Getpid()}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	func() {
		var args map[string]any
		if a := os.Getenv(envClientArgs); a != "" {
			if err := json.Unmarshal([]byte(a), &args); err != nil {
				v.Error = "args: " + err.Error()
				return
			}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "fleetd-test-pane-client", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
		if err != nil {
			v.Error = "connect: " + err.Error()
			return
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: os.Getenv(envClientTool), Arguments: args})
		if err != nil {
			v.Error = "call: " + err.Error()
			return
		}
		v.IsError = res.IsError
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				v.Text += tc.Text
			}
		}
		if res.StructuredContent != nil {
			v.Structured, _ = json.Marshal(res.StructuredContent)
		}
	}()
	b, _ := json.Marshal(v)
	out := os.Getenv(envClientOut)
	if out == "" {
		fmt.Println(string(b))
		return 0
	}
	if err := os.WriteFile(out+".tmp", b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
