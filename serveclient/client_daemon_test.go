package serveclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/daemon"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
)

// fakeServe is a stand-in for a running serve of a fresh state dir: a real
// MCP server (the go-sdk's) on a unix socket, with serve.json naming this
// process, serving the tools the test registers. It returns the client of
// that state dir.
func fakeServe(t *testing.T, fleets []string, tools func(*mcp.Server)) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm") // short: the socket path must stay < 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var b strings.Builder
	fmt.Fprintf(&b, "[manager]\nstate_dir = %q\nport_range = [20000, 20010]\nmcp_socket = %q\n", filepath.Join(dir, "state"), filepath.Join(dir, "d.sock"))
	for i, n := range fleets {
		fmt.Fprintf(&b, "[fleets.%s]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", n, dir, 20001+i)
	}
	path := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake-serve", Version: "test"}, nil)
	tools(srv)
	l, err := net.Listen("unix", cfg.Manager.MCPSocket) // as serve's unix mount, without its guard
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: c, Writer: c}, nil)
				if err == nil {
					_ = ss.Wait()
				}
			})
		}
	})
	t.Cleanup(func() { cancel(); l.Close(); wg.Wait() })
	info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: cfg.Manager.MCPSocket, Version: "test", Config: cfg.Path})
	if err := os.MkdirAll(cfg.Manager.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(serveapi.InfoPath(cfg), info, 0o600); err != nil {
		t.Fatal(err)
	}
	return NewClient(cfg, lifecycle.New(cfg, slog.New(slog.DiscardHandler), os.Environ()), "test")
}

// TestActProgressIsTyped: Act through a daemon hands Progress each step
// the daemon's notifications carry under proxy.StepMetaKey, typed (fleet,
// name, a detail holding ": ", elapsed), once and in order, also the steps
// whose notifications lose the race with the reply (taken from the
// result's steps); the outcome is the result's. A step named in text only
// never reaches the CLI as a cut-up string.
func TestActProgressIsTyped(t *testing.T) {
	steps := []lifecycle.Step{
		{Fleet: "kb", Name: "herdr session", Detail: "session kb ready (pid 7, socket /s/herdr.sock)", Elapsed: 20 * time.Millisecond},
		{Fleet: "kb", Name: "fleetd", Detail: "fleetd.spawned.json: stopped pid 9", Elapsed: 30 * time.Millisecond},
		{Fleet: "kb", Name: "fleetd", Detail: "healthy on 127.0.0.1:20001 (pid 11)", Elapsed: 40 * time.Millisecond},
	}
	for _, notified := range []int{3, 1, 0} {
		t.Run(fmt.Sprintf("%d of 3 notified", notified), func(t *testing.T) {
			arrived := make(chan struct{}, len(steps)) // one per step Progress is handed
			c := fakeServe(t, []string{"kb"}, func(s *mcp.Server) {
				mcp.AddTool(s, &mcp.Tool{Name: "fleetmgr_start"}, func(ctx context.Context, req *mcp.CallToolRequest, in proxy.StartArgs) (*mcp.CallToolResult, *proxy.ActionResult, error) {
					if in.Fleet != "kb" || !in.Lead {
						return nil, nil, fmt.Errorf("arguments %+v", in)
					}
					for i, st := range steps[:notified] {
						_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
							Progress: float64(i + 1), Message: st.Name + ": " + st.Detail, Meta: mcp.Meta{proxy.StepMetaKey: st}})
					}
					for range notified { // the notifications are handled before the reply
						select {
						case <-arrived:
						case <-time.After(10 * time.Second):
							return nil, nil, fmt.Errorf("the CLI saw fewer than %d notifications in 10s", notified)
						}
					}
					return nil, &proxy.ActionResult{Fleet: "kb", State: lifecycle.PhaseRunning, PID: 11, Port: 20001, Steps: steps}, nil
				})
			})
			var got []lifecycle.Step
			var done []Outcome
			outs, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Start, Fleets: []string{"kb"}, Lead: true,
				Progress: func(s lifecycle.Step) { got = append(got, s); arrived <- struct{}{} },
				Done:     func(o Outcome) { done = append(done, o) }})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(steps) {
				t.Errorf("progress:\n got %+v\nwant %+v", got, steps)
			}
			if len(outs) != 1 || !outs[0].OK || outs[0].State != lifecycle.PhaseRunning || outs[0].PID != 11 || len(outs[0].Steps) != 3 || len(done) != 1 {
				t.Errorf("outcomes %+v, done %+v", outs, done)
			}
		})
	}
}

