package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// impostorScene starts fleet kb (with a long restart backoff, which keeps
// the supervisor's restart out of the way) and a serve, and returns a
// function calling fleet_whoami on kb through one client session: the
// answer's text and whether it is an error.
func impostorScene(t *testing.T) (*harness.Env, func() (string, bool)) {
	e := harness.NewEnv(t, bins, "restart_backoff_initial = \"60s\"", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	e.StartServe()
	cs := connect(t, e.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return e, func() (string, bool) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_whoami", Arguments: map[string]any{"fleet": "kb"}})
		if err != nil {
			return err.Error(), true
		}
		return textOf(res), res.IsError
	}
}

// killFleetd kills fleet name's fleetd (its process group) and waits until
// it is gone.
func killFleetd(t *testing.T, e *harness.Env, name string) {
	t.Helper()
	st := readState(t, e, name)
	if err := syscall.Kill(-st.Fleetd.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, st.Fleetd.PID, 5*time.Second)
}

// TestProxyRefusesImpostor: after a fleet's fleetd dies, a
// same-uid process that binds its port and answers /healthz with the
// fleet's name gets no forwarded call; the call fails with a tool error
// naming that process.
func TestProxyRefusesImpostor(t *testing.T) {
	e, call := impostorScene(t)
	if text, isErr := call(); isErr {
		t.Fatalf("fleet_whoami through the proxy before: %s", text)
	}
	killFleetd(t, e, "kb")
	port := e.Ports["kb"]
	wait.For(t, 5*time.Second, "the port free after fleetd was killed", wait.Bool(func() bool { return !portBound(port) }))
	startStandin(t, "kb", port)
	pids, err := procfs.TCPListenerPIDs(port)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("held by pid %d", pids[0])
	wait.For(t, 5*time.Second, fmt.Sprintf("a call error naming the impostor (%q)", want), func() (bool, string) {
		text, isErr := call()
		if !isErr {
			t.Fatalf("call answered by the impostor (pid %d): %s", pids[0], text)
		}
		return strings.Contains(text, want), text
	})
}

// TestProxySendsNothingToImpostor (per connection): once a
// session with the real fleetd is open and its connections are kept
// alive, fleetd dies and a same-uid process takes its port. Every new
// connection fleetmgr opens to the port is checked before anything is
// written on it, so the impostor never receives a request (not even one
// carrying the session id and a call's arguments before a 404 would drop
// the session), and the calls fail naming it.
func TestProxySendsNothingToImpostor(t *testing.T) {
	e, call := impostorScene(t)
	for range 3 { // a session and kept-alive connections to the real fleetd
		if text, isErr := call(); isErr {
			t.Fatalf("fleet_whoami through the proxy before: %s", text)
		}
	}
	killFleetd(t, e, "kb")
	port := e.Ports["kb"]
	var l net.Listener
	wait.For(t, 5*time.Second, "the port taken after fleetd died", func() (bool, string) {
		var err error
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	var mu sync.Mutex
	var got []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		http.Error(w, "session not found", http.StatusNotFound)
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	want := fmt.Sprintf("held by pid %d", os.Getpid())
	var text string
	named := false
	for range 5 {
		var isErr bool
		text, isErr = call()
		if !isErr {
			t.Fatalf("a call succeeded against the impostor: %s", text)
		}
		named = named || strings.Contains(text, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("the impostor received %d request(s), first: %s", len(got), got[0])
	}
	if !named {
		t.Fatalf("call errors never named the impostor (%q); last: %s", want, text)
	}
}
