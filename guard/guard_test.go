package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/herdrd"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// serveStandin starts an in-process herdr stand-in in a new directory,
// its API calls counted by calls when calls is not nil, and returns the
// directory and the stand-in's socket; both end with the test.
func serveStandin(t testing.TB, calls *herdrd.CallCounter) (dir, sock string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fmg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock = filepath.Join(dir, "herdr.sock")
	cfg := herdrd.Config{Socket: sock, DefaultCwd: dir, Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}}
	if calls != nil {
		cfg.Logger, cfg.LogCalls = slog.New(calls), true
	}
	srv, err := herdrd.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return dir, sock
}

// standin starts an in-process herdr stand-in with n panes (real shells in
// real PTYs) and returns its socket and the panes' shell pids.
func standin(t testing.TB, n int) (string, []int) {
	t.Helper()
	dir, sock := serveStandin(t, nil)
	ctx := context.Background()
	hc := herdr.New(sock)
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	panes := []string{w.RootPane.PaneID}
	for i := 1; i < n; i++ {
		tc, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: w.Workspace.WorkspaceID, Cwd: dir})
		if err != nil {
			t.Fatal(err)
		}
		panes = append(panes, tc.RootPane.PaneID)
	}
	var shells []int
	for _, p := range panes {
		pi, err := hc.PaneProcessInfo(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		shells = append(shells, pi.ShellPID)
	}
	return sock, shells
}

func newTestGuard(sock string) *Guard {
	return New(Options{
		AllowedUIDs: []int{os.Getuid()},
		Sessions:    func(context.Context) []Session { return []Session{{Name: "s", Socket: sock}} },
	})
}

func TestCheckRefusesPaneShellAndServesSelf(t *testing.T) {
	sock, shells := standin(t, 2)
	g := newTestGuard(sock)
	ctx := context.Background()
	d := g.Check(ctx, shells[1], os.Getuid())
	if d.Allowed || d.Rule != RulePaneSession || d.Session != "s" || d.Pane == "" {
		t.Fatalf("pane shell: %+v", d)
	}
	if d := g.Check(ctx, os.Getpid(), os.Getuid()); !d.Allowed {
		t.Fatalf("this test process refused: %+v", d)
	}
	if d := g.Check(ctx, os.Getpid(), os.Getuid()+1); d.Allowed || d.Rule != RuleUID {
		t.Fatalf("foreign uid: %+v", d)
	}
	if d := g.Check(ctx, 0, os.Getuid()); d.Allowed || d.Rule != RuleUnresolved {
		t.Fatalf("pid 0: %+v", d)
	}
	if got := g.Refusals(); got[RulePaneSession] != 1 || got[RuleUID] != 1 || got[RuleUnresolved] != 1 {
		t.Fatalf("refusal counters: %v", got)
	}
}