// TestStepOf: a notification without the step (a serve older than this
// CLI) is a step named by its whole message, never cut at ": ".
func TestStepOf(t *testing.T) {
	s := stepOf(&mcp.ProgressNotificationParams{Message: "fleetd: fleetd.spawned.json: stopped"}, "kb")
	if s.Fleet != "kb" || s.Name != "fleetd: fleetd.spawned.json: stopped" || s.Detail != "" {
		t.Errorf("%+v", s)
	}
	s = stepOf(&mcp.ProgressNotificationParams{Message: "x", Meta: mcp.Meta{proxy.StepMetaKey: map[string]any{"fleet": "kb", "step": "vhost", "detail": "a: b", "elapsed_ns": 5}}}, "kb")
	if s.Name != "vhost" || s.Detail != "a: b" || s.Elapsed != 5 {
		t.Errorf("%+v", s)
	}
}

// TestActToolError: a tool error of the daemon is the fleet's error, and
// the outcome names it.
func TestActToolError(t *testing.T) {
	c := fakeServe(t, []string{"kb", "docs"}, func(s *mcp.Server) {
		mcp.AddTool(s, &mcp.Tool{Name: "fleetmgr_stop"}, func(ctx context.Context, req *mcp.CallToolRequest, in proxy.FleetArgs) (*mcp.CallToolResult, *proxy.ActionResult, error) {
			if in.Fleet == "docs" {
				return nil, nil, errors.New("fleet docs: processes survived SIGKILL: [7]")
			}
			return nil, &proxy.ActionResult{Fleet: in.Fleet, State: lifecycle.PhaseStopped, Port: 20001, Steps: []lifecycle.Step{}}, nil
		})
	})
	outs, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Stop, Fleets: []string{"kb", "docs"}})
	if err == nil || err.Error() != "fleet docs: processes survived SIGKILL: [7]" {
		t.Fatalf("error %v", err)
	}
	if len(outs) != 2 || !outs[0].OK || outs[1].OK || outs[1].Error != err.Error() || outs[1].Port != 20002 {
		t.Fatalf("outcomes %+v", outs)
	}
}

// TestReloadEdited: what add and remove say after editing the file, by
// what the daemon answers.
func TestReloadEdited(t *testing.T) {
	c := fakeServe(t, []string{"kb"}, func(s *mcp.Server) {
		mcp.AddTool(s, &mcp.Tool{Name: proxy.ReloadTool}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *lifecycle.ReloadReport, error) {
			r := &lifecycle.ReloadReport{Config: "/f.toml", Generation: 2, Fleets: []string{"docs", "kb"}, Added: []string{"docs"}}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(r.Lines(), "\n")}}}, r, nil
		})
	})
	got, err := c.ReloadEdited(context.Background())
	if err != nil || !strings.HasPrefix(got, fmt.Sprintf("fleetmgr serve (pid %d) re-read the file: reloaded /f.toml (generation 2)", os.Getpid())) || !strings.Contains(got, "; added: docs") {
		t.Errorf("%q, %v", got, err)
	}

	bad := fakeServe(t, []string{"kb"}, func(s *mcp.Server) {
		mcp.AddTool(s, &mcp.Tool{Name: proxy.ReloadTool}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *lifecycle.ReloadReport, error) {
			return nil, nil, errors.New("/f.toml:3: port: must be a number")
		})
	})
	if got, err := bad.ReloadEdited(context.Background()); err == nil || !strings.Contains(err.Error(), "did not take the file") || !strings.Contains(err.Error(), "/f.toml:3") {
		t.Errorf("refused: %q, %v", got, err)
	}
	if _, _, err := bad.Reload(context.Background()); !errors.As(err, new(*ReloadRejected)) {
		t.Errorf("Reload of a refused file: %v", err)
	}

	// No daemon: serve.json gone.
	if err := os.Remove(serveapi.InfoPath(c.cfg)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ReloadEdited(context.Background()); err != nil || !strings.HasPrefix(got, "no fleetmgr serve runs") {
		t.Errorf("no daemon: %q, %v", got, err)
	}
}

