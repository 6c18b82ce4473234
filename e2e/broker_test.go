package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// brokerFleet is one fleet of a broker test, with a vhost and user no
// other test or run uses.
type brokerFleet struct {
	name, vhost, user string
}

// brokerEnv writes a fleets.toml with a [broker] table pointing at the
// test broker and the given fleets, each with a unique vhost and user
// (deleted when the test ends).
func brokerEnv(t *testing.T, b *brokertest.Broker, names ...string) (*harness.Env, map[string]brokerFleet) {
	t.Helper()
	return brokerEnvIn(t, b, nil, names...)
}

// brokerEnvIn is brokerEnv for a simulated host: with ns set, the Env's
// processes run in that network namespace (harness.NewEnvIn), which must
// reach the broker at the same URLs (testbed/nsrelay carries them in).
func brokerEnvIn(t *testing.T, b *brokertest.Broker, ns *netns.NS, names ...string) (*harness.Env, map[string]brokerFleet) {
	t.Helper()
	tag := brokertest.Unique("fme2e")
	fleets := map[string]brokerFleet{}
	var hf []harness.Fleet
	var vhosts, users []string
	for _, n := range names {
		bf := brokerFleet{name: n, vhost: tag + "/" + n, user: tag + "-" + n}
		fleets[n] = bf
		vhosts, users = append(vhosts, bf.vhost), append(users, bf.user)
		hf = append(hf, harness.Fleet{Name: n, Extra: fmt.Sprintf("vhost = %q\nbroker_user = %q\n", bf.vhost, bf.user)})
	}
	extra := fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = %q\nadmin_user_env = %q\nadmin_password_env = %q\n",
		b.MgmtURL, b.AMQPURL, brokertest.EnvUser, brokertest.EnvPassword)
	var e *harness.Env
	if ns != nil {
		e = harness.NewEnvIn(t, bins, ns, extra, hf...)
	} else {
		e = harness.NewEnv(t, bins, extra, hf...)
	}
	e.Environ = append(e.Environ, brokertest.EnvUser+"="+b.User, brokertest.EnvPassword+"="+b.Password)
	b.Cleanup(t, vhosts, users)
	return e, fleets
}

// fleetURI is the URI fleetmgr gives fleet n's fleetd, rebuilt from the
// password file (which must be 0600).
func fleetURI(t *testing.T, e *harness.Env, b *brokertest.Broker, bf brokerFleet) string {
	t.Helper()
	path := filepath.Join(e.StateDir, "fleets", bf.name, "broker-password")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	pw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	uri, err := broker.VhostURI(b.AMQPURL, bf.user, strings.TrimSpace(string(pw)), bf.vhost)
	if err != nil {
		t.Fatal(err)
	}
	return uri
}