func TestUnansweringSessionFailsClosed(t *testing.T) {
	dir, err := os.MkdirTemp("", "fmg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// A socket that accepts but never answers: a hung herdr.
	sock := filepath.Join(dir, "hung.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	g := newTestGuard(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d := g.Check(ctx, os.Getpid(), os.Getuid()); d.Allowed || d.Rule != RuleUnresolved {
		t.Fatalf("hung herdr session must fail closed: %+v", d)
	}
}

func TestBadHostOrigin(t *testing.T) {
	for _, c := range []struct {
		host, origin string
		bad          bool
	}{
		{"127.0.0.1:8760", "", false},
		{"localhost:8760", "http://localhost:3000", false},
		{"[::1]:8760", "http://127.0.0.1", false},
		{"evil.example", "", true},
		{"127.0.0.1.evil.example:8760", "", true},
		{"127.0.0.1:8760", "https://evil.example", true},
		{"127.0.0.1:8760", "null", true},
	} {
		r := httptest.NewRequest("POST", "http://x/mcp", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := badHostOrigin(r) != ""; got != c.bad {
			t.Errorf("host %q origin %q: bad=%v, want %v", c.host, c.origin, got, c.bad)
		}
	}
}

func countProcs() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// BenchmarkGuardNewConnection: the guard's whole cost for one new loopback
// TCP connection (peer pid from /proc/net/tcp + /proc/*/fd, then the rules
// against a herdr session with 8 panes), reported with the machine's process
// count. The peer (this process) is older than any pane table, so the
// cached table serves until its TTL, as in production for a long-lived
// client.
func BenchmarkGuardNewConnection(b *testing.B) {
	sock, _ := standin(b, 8)
	g := newTestGuard(sock)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b.ReportMetric(float64(countProcs()), "procs")
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		if d := g.CheckConn(ctx, s); !d.Allowed {
			b.Fatalf("refused: %+v", d)
		}
		s.Close()
		c.Close()
	}
}

// BenchmarkGuardPerRequest: requests on one kept-alive connection through
// Middleware versus the bare handler; the guard decided once per connection,
// so the difference per request is the cost of looking the decision up.
func BenchmarkGuardPerRequest(b *testing.B) {
	sock, _ := standin(b, 8)
	g := newTestGuard(sock)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", ok}, {"guarded", g.Middleware(ok, HTTPPolicy{})}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewUnstartedServer(bc.h)
			srv.Config.ConnContext = g.ConnContext
			srv.Start()
			defer srv.Close()
			client := srv.Client()
			for b.Loop() {
				resp, err := client.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 204 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// TestPaneRefIgnoresReusedPID: a table entry whose shell pid now names a
// process with another start time (pid reuse) no longer matches.
func TestPaneRefIgnoresReusedPID(t *testing.T) {
	self, err := procfs.KeyOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !(paneRef{shell: self}).current() {
		t.Fatal("the same process must match")
	}
	if (paneRef{shell: procfs.Key{PID: self.PID, StartTime: self.StartTime + 1}}).current() {
		t.Fatal("a reused pid (other start time) must not match")
	}
}

func TestSessionOfSocket(t *testing.T) {
	for in, want := range map[string]string{
		"/h/.config/herdr/sessions/kb/herdr.sock": "kb",
		"/h/.config/herdr/herdr.sock":             "default",
		"/tmp/other.sock":                         "",
		"":                                        "",
	} {
		if got := sessionOfSocket(in); got != want {
			t.Errorf("sessionOfSocket(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPeerPIDReusedDuringCheck: the peer's facts are read from /proc one
// after another, the ancestry and environment after the pane table, whose
// build waits for every herdr session (a member can run a session of its
// own that answers slowly). A peer that exits meanwhile, its pid taken by
// another process, must not be judged by that process's facts. Here the
// peer carries a herdr marker (herdr-env) and, while the table is built,
// it is killed and its pid given to a clean process (ns_last_pid, as root):
// before, the clean process's environment was read and the peer allowed.
func TestPeerPIDReusedDuringCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to choose the next pid (/proc/sys/kernel/ns_last_pid)")
	}
	for attempt := 1; ; attempt++ {
		peer := exec.Command("sleep", "60")
		peer.Env = []string{"PATH=" + os.Getenv("PATH"), "HERDR_PANE_ID=w1:p1"}
		peer.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := peer.Start(); err != nil {
			t.Fatal(err)
		}
		pid := peer.Process.Pid
		var clean *exec.Cmd
		reused := false
		g := New(Options{AllowedUIDs: []int{os.Getuid()}, Sessions: func(context.Context) []Session {
			if clean != nil {
				return nil // the re-check's table
			}
			// Start times count in 10 ms ticks: a process in a later tick
			// (a real pid wrap takes much longer than one). A sleep, as
			// what must pass is clock time itself, with no event to await.
			time.Sleep(30 * time.Millisecond)
			_ = peer.Process.Kill()
			_ = peer.Wait()
			_ = os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0)
			clean = exec.Command("sleep", "60")
			clean.Env = []string{"PATH=" + os.Getenv("PATH")}
			clean.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := clean.Start(); err == nil {
				reused = clean.Process.Pid == pid
			}
			return nil
		}})
		d := g.Check(context.Background(), pid, os.Getuid())
		if clean != nil && clean.Process != nil {
			_ = clean.Process.Kill()
			_ = clean.Wait()
		}
		if !reused {
			// Another process of the machine forked in between: try again.
			if attempt == 20 {
				t.Skip("the pid was never reused in 20 attempts (a busy machine)")
			}
			continue
		}
		if d.Allowed || d.Rule != RuleUnresolved || !strings.Contains(d.Reason, "pid reuse") {
			t.Fatalf("a peer with HERDR_PANE_ID whose pid was reused during the check: allowed=%v rule=%q reason=%q", d.Allowed, d.Rule, d.Reason)
		}
		return
	}
}

// TestTableAsksOnlyNewPanes (issue 26): every table lists the panes anew, but asks
// pane.process_info only of a pane the last table did not have (a pane's shell is fixed for its
// terminal's life); a pane made since is asked and its shell refused; a known pane's
// foreground job is read from its shell's tpgid, as herdr does.
func TestTableAsksOnlyNewPanes(t *testing.T) {
	calls := &herdrd.CallCounter{}
	dir, sock := serveStandin(t, calls)
	ctx := context.Background()
	hc := herdr.New(sock)
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: w.Workspace.WorkspaceID, Cwd: dir}); err != nil {
			t.Fatal(err)
		}
	}
	g := newTestGuard(sock)
	g.opt.TableTTL = time.Nanosecond // every check builds a table
	if d := g.Check(ctx, os.Getpid(), os.Getuid()); !d.Allowed {
		t.Fatalf("this test process refused: %+v", d)
	}
	calls.Take("pane.list")
	if n := calls.Take("pane.process_info"); n != 3 {
		t.Fatalf("first table: pane.process_info asked %d times, want 3 (one per pane)", n)
	}
	if d := g.Check(ctx, os.Getpid(), os.Getuid()); !d.Allowed {
		t.Fatalf("this test process refused: %+v", d)
	}
	if l, n := calls.Take("pane.list"), calls.Take("pane.process_info"); l < 1 || n != 0 {
		t.Fatalf("second table: pane.list %d, pane.process_info %d times, want ≥1 and 0", l, n)
	}
	if len(g.tab.shells) != 3 {
		t.Fatalf("second table has %d shells, want 3: %v", len(g.tab.shells), g.tab.shells)
	}

	// A pane made since: asked once, and its shell refused.
	tc, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: w.Workspace.WorkspaceID, Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := hc.PaneProcessInfo(ctx, tc.RootPane.PaneID)
	if err != nil {
		t.Fatal(err)
	}
	calls.Take("pane.process_info")
	if d := g.Check(ctx, pi.ShellPID, os.Getuid()); d.Allowed || d.Rule != RulePaneSession || d.Pane != tc.RootPane.PaneID {
		t.Fatalf("the new pane's shell: %+v", d)
	}
	if n := calls.Take("pane.process_info"); n != 1 {
		t.Fatalf("table after a new pane: pane.process_info asked %d times, want 1", n)
	}

	// A foreground job in a known pane: its group is in the next table, as herdr would say.
	if err := hc.PaneSendInput(ctx, w.RootPane.PaneID, "sleep 30", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	var fg int
	wait.For(t, 10*time.Second, "a foreground job in the first pane", func() (bool, string) {
		p, err := hc.PaneProcessInfo(ctx, w.RootPane.PaneID)
		if err != nil {
			return false, err.Error()
		}
		fg = p.ForegroundProcessGroupID
		return fg > 0 && fg != p.ShellPID, fmt.Sprint(p)
	})
	calls.Take("pane.process_info")
	if d := g.Check(ctx, os.Getpid(), os.Getuid()); !d.Allowed {
		t.Fatalf("this test process refused: %+v", d)
	}
	if n := calls.Take("pane.process_info"); n != 0 {
		t.Fatalf("pane.process_info asked %d times of known panes", n)
	}
	if ref, ok := g.tab.fg[fg]; !ok || ref.pane != w.RootPane.PaneID {
		t.Fatalf("foreground group %d of pane %s not in the table: %v", fg, w.RootPane.PaneID, g.tab.fg)
	}
}