// TestUnreachableDaemon: a daemon whose socket hangs up: Act fails for
// every fleet with one error said once, without trying the others, and
// ReloadEdited says what to run instead of failing the edit.
func TestUnreachableDaemon(t *testing.T) {
	c := fakeServe(t, []string{"a", "b"}, func(*mcp.Server) {})
	// Replace the server by one that hangs up at once.
	l, err := net.Listen("unix", c.cfg.Manager.MCPSocket+"2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: c.cfg.Manager.MCPSocket + "2"})
	if err := os.WriteFile(serveapi.InfoPath(c.cfg), info, 0o600); err != nil {
		t.Fatal(err)
	}
	outs, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Stop, Fleets: []string{"a", "b"}})
	if err == nil || !strings.HasPrefix(err.Error(), "a, b: fleetmgr serve on ") || strings.Count(err.Error(), "refused or failed") != 1 || len(outs) != 2 || outs[1].Error == "" {
		t.Fatalf("%v %+v", err, outs)
	}
	got, err := c.ReloadEdited(context.Background())
	if err != nil || !strings.Contains(got, "still has the file as it was: run `fleetmgr reload`") {
		t.Fatalf("%q %v", got, err)
	}
}

// TestClientRefusesBadInput: what the CLI's verbs hand the client as given
// and the client refuses before acting, each a *UsageError (exit 2): an
// unknown fleet, negative log lines or status interval. Without [broker]
// a vhost deletion, confirmed or not, says there is no broker (not a usage
// error, and before asking for the flag; e2e TestBrokerStopStartKeepsMessages
// shows the flag asked for with a broker).
func TestClientRefusesBadInput(t *testing.T) {
	c := fakeServe(t, []string{"kb"}, func(*mcp.Server) {})
	ctx := context.Background()
	never := func(*status.Report, bool) error { t.Error("status asked"); return nil }
	for what, err := range map[string]error{
		"vhost of an unknown fleet": func() error { _, _, err := c.DeleteVhost(ctx, "nope", true); return err }(),
		"logs -n -1":                c.Logs(ctx, "kb", false, -1, false, io.Discard),
		"logs of an unknown fleet":  c.Logs(ctx, "nope", false, 5, false, io.Discard),
		"status of an unknown":      c.Watch(ctx, StatusRequest{Fleets: []string{"nope"}}, false, never),
		"status --interval -1s":     c.Watch(ctx, StatusRequest{Interval: -time.Second}, false, never),
	} {
		var u *serveapi.UsageError
		if !errors.As(err, &u) || u.ExitStatus() != 2 {
			t.Errorf("%s: %v, want a *UsageError", what, err)
		}
	}
	for _, confirmed := range []bool{false, true} {
		if _, _, err := c.DeleteVhost(ctx, "kb", confirmed); !errors.Is(err, lifecycle.ErrNoBroker) || errors.As(err, new(*serveapi.UsageError)) || strings.Contains(err.Error(), "--yes-delete-messages") {
			t.Errorf("confirmed %v, no [broker]: %v", confirmed, err)
		}
	}
}

// TestReloadWithoutDaemon: Reload with no serve running is ErrNoDaemon,
// worded with the state dir and the file a serve would read.
func TestReloadWithoutDaemon(t *testing.T) {
	c := fakeServe(t, []string{"kb"}, func(*mcp.Server) {})
	if err := os.Remove(serveapi.InfoPath(c.cfg)); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Reload(context.Background())
	if !errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), "state dir "+c.cfg.Manager.StateDir) || !strings.Contains(err.Error(), c.cfg.Path) {
		t.Fatalf("%v", err)
	}
	rej := &ReloadRejected{PID: 7, Config: "/f.toml", Problems: "/f.toml:3: bad"}
	if rej.ExitStatus() != 2 || rej.Error() != "fleetmgr serve (pid 7) kept its config; /f.toml cannot be applied:\n/f.toml:3: bad" {
		t.Fatalf("%q", rej.Error())
	}
}

