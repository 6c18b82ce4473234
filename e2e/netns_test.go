package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/nsrelay"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestNetnsSimulatedHost, on each broker, proves the equipment for
// simulating hosts (testbed/netns, testbed/nsrelay, harness.NewEnvIn):
// alpha is a manager on the host, beta one in a network namespace of its
// own reaching the broker only through the relay's unix socket.
//   - beta starts a fleet with a [broker] table: its vhost is made through
//     the relayed management API, and its fleetd's AMQP connection goes
//     through the relay;
//   - beta's fleetd answers inside the namespace and refuses connections
//     from the host; alpha's fleetd is unreachable from inside;
//   - the guard works inside: beta's serve answers beta's CLI over its unix
//     socket, serves a plain process inside, and refuses one with
//     HERDR_PANE_ID and one in a pane of beta's fleet, naming the pid it
//     resolved through the namespace's own sockets;
//   - killing the relay cuts beta's fleetd and manager off the broker;
//     restarting it lets the fleetd reconnect.
func TestNetnsSimulatedHost(t *testing.T) {
	brokertest.Each(t, testNetnsSimulatedHost)
}

func testNetnsSimulatedHost(t *testing.T, b *brokertest.Broker) {
	// alpha first, its fleet running, so beta's ports (chosen free on the
	// host) are none of alpha's.
	alpha, _ := brokerEnv(t, b, "docs")
	alpha.MustRun("start", "docs")

	ns := netns.New(t, "beta")
	relay := nsrelay.StartFor(t, ns, bins.NSRelay, b.MgmtURL, b.AMQPURL)
	mgmtPort, amqpPort := relay.Ports[0], relay.Ports[1]
	beta, fl := brokerEnvIn(t, b, ns, "kb")
	kbPort := beta.Ports["kb"]

	// The vhost step through the relayed management API.
	r := beta.MustRun("start", "kb")
	if !strings.Contains(r.Stdout, "kb: vhost") || !strings.Contains(r.Stdout, "created") {
		t.Errorf("start output has no vhost step:\n%s", r.Stdout)
	}
	if n := relay.Conns("outer", mgmtPort); n == 0 {
		t.Fatalf("no management API connection went through the relay:\n%s", relay.Log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ok, err := b.Admin(t).VhostExists(ctx, fl["kb"].vhost); !ok || err != nil {
		t.Fatalf("beta's vhost %q seen from the host: exists=%v err=%v", fl["kb"].vhost, ok, err)
	}

	// fleetd's AMQP connection through the relay: a member spawned inside
	// gets its inbox, seen from the host.
	fleetdLog := filepath.Join(beta.StateDir, "fleets", "kb", "fleetd.log")
	waitFileHas(t, fleetdLog, "fleet=kb broker connected", 20*time.Second)
	if relay.Conns("outer", amqpPort) == 0 {
		t.Fatalf("no AMQP connection went through the relay:\n%s", relay.Log())
	}
	spawnMemberIn(t, beta, kbPort, "m1")
	if _, _, err := broker.QueueDepth(dialT(t, fleetURI(t, beta, b, fl["kb"])), "agent.m1.inbox"); err != nil {
		t.Fatalf("agent.m1.inbox of beta's member, from the host: %v", err)
	}

	// beta's fleetd: inside yes, from the host no; alpha's: from inside no.
	if h, _, err := lifecycle.Probe(ctx, beta.HTTPClient(), kbPort); err != nil || h.Name != "kb" {
		t.Fatalf("beta's fleetd probed inside: %+v %v", h, err)
	}
	refused(t, "beta's fleetd from the host", func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", kbPort), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if h, _, err := lifecycle.Probe(ctx, http.DefaultClient, alpha.Ports["docs"]); err != nil || h.Name != "docs" {
		t.Fatalf("alpha's fleetd probed from the host: %+v %v", h, err)
	}
	refused(t, "alpha's fleetd from inside beta", func() error {
		c, err := beta.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", alpha.Ports["docs"]))
		if err == nil {
			c.Close()
		}
		return err
	})

	// The guard inside the namespace.
	serve := beta.StartServe()
	refused(t, "beta's serve from the host", func() error {
		resp, err := http.Get("http://" + beta.Listen + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	// beta's CLI through serve's unix socket: the daemon stops and starts
	// kb (and logs each step, the vhost step through the relay), the CLI
	// only asks.
	beta.MustRun("stop", "kb", "--yes") // m1 lives: a stop without --yes is refused
	beta.MustRun("start", "kb")
	for _, want := range []string{`msg="stop step" fleet=kb step=fleetd`, `msg="start step" fleet=kb step=vhost`, `msg="start step" fleet=kb step=fleetd`} {
		if !strings.Contains(serve.Log(), want) {
			t.Errorf("serve's log has no %s: the CLI's stop and start did not go through it:\n%s", want, serve.Log())
		}
	}
	if v := beta.RunProbe(beta.URL()); !strings.HasPrefix(v, "OK") {
		t.Fatalf("a plain process inside beta refused: %s\n%s", v, serve.Log())
	}
	cmd := beta.Command(bins.Probe, "-url", beta.URL())
	cmd.Env = append(os.Environ(), "HERDR_PANE_ID=w1:p1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mcpprobe with HERDR_PANE_ID inside beta: %v", err)
	}
	refusedBy(t, serve, string(out), "herdr-env")
	if re := regexp.MustCompile(`rule=herdr-env pid=` + strconv.Itoa(cmd.Process.Pid) + `\b`); !re.MatchString(serve.Log()) {
		t.Errorf("the refusal does not name the probe's pid %d (resolved through the namespace's sockets):\n%s", cmd.Process.Pid, serve.Log())
	}
	refusedBy(t, serve, probeInPane(t, beta, beta.HerdrSocket("kb"), "nspane", ""), "pane-session")

	// Killing the relay cuts beta off the broker.
	lostBefore := strings.Count(readFile(t, fleetdLog), "broker connection lost")
	relay.Kill()
	waitCount(t, fleetdLog, "fleet=kb broker connection lost", lostBefore+1, 20*time.Second)
	refused(t, "the management API inside beta after the relay died", func() error {
		c, err := beta.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", mgmtPort))
		if err == nil {
			c.Close()
		}
		return err
	})
	if st := statusBroker(t, beta, "kb"); !st.Configured || st.Reachable {
		t.Errorf("beta's status of kb with the relay dead: %+v, want configured and unreachable", st)
	}
	// And back.
	restoredBefore := strings.Count(readFile(t, fleetdLog), "broker connection restored")
	relay.Restart()
	waitCount(t, fleetdLog, "fleet=kb broker connection restored", restoredBefore+1, 30*time.Second)
	if st := statusBroker(t, beta, "kb"); !st.Reachable {
		t.Errorf("beta's status of kb with the relay back: %+v, want reachable", st)
	}
}

// refused fails the test unless dial fails with connection refused.
func refused(t *testing.T, what string, dial func() error) {
	t.Helper()
	err := dial()
	if err == nil {
		t.Fatalf("%s: connected", what)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: %v, want connection refused", what, err)
	}
}

// logStamp is the timestamp the log pipe begins each line of a fleet's log
// with (lifecycle/logtime.go: UTC, milliseconds, a space).
var logStamp = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `)

// unstamped is a fleet's log file as `fleetmgr logs` shows it: the log
// pipe's timestamps taken off.
func unstamped(log string) string { return logStamp.ReplaceAllString(log, "") }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// waitCount waits up to d for path to hold s at least n times.
func waitCount(t *testing.T, path, s string, n int, d time.Duration) {
	t.Helper()
	wait.For(t, d, fmt.Sprintf("%q %d times in %s", s, n, path), func() (bool, string) {
		b := readFile(t, path)
		return strings.Count(b, s) >= n, b
	})
}

func waitFileHas(t *testing.T, path, s string, d time.Duration) {
	t.Helper()
	waitCount(t, path, s, 1, d)
}

// spawnMemberIn calls fleet_spawn on the fleetd at port inside e's
// namespace (this test process is outside every pane, so it is primary
// there), retrying for up to 20 s while the stand-in answers with a
// broker error.
func spawnMemberIn(t *testing.T, e *harness.Env, port int, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-netns", Version: "test"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), HTTPClient: e.HTTPClient(), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	wait.For(t, 20*time.Second, "fleet_spawn "+id+" past broker errors", func() (bool, string) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": id}})
		if err != nil {
			t.Fatal(err)
		}
		txt := textOf(res)
		if res.IsError && !strings.Contains(txt, "broker_error") {
			t.Fatalf("fleet_spawn %s: %s", id, txt)
		}
		return !res.IsError, txt
	})
}