func dialT(t *testing.T, uri string) *amqp.Connection {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := broker.Dial(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// spawnMember calls fleet_spawn on the fleet's own fleetd (this test
// process is outside every pane, so it is primary there), retrying for up
// to d while the stand-in answers with a broker error.
func spawnMember(t *testing.T, port int, id string, d time.Duration) string {
	t.Helper()
	cs := connect(t, fmt.Sprintf("http://127.0.0.1:%d/mcp", port))
	var txt string
	wait.For(t, d, "fleet_spawn "+id+" past broker errors", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": id}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		txt = textOf(res)
		if res.IsError && !strings.Contains(txt, "broker_error") {
			t.Fatalf("fleet_spawn %s: %s", id, txt)
		}
		return !res.IsError, txt
	})
	return txt
}

// TestBrokerTwoFleetsIsolated, on each broker: two fleets → two vhosts;
// each fleet's user opens its own vhost and is refused on the other's;
// fleetd gets the URI in broker_uri_env; a member spawned in kb gets
// agent.<id>.inbox in kb's vhost only.
func TestBrokerTwoFleetsIsolated(t *testing.T) {
	brokertest.Each(t, testBrokerTwoFleetsIsolated)
}

func testBrokerTwoFleetsIsolated(t *testing.T, b *brokertest.Broker) {
	e, fl := brokerEnv(t, b, "kb", "docs")
	r := e.MustRun("start", "kb")
	if !strings.Contains(r.Stdout, "kb: vhost") || !strings.Contains(r.Stdout, "created") {
		t.Errorf("start output has no vhost step:\n%s", r.Stdout)
	}
	e.MustRun("start", "docs")

	admin := b.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, bf := range fl {
		if ok, err := admin.VhostExists(ctx, bf.vhost); !ok || err != nil {
			t.Fatalf("vhost %q of %s: exists=%v err=%v", bf.vhost, bf.name, ok, err)
		}
	}
	kbURI, docsURI := fleetURI(t, e, b, fl["kb"]), fleetURI(t, e, b, fl["docs"])

	// fleetd got its own URI, under the default variable name, plus the name.
	kb := readState(t, e, "kb")
	env, err := procfs.Environ(kb.Fleetd.PID)
	if err != nil {
		t.Fatal(err)
	}
	if !containsLine(env, "FLEET_BROKER_URI="+kbURI) || !containsLine(env, "FLEET_BROKER_URI_ENV=FLEET_BROKER_URI") {
		t.Errorf("kb fleetd env lacks its broker URI (want %s)", broker.Redact(kbURI))
	}
	if !strings.Contains(kbURI, "%2Fkb") {
		t.Errorf("vhost not path-escaped in %s", broker.Redact(kbURI))
	}

	// Own vhost: open. The other's: refused, both ways.
	kbConn := dialT(t, kbURI)
	docsConn := dialT(t, docsURI)
	cross := func(uri, otherVhost string) string {
		u, _ := amqp.ParseURI(uri)
		x, _ := broker.VhostURI(b.AMQPURL, u.Username, u.Password, otherVhost)
		return x
	}
	for _, c := range []struct{ who, uri string }{
		{"kb → docs", cross(kbURI, fl["docs"].vhost)},
		{"docs → kb", cross(docsURI, fl["kb"].vhost)},
	} {
		conn, err := broker.Dial(ctx, c.uri)
		if err == nil {
			conn.Close()
			t.Fatalf("%s: opened the other fleet's vhost", c.who)
		}
		if !broker.IsAccessRefused(err) {
			t.Fatalf("%s: %v, want an access refusal", c.who, err)
		}
		t.Logf("%s refused: %v", c.who, err)
	}

	// A member spawned in kb: inbox in kb's vhost, not in docs's.
	row := spawnMember(t, e.Ports["kb"], "m1", 0)
	if !strings.Contains(row, `"fleet":"kb"`) {
		t.Errorf("spawn row does not name kb: %s", row)
	}
	if _, _, err := broker.QueueDepth(kbConn, "agent.m1.inbox"); err != nil {
		t.Fatalf("kb's vhost: agent.m1.inbox: %v", err)
	}
	if _, _, err := broker.QueueDepth(docsConn, "agent.m1.inbox"); !errors.Is(err, broker.ErrQueueMissing) {
		t.Fatalf("docs's vhost: agent.m1.inbox: %v, want missing", err)
	}
	qs, err := admin.ListQueues(ctx, fl["docs"].vhost)
	if err != nil || len(qs) != 0 {
		t.Fatalf("docs's vhost queues: %+v %v, want none", qs, err)
	}
	if log, _ := os.ReadFile(filepath.Join(e.StateDir, "fleets", "kb", "fleetd.log")); !strings.Contains(string(log), "fleet=kb broker connected") ||
		strings.Contains(string(log), strings.TrimPrefix(kbURI, "amqp://")) {
		t.Errorf("fleetd log: want the broker line naming kb and no password:\n%s", log)
	}

	// list shows the vhosts.
	if r := e.MustRun("list"); !strings.Contains(r.Stdout, fl["kb"].vhost) {
		t.Errorf("list does not show kb's vhost:\n%s", r.Stdout)
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// TestBrokerDownAtStart: a management API that does not answer fails the
// start with a message naming its URL, and nothing is left running.
func TestBrokerDownAtStart(t *testing.T) {
	dead := "http://127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	extra := fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = \"amqp://127.0.0.1:1\"\n", dead)
	e := harness.NewEnv(t, bins, extra, harness.Fleet{Name: "kb"})
	e.Environ = append(e.Environ, registry.DefaultAdminUserEnv+"=admin", registry.DefaultAdminPasswordEnv+"=pw")
	t0 := time.Now()
	r := e.Run("start", "kb")
	if r.Code == 0 {
		t.Fatalf("start succeeded with the broker down:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, dead) {
		t.Fatalf("error does not name the management URL %s:\n%s", dead, r.Stderr)
	}
	t.Logf("failed after %v: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(r.Stderr))
	st := readState(t, e, "kb")
	if st.Fleetd != nil || st.Herdr != nil || st.Phase != lifecycle.PhaseFailed {
		t.Fatalf("state after a failed start: %+v", st)
	}
	if _, err := herdr.New(e.HerdrSocket("kb")).Ping(context.Background()); err == nil {
		t.Fatal("kb's herdr session is running")
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", e.Ports["kb"]), time.Second); err == nil {
		c.Close()
		t.Fatal("something listens on kb's port")
	}
	// No password file either: the vhost step failed at its first request.
	if _, err := os.Stat(filepath.Join(e.StateDir, "fleets", "kb", "broker-password")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("broker-password: %v", err)
	}
}

// TestBrokerRestartWhileRunning, on each broker: the broker stopped and
// started again under a running fleet (RabbitMQ's application, LavinMQ's
// process; brokertest.Broker.Stop): fleetd keeps running; VhostHealth
// (what status shows) goes unreachable, then reachable; the durable inbox
// survives; a member spawned afterwards gets its inbox (the stand-in
// redialled).
func TestBrokerRestartWhileRunning(t *testing.T) {
	brokertest.EachExclusive(t, testBrokerRestartWhileRunning)
}

func testBrokerRestartWhileRunning(t *testing.T, b *brokertest.Broker) {
	e, fl := brokerEnv(t, b, "kb")
	e.MustRun("start", "kb")
	before := readState(t, e, "kb")

	cfg, err := registry.Load(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.AllocatePorts(); err != nil {
		t.Fatal(err)
	}
	m := lifecycle.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), e.Environ)
	health := func() (bool, map[string]int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return m.VhostHealth(ctx, "kb")
	}
	spawnMember(t, e.Ports["kb"], "m1", 0)
	if ok, depths, err := health(); !ok || err != nil || len(depths) != 1 {
		t.Fatalf("before: reachable=%v depths=%v err=%v", ok, depths, err)
	}

	t0 := time.Now()
	b.Stop(t)
	var downErr error
	wait.For(t, 20*time.Second, b.Name+": vhost unreachable after the broker stopped", wait.Bool(func() bool {
		ok, _, err := health()
		downErr = err
		return !ok
	}))
	t.Logf("while stopped: unreachable: %v", downErr)
	if st := statusBroker(t, e, "kb"); !st.Configured || st.Reachable {
		t.Errorf("fleetmgr status while the broker is stopped: %+v, want configured and unreachable", st)
	}
	// fleetd noticed, and still answers.
	wait.LogLine(t, 20*time.Second, wait.File(filepath.Join(e.StateDir, "fleets", "kb", "fleetd.log")), "broker connection lost")
	if h, _, err := lifecycle.Probe(context.Background(), http.DefaultClient, e.Ports["kb"]); err != nil || h.Name != "kb" {
		t.Fatalf("fleetd while the broker is down: %+v %v", h, err)
	}
	b.Start(t)
	var depths map[string]int
	wait.For(t, 30*time.Second, "the vhost reachable again", func() (bool, string) {
		ok, d, err := health()
		depths = d
		return ok && err == nil, fmt.Sprint(err)
	})
	t.Logf("broker back after %v; depths %v", time.Since(t0).Round(time.Millisecond), depths)
	if st := statusBroker(t, e, "kb"); !st.Reachable || st.Vhost != fl["kb"].vhost {
		t.Errorf("fleetmgr status after the broker came back: %+v, want reachable", st)
	}
	if _, ok := depths["agent.m1.inbox"]; !ok {
		t.Errorf("durable agent.m1.inbox lost across the restart: %v", depths)
	}
	after := readState(t, e, "kb")
	if after.Fleetd == nil || after.Fleetd.PID != before.Fleetd.PID || !procAlive(after.Fleetd.PID) {
		t.Fatalf("fleetd did not keep running: before %+v after %+v", before.Fleetd, after.Fleetd)
	}
	// The stand-in reconnected: a new member gets its inbox.
	spawnMember(t, e.Ports["kb"], "m2", 20*time.Second)
	conn := dialT(t, fleetURI(t, e, b, fl["kb"]))
	if _, _, err := broker.QueueDepth(conn, "agent.m2.inbox"); err != nil {
		t.Fatalf("agent.m2.inbox after the restart: %v", err)
	}
}

// statusBroker is the broker part of `fleetmgr status NAME --json --local`
// (fed by lifecycle.VhostHealth).
type statusBrokerRow struct {
	Configured bool           `json:"configured"`
	Vhost      string         `json:"vhost"`
	Reachable  bool           `json:"reachable"`
	Inboxes    map[string]int `json:"inboxes"`
	Note       string         `json:"note"`
}

func statusBroker(t *testing.T, e *harness.Env, name string) statusBrokerRow {
	t.Helper()
	r := e.Run("status", name, "--json", "--local", "--interval", "200ms")
	var rep struct {
		Fleets []struct {
			Name   string           `json:"name"`
			Broker *statusBrokerRow `json:"broker"`
		} `json:"fleets"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("fleetmgr status --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	for _, f := range rep.Fleets {
		if f.Name == name && f.Broker != nil {
			return *f.Broker
		}
	}
	t.Fatalf("fleetmgr status --json has no broker row for %s:\n%s", name, r.Stdout)
	return statusBrokerRow{}
}

func procAlive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// TestBrokerStopStartKeepsMessages, on each broker: stop never deletes
// the vhost, the user or queued messages; `vhost delete` needs its flag and
// a stopped fleet.
func TestBrokerStopStartKeepsMessages(t *testing.T) {
	brokertest.Each(t, testBrokerStopStartKeepsMessages)
}

func testBrokerStopStartKeepsMessages(t *testing.T, b *brokertest.Broker) {
	e, fl := brokerEnv(t, b, "kb")
	e.MustRun("start", "kb")
	uri := fleetURI(t, e, b, fl["kb"])
	conn := dialT(t, uri)
	if err := broker.DeclareDurableQueue(conn, "agent.keep.inbox"); err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "agent.keep.inbox", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("survive stop")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	conn.Close()

	// While running, vhost delete is refused even with the flag.
	if r := e.Run("vhost", "delete", "kb", "--yes-delete-messages"); r.Code == 0 || !strings.Contains(r.Stderr, "stop it first") {
		t.Fatalf("vhost delete of a running fleet: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	e.MustRun("stop", "kb")
	admin := b.Admin(t)
	if ok, err := admin.VhostExists(ctx, fl["kb"].vhost); !ok || err != nil {
		t.Fatalf("vhost after stop: %v %v", ok, err)
	}
	r := e.MustRun("start", "kb")
	if !strings.Contains(r.Stdout, "exists") {
		t.Errorf("second start did not find the vhost existing:\n%s", r.Stdout)
	}
	if again := fleetURI(t, e, b, fl["kb"]); again != uri {
		t.Fatal("the fleet's password changed across stop/start")
	}
	conn = dialT(t, uri)
	n, _, err := broker.QueueDepth(conn, "agent.keep.inbox")
	if err != nil || n != 1 {
		t.Fatalf("after stop+start: depth %d, %v; want the 1 message published before stop", n, err)
	}
	conn.Close()

	// vhost delete: refused without the flag, and while running; done once stopped.
	e.MustRun("stop", "kb")
	if r := e.Run("vhost", "delete", "kb"); r.Code == 0 || !strings.Contains(r.Stderr, "--yes-delete-messages") {
		t.Fatalf("vhost delete without the flag: exit %d\n%s", r.Code, r.Stderr)
	}
	if ok, _ := admin.VhostExists(ctx, fl["kb"].vhost); !ok {
		t.Fatal("vhost deleted without the flag")
	}
	if r := e.MustRun("vhost", "delete", "kb", "--yes-delete-messages"); !strings.Contains(r.Stdout, "deleted") {
		t.Errorf("vhost delete output: %s", r.Stdout)
	}
	if ok, err := admin.VhostExists(ctx, fl["kb"].vhost); ok || err != nil {
		t.Fatalf("vhost still there after delete: %v %v", ok, err)
	}
}

// startStandin runs the fleetd stand-in by hand as fleet name on port, with
// no herdr, and waits until /healthz answers.
func startStandin(t *testing.T, name string, port int) {
	t.Helper()
	cmd := exec.Command(bins.Fleetd)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLEET_NAME=" + name, "FLEET_PORT=" + strconv.Itoa(port),
		"FLEET_HERDR_SOCKET=" + filepath.Join(t.TempDir(), "none.sock"), "FLEET_LEAD_LAUNCH=0"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	wait.For(t, 10*time.Second, fmt.Sprintf("stand-in %s up on %d", name, port), wait.Bool(func() bool {
		h, _, err := lifecycle.Probe(context.Background(), http.DefaultClient, port)
		return err == nil && h.Name == name
	}))
}

// TestIdentityOnPort: kb's port answered by a fleetd named docs, or by a
// foreign process: `fleetmgr start kb` refuses, naming both, and starts
// nothing. Runs without a broker (and so says "no broker configured").
func TestIdentityOnPort(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	if r := e.MustRun("list"); !strings.Contains(r.Stdout, "no broker configured") {
		t.Errorf("list without [broker]:\n%s", r.Stdout)
	}
	noKB := func(when string) {
		t.Helper()
		if _, err := herdr.New(e.HerdrSocket("kb")).Ping(context.Background()); err == nil {
			t.Fatalf("%s: kb's herdr session is running", when)
		}
		// The port check comes before anything is recorded or started.
		if _, err := os.Stat(filepath.Join(e.StateDir, "fleets", "kb", "state.json")); err == nil {
			if st := readState(t, e, "kb"); st.Fleetd != nil || st.Herdr != nil {
				t.Fatalf("%s: kb state records processes: %+v", when, st)
			}
		}
	}

	startStandin(t, "docs", e.Ports["kb"])
	r := e.Run("start", "kb")
	if r.Code == 0 {
		t.Fatalf("start kb succeeded on a port answering as docs:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, `answers as fleet "docs", not "kb"`) {
		t.Fatalf("refusal does not name both fleets:\n%s", r.Stderr)
	}
	noKB("docs on kb's port")

	// A foreign process (a plain TCP listener, then an HTTP server that is
	// not fleetd) on docs's port.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", e.Ports["docs"]))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = bufio.NewReader(c).ReadString('\n'); c.Close() }()
		}
	}()
	r = e.Run("start", "docs")
	l.Close()
	if r.Code == 0 || !strings.Contains(r.Stderr, "not a fleetd") || !strings.Contains(r.Stderr, strconv.Itoa(e.Ports["docs"])) {
		t.Fatalf("foreign listener: exit %d\n%s", r.Code, r.Stderr)
	}
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", e.Ports["docs"]), Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"hello": "world"})
	})}
	hl, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(hl) }()
	defer srv.Close()
	r = e.Run("start", "docs")
	if r.Code == 0 || !strings.Contains(r.Stderr, "not a fleetd") {
		t.Fatalf("foreign HTTP server: exit %d\n%s", r.Code, r.Stderr)
	}
	if _, err := herdr.New(e.HerdrSocket("docs")).Ping(context.Background()); err == nil {
		t.Fatal("docs's herdr session is running after a refused start")
	}
}

// TestCheck: `fleetmgr check` exits non-zero naming both lines of a shared
// vhost; on a good config with a live broker it reports no errors.
func TestCheck(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb", Extra: "vhost = \"shared\""}, harness.Fleet{Name: "docs", Extra: "vhost = \"shared\""})
	body, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i, l := range strings.Split(string(body), "\n") {
		if l == `vhost = "shared"` {
			lines = append(lines, fmt.Sprintf("fleets.toml:%d", i+1))
		}
	}
	if len(lines) != 2 {
		t.Fatalf("config has %d vhost lines", len(lines))
	}
	r := e.Run("check")
	if r.Code == 0 {
		t.Fatalf("check passed a shared vhost:\n%s", r.Stdout)
	}
	for _, l := range lines {
		if !strings.Contains(r.Stdout, l) {
			t.Errorf("check output does not name %s:\n%s", l, r.Stdout)
		}
	}
	r = e.Run("check", "--json")
	var rep struct {
		OK       bool `json:"ok"`
		Findings []struct{ Check, Severity, Subject, Message, Fix string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || rep.OK || r.Code == 0 {
		t.Fatalf("check --json: exit %d, %v\n%s", r.Code, err, r.Stdout)
	}

	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		good, _ := brokerEnv(t, b, "kb", "docs")
		r := good.Run("check", "--json")
		var rep struct {
			OK       bool `json:"ok"`
			Findings []struct{ Check, Severity, Subject, Message, Fix string }
		}
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || !rep.OK || r.Code != 0 {
			t.Fatalf("check on a good config: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
		}
		seen := map[string]int{}
		for _, f := range rep.Findings {
			seen[f.Check+"/"+f.Severity]++
		}
		// herdr: `session list` answers, and herdr_bin's version (no session runs).
		if seen["broker/ok"] != 2 || seen["herdr/ok"] != 2 || seen["vhost/info"] != 2 || seen["config/ok"] != 1 {
			t.Errorf("findings %v:\n%s", seen, r.Stdout)
		}
		// Wrong admin password: an error naming the management URL.
		good.Environ = append(good.Environ, brokertest.EnvPassword+"=wrong")
		r = good.Run("check")
		if r.Code == 0 || !strings.Contains(r.Stdout, b.MgmtURL) || !strings.Contains(r.Stdout, "401") {
			t.Errorf("check with a wrong admin password: exit %d\n%s", r.Code, r.Stdout)
		}
	})
}

// TestCheckNamesBroker, on each broker: `fleetmgr check` names the broker
// and the version its own command-line tool reports, in words and in
// --json; on LavinMQ it names the missing topic permissions and what
// fleetmgr does instead, on RabbitMQ nothing is missing.
func TestCheckNamesBroker(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		e, _ := brokerEnv(t, b, "kb")
		version, ok := b.ToolVersion(t)
		if !ok {
			caps, err := b.Admin(t).Capabilities(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			version = caps.Version
		}
		r := e.Run("check")
		if r.Code != 0 {
			t.Fatalf("check: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
		if want := fmt.Sprintf("management API answers (%s %s", b.Product, version); !strings.Contains(r.Stdout, want) {
			t.Errorf("%s: check does not say %q:\n%s", b.Name, want, r.Stdout)
		}
		missingLine := b.Product + " " + version + " has no topic permissions (topic_permissions)"
		if got := strings.Contains(r.Stdout, missingLine) && strings.Contains(r.Stdout, "signatures alone carry the check"); got != (b.Name == brokertest.NameLavinMQ) {
			t.Errorf("%s: check names missing topic permissions: %v, want %v:\n%s", b.Name, got, !got, r.Stdout)
		}

		r = e.Run("check", "--json")
		var rep struct {
			OK     bool `json:"ok"`
			Broker *struct {
				ManagementURL     string          `json:"management_url"`
				Product           string          `json:"product"`
				Version           string          `json:"version"`
				ManagementVersion string          `json:"management_version"`
				Capabilities      map[string]bool `json:"capabilities"`
				Missing           []struct {
					Capability string `json:"capability"`
					UsedFor    string `json:"used_for"`
					Instead    string `json:"instead"`
				} `json:"missing"`
			} `json:"broker"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || !rep.OK || rep.Broker == nil {
			t.Fatalf("%s: check --json: exit %d, %v\n%s", b.Name, r.Code, err, r.Stdout)
		}
		br := rep.Broker
		if br.ManagementURL != b.MgmtURL || br.Product != b.Product || br.Version != version {
			t.Errorf("%s: --json broker %+v, want %s %s at %s", b.Name, br, b.Product, version, b.MgmtURL)
		}
		topic, known := br.Capabilities["topic_permissions"]
		switch b.Name {
		case brokertest.NameRabbitMQ:
			if !known || !topic || len(br.Missing) != 0 || br.ManagementVersion == "" {
				t.Errorf("%s: --json broker %+v, want topic permissions, nothing missing, a management plugin version", b.Name, br)
			}
		case brokertest.NameLavinMQ:
			if !known || topic || len(br.Missing) != 1 || br.Missing[0].Capability != "topic_permissions" ||
				!strings.Contains(br.Missing[0].Instead, "signatures alone carry the check") {
				t.Errorf("%s: --json broker %+v, want topic_permissions missing with what fleetmgr does instead", b.Name, br)
			}
		}
	})
}
