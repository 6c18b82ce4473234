// Command mcpprobe is test equipment: a minimal MCP client (the official Go
// SDK) that connects to a URL, lists tools and optionally calls one, then
// writes a one-line verdict to -out (or stdout): "OK tools=N result=…",
// "TOOL-ERROR …" (the call returned isError) or "REFUSED …". Tests run it inside herdr panes to prove the guard refuses
// pane members. With -get it makes one plain HTTP GET of -url instead (the
// dashboard's page, say) and writes "HTTP <status code>".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	url := flag.String("url", "", "MCP streamable HTTP endpoint, e.g. http://127.0.0.1:8760/mcp")
	call := flag.String("call", "", "tool to call after listing")
	args := flag.String("args", "{}", "JSON arguments for -call")
	out := flag.String("out", "", "file to write the verdict to (default stdout)")
	timeout := flag.Duration("timeout", 10*time.Second, "overall timeout")
	get := flag.Bool("get", false, "one plain HTTP GET of -url, no MCP: the verdict is \"HTTP <status code>\"")
	flag.Parse()
	var verdict string
	if *get {
		verdict = httpGet(*url, *timeout)
	} else {
		verdict = run(*url, *call, *args, *timeout)
	}
	if *out == "" {
		fmt.Println(verdict)
		return
	}
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, []byte(verdict+"\n"), 0o644); err == nil {
		_ = os.Rename(tmp, *out)
	}
}

func run(url, call, args string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpprobe", Version: "test"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return "REFUSED connect: " + oneLine(err.Error())
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return "REFUSED list: " + oneLine(err.Error())
	}
	v := fmt.Sprintf("OK tools=%d pid=%d", len(lt.Tools), os.Getpid())
	if call != "" {
		var a map[string]any
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return "ERROR args: " + err.Error()
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: call, Arguments: a})
		if err != nil {
			return "REFUSED call: " + oneLine(err.Error())
		}
		b, _ := json.Marshal(res)
		if res.IsError {
			return fmt.Sprintf("TOOL-ERROR tools=%d result=%s", len(lt.Tools), b)
		}
		v += " result=" + string(b)
	}
	return v
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// httpGet GETs url and says its status code, or why there was none.
func httpGet(url string, timeout time.Duration) string {
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return "ERROR get: " + oneLine(err.Error())
	}
	resp.Body.Close()
	return fmt.Sprintf("HTTP %d", resp.StatusCode)
}