// TestMountTarget: outside a herdr pane, the HTTP endpoint, or with stdio
// this executable's `--config FILE mcp`.
func TestMountTarget(t *testing.T) {
	c := fakeServe(t, []string{"kb"}, func(*mcp.Server) {})
	t.Setenv("HERDR_ENV", "")
	t.Setenv("HERDR_PANE_ID", "")
	url, cmd, err := daemon.MountTarget(context.Background(), c.cfg, c.m, false)
	if err != nil || url != "http://127.0.0.1:8760/mcp" || cmd != nil {
		t.Fatalf("http: %q %q %v", url, cmd, err)
	}
	exe, _ := os.Executable()
	url, cmd, err = daemon.MountTarget(context.Background(), c.cfg, c.m, true)
	if err != nil || url != "" || len(cmd) != 4 || cmd[0] != exe || cmd[2] != c.cfg.Path || cmd[3] != "mcp" {
		t.Fatalf("stdio: %q %q %v", url, cmd, err)
	}
}

// rawServe points c's serve.json at a unix socket served by handle, one
// goroutine per connection, closed when the test ends.
func rawServe(t *testing.T, c *Client, handle func(net.Conn)) {
	t.Helper()
	sock := c.cfg.Manager.MCPSocket + "r"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer conn.Close(); handle(conn) })
		}
	})
	info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: sock})
	if err := os.WriteFile(serveapi.InfoPath(c.cfg), info, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSilentDaemon: a serve whose socket accepts but never answers (a
// stopped or hung process, or a stranger on its socket) fails each verb
// once the MCP handshake has waited its bound, naming the pid, instead of
// hanging for ever.
func TestSilentDaemon(t *testing.T) {
	c := fakeServe(t, []string{"a", "b"}, func(*mcp.Server) {})
	c.handshake = 300 * time.Millisecond
	stop := make(chan struct{})
	rawServe(t, c, func(conn net.Conn) { <-stop })
	defer close(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	outs, err := c.Act(ctx, ActRequest{Verb: serveapi.Start, Fleets: []string{"a", "b"}})
	if ctx.Err() != nil {
		t.Fatal("Act waited for a silent daemon until the test's deadline")
	}
	want := fmt.Sprintf("fleetmgr serve (pid %d) on %s did not answer the MCP handshake within 300ms", os.Getpid(), c.cfg.Manager.MCPSocket+"r")
	if err == nil || !strings.Contains(err.Error(), want) || strings.Count(err.Error(), want) != 1 || len(outs) != 2 {
		t.Fatalf("Act: %v %+v; want %q once", err, outs, want)
	}
	if _, _, err := c.Reload(ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Reload: %v", err)
	}
}

// TestDaemonGoneDuringVerb: a serve that goes away while it runs a verb
// (killed or stopped mid-start) is said to be gone, named by the pid it
// had (a stopped serve has removed serve.json), with what to run next, not
// as the transport's bare EOF.
func TestDaemonGoneDuringVerb(t *testing.T) {
	c := fakeServe(t, []string{"a"}, func(*mcp.Server) {})
	rawServe(t, c, func(conn net.Conn) {
		dec := json.NewDecoder(conn)
		for {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if dec.Decode(&msg) != nil {
				return
			}
			switch msg.Method {
			case "initialize":
				fmt.Fprintf(conn, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"x","version":"0"}}}`+"\n", msg.ID)
			case "server/discover":
				fmt.Fprintf(conn, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", msg.ID)
			case "tools/call":
				_ = os.Remove(serveapi.InfoPath(c.cfg)) // the serve stops, as a SIGTERM'd one does
				return
			}
		}
	})
	_, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Start, Fleets: []string{"a"}})
	want := fmt.Sprintf("fleetmgr serve (pid %d) went away during the start of a", os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "`fleetmgr list`") {
		t.Fatalf("Act: %v; want %q", err, want)
	}
}

// TestReloadEditedOtherFile: a serve of the same state dir that reads
// another fleets.toml is not asked to reload (it would re-read its own
// file) and is not said to have re-read the edited one: the sentence names
// both files and what to do.
func TestReloadEditedOtherFile(t *testing.T) {
	asked := false
	c := fakeServe(t, []string{"kb"}, func(s *mcp.Server) {
		mcp.AddTool(s, &mcp.Tool{Name: proxy.ReloadTool}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *lifecycle.ReloadReport, error) {
			asked = true
			return nil, &lifecycle.ReloadReport{Config: "/other/fleets.toml", Generation: 2}, nil
		})
	})
	info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: c.cfg.Manager.MCPSocket, Version: "test", Config: "/other/fleets.toml"})
	if err := os.WriteFile(serveapi.InfoPath(c.cfg), info, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReloadEdited(context.Background())
	want := fmt.Sprintf("fleetmgr serve (pid %d) of this state dir reads /other/fleets.toml, not %s: it does not see this change", os.Getpid(), c.cfg.Path)
	if err != nil || !strings.HasPrefix(got, want) || asked {
		t.Fatalf("%q, %v (reload asked: %v); want %q", got, err, asked, want)
	}
}

// TestActOtherFileRefused: with the serve of the state dir reading another
// fleets.toml, a start or restart through it would run that file's fleet
// of the same name (another project, command, port): it is refused,
// naming both files and what to run, and the daemon is not asked. Stop
// (the way out, the same processes whatever the file) still goes through;
// so does every verb when the two paths name the same file.
func TestActOtherFileRefused(t *testing.T) {
	var started []string
	c := fakeServe(t, []string{"kb"}, func(s *mcp.Server) {
		for _, verb := range []string{"start", "restart", "stop"} {
			mcp.AddTool(s, &mcp.Tool{Name: "fleetmgr_" + verb}, func(ctx context.Context, req *mcp.CallToolRequest, in proxy.FleetArgs) (*mcp.CallToolResult, *proxy.ActionResult, error) {
				started = append(started, verb)
				return nil, &proxy.ActionResult{Fleet: in.Fleet, State: lifecycle.PhaseRunning, Port: 20001, Steps: []lifecycle.Step{}}, nil
			})
		}
	})
	writeInfo := func(config string) {
		info, _ := json.Marshal(serveapi.Info{PID: os.Getpid(), Socket: c.cfg.Manager.MCPSocket, Version: "test", Config: config})
		if err := os.WriteFile(serveapi.InfoPath(c.cfg), info, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(t.TempDir(), "other.toml")
	if err := os.WriteFile(other, []byte("[fleets.kb]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeInfo(other)
	for _, verb := range []serveapi.Verb{serveapi.Start, serveapi.Restart} {
		_, err := c.Act(context.Background(), ActRequest{Verb: verb, Fleets: []string{"kb"}})
		want := fmt.Sprintf("fleetmgr serve (pid %d) reads %s, not %s", os.Getpid(), other, c.cfg.Path)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("fleetmgr --config %s %s kb", other, verb)) {
			t.Errorf("%s: %v; want %q", verb, err, want)
		}
	}
	if len(started) != 0 {
		t.Fatalf("the daemon was asked: %v", started)
	}
	if _, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Stop, Fleets: []string{"kb"}}); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// The same file by another path (a symbolic link) is the same file.
	link := filepath.Join(t.TempDir(), "link.toml")
	if err := os.Symlink(c.cfg.Path, link); err != nil {
		t.Fatal(err)
	}
	writeInfo(link)
	if _, err := c.Act(context.Background(), ActRequest{Verb: serveapi.Start, Fleets: []string{"kb"}}); err != nil {
		t.Fatalf("start, serve reading the same file by a link: %v", err)
	}
	if !slices.Equal(started, []string{"stop", "start"}) {
		t.Fatalf("daemon asked for %v, want [stop start]", started)
	}
}
