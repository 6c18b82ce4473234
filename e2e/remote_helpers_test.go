package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/fleetd"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/nsrelay"
)

// Helpers of the remote tool call tests: two managers federated over one
// broker, alpha on the host and beta in a network namespace of its own
// reaching the broker only through testbed/nsrelay (docs/ARCHITECTURE.md
// "Simulated hosts in tests"), so nothing but the broker joins them.

// fedHostEnv is one manager of a fedPair.
type fedHostEnv struct {
	*harness.Env
	host   string             // its [federation] host id
	key    ed25519.PrivateKey // its federation key
	events string             // its fleetd stand-ins' events file
	serve  *harness.Serve     // its running serve (nil before startServe)
}

// fedPair is alpha and beta, federated on vhost of broker b.
type fedPair struct {
	b           *brokertest.Broker
	vhost       string
	alpha, beta *fedHostEnv
	ns          *netns.NS
	relay       *nsrelay.Relay
}

// fedPairOpts tune newFedPair.
type fedPairOpts struct {
	alphaFleets, betaFleets []string
	// alphaManager are extra [manager] lines of alpha's (call_timeout …).
	alphaManager string
	// heartbeat is both hosts' [federation] heartbeat (default 500ms).
	heartbeat string
	// betaTrusts are extra trust lines in beta's [federation] trust.
	betaTrusts []string
	// alphaCaps are the capabilities beta's trust line for alpha gives
	// ("" = all).
	alphaCaps string
}

// newFedPair builds alpha (on the host) and beta (in a namespace) with
// their fleets started, each trusting the other, and starts both serves.
func newFedPair(t *testing.T, b *brokertest.Broker, o fedPairOpts) *fedPair {
	t.Helper()
	if o.heartbeat == "" {
		o.heartbeat = "500ms"
	}
	tag := brokertest.Unique("f16")
	suffix := tag[len(tag)-6:]
	p := &fedPair{b: b, vhost: tag + "-fed"}
	p.alpha = newFedHostEnv(t, b, nil, "alpha-"+suffix, tag+"a", o.alphaManager, o.alphaFleets)
	p.ns = netns.New(t, "beta")
	p.relay = nsrelay.StartFor(t, p.ns, bins.NSRelay, b.MgmtURL, b.AMQPURL)
	p.beta = newFedHostEnv(t, b, p.ns, "beta-"+suffix, tag+"b", "", o.betaFleets)
	b.Cleanup(t, []string{p.vhost}, []string{federation.BrokerUser(p.alpha.host), federation.BrokerUser(p.beta.host)})

	alphaLine := identity.FormatTrustLine(p.alpha.host, identity.PublicKey(p.alpha.key), identity.CapAll)
	if o.alphaCaps != "" {
		alphaLine += " " + o.alphaCaps
	}
	betaLine := identity.FormatTrustLine(p.beta.host, identity.PublicKey(p.beta.key), identity.CapAll)
	p.alpha.federate(t, p.vhost, o.heartbeat, []string{betaLine})
	p.beta.federate(t, p.vhost, o.heartbeat, append([]string{alphaLine}, o.betaTrusts...))
	for _, f := range o.alphaFleets {
		p.alpha.MustRun("start", f)
	}
	for _, f := range o.betaFleets {
		p.beta.MustRun("start", f)
	}
	p.alpha.startServe()
	p.beta.startServe()
	return p
}

// newFedHostEnv is one manager's Env with fleets on the stand-ins, each
// fleet with a vhost and broker user of its own, the stand-ins recording
// their events to a file of the Env's.
func newFedHostEnv(t *testing.T, b *brokertest.Broker, ns *netns.NS, host, tag, managerExtra string, names []string) *fedHostEnv {
	t.Helper()
	var hf []harness.Fleet
	var vhosts, users []string
	for _, n := range names {
		vhost, user := tag+"/"+n, tag+"-"+n
		vhosts, users = append(vhosts, vhost), append(users, user)
		hf = append(hf, harness.Fleet{Name: n, Extra: fmt.Sprintf("vhost = %q\nbroker_user = %q\n", vhost, user)})
	}
	extra := managerExtra + "\npass_env = [\"STANDIN_FLEETD_EVENTS\"]\n" +
		fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = %q\nadmin_user_env = %q\nadmin_password_env = %q\n",
			b.MgmtURL, b.AMQPURL, brokertest.EnvUser, brokertest.EnvPassword)
	var e *harness.Env
	if ns != nil {
		e = harness.NewEnvIn(t, bins, ns, extra, hf...)
	} else {
		e = harness.NewEnv(t, bins, extra, hf...)
	}
	h := &fedHostEnv{Env: e, host: host, events: filepath.Join(e.Dir, "events")}
	e.Environ = append(e.Environ, brokertest.EnvUser+"="+b.User, brokertest.EnvPassword+"="+b.Password,
		"STANDIN_FLEETD_EVENTS="+h.events)
	b.Cleanup(t, vhosts, users)
	var err error
	if h.key, _, err = identity.LoadOrCreateKey(filepath.Join(e.StateDir, "federation.key")); err != nil {
		t.Fatal(err)
	}
	return h
}

// federate appends the [federation] table to the Env's fleets.toml.
func (h *fedHostEnv) federate(t *testing.T, vhost, heartbeat string, trust []string) {
	t.Helper()
	q := make([]string, len(trust))
	for i, l := range trust {
		q[i] = strconv.Quote(l)
	}
	f, err := os.OpenFile(h.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "\n[federation]\nhost = %q\nvhost = %q\nheartbeat = %q\ntrust = [%s]\n",
		h.host, vhost, heartbeat, strings.Join(q, ", ")); err != nil {
		t.Fatal(err)
	}
}

// startServe starts (or starts again) the Env's serve.
func (h *fedHostEnv) startServe() *harness.Serve {
	h.serve = h.StartServe()
	return h.serve
}

// killServe kills the Env's serve with SIGKILL (its fleets keep running)
// and waits until the process is gone (reaped by the harness).
func (h *fedHostEnv) killServe(t *testing.T) { h.signalServe(t, syscall.SIGKILL) }

// stopServe stops the Env's serve cleanly (SIGTERM: it announces its host
// offline) and waits until the process is gone.
func (h *fedHostEnv) stopServe(t *testing.T) { h.signalServe(t, syscall.SIGTERM) }

func (h *fedHostEnv) signalServe(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid := h.serve.Cmd.Process.Pid
	if err := h.serve.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("serve %d did not die", pid)
		}
	}
}

// remoteClient is a Go SDK client session on a mount with the progress
// notifications it received.
type remoteClient struct {
	cs       *mcp.ClientSession
	mu       sync.Mutex
	progress map[any][]*mcp.ProgressNotificationParams
}

// connectRemoteHTTP connects to e's HTTP mount (messages of any size).
func connectRemoteHTTP(t testing.TB, e *harness.Env) *remoteClient {
	t.Helper()
	c := &remoteClient{progress: map[any][]*mcp.ProgressNotificationParams{}}
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e-remote", Version: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.progress[r.Params.ProgressToken] = append(c.progress[r.Params.ProgressToken], r.Params)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.URL(), HTTPClient: e.HTTPClient(), MaxRetries: -1, MaxEventSize: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	c.cs = cs
	return c
}

func (c *remoteClient) progressOf(tok any) []*mcp.ProgressNotificationParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.progress[tok])
}

// callTool calls tool with args (and _meta, if any) within d.
func (c *remoteClient) callTool(t testing.TB, d time.Duration, tool string, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
}

// waitFleetEnum waits up to d until tool is listed with exactly fleets in
// its enum, and returns the whole tool list then.
func waitFleetEnum(t *testing.T, cs *mcp.ClientSession, tool string, fleets []string, d time.Duration) []*mcp.Tool {
	t.Helper()
	deadline := time.Now().Add(d)
	var last []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range res.Tools {
			if tl.Name == tool {
				if last = fleetEnum(t, tl); slices.Equal(last, fleets) {
					return res.Tools
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fleet enum %v, want %v (after %s)", tool, last, fleets, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// whoami decodes a fleet_whoami result.
func whoami(t testing.TB, res *mcp.CallToolResult) fleetd.WhoamiResult {
	t.Helper()
	if res.IsError {
		t.Fatalf("fleet_whoami: tool error: %s", textOf(res))
	}
	var w fleetd.WhoamiResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("fleet_whoami: %s: %v", b, err)
	}
	return w
}

// requestID returns _meta giving a call the stand-in's request id id.
func requestID(id string) mcp.Meta { return mcp.Meta{fleetd.RequestIDMetaKey: id} }

// executions counts the executions of request id in an events file.
func executions(events, id string) int {
	b, _ := os.ReadFile(events)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "executed ") && strings.HasSuffix(l, " request-id="+id) {
			n++
		}
	}
	return n
}

// waitEvent waits up to d for an events file to hold line.
func waitEvent(t *testing.T, events, line string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(events)
		if slices.Contains(strings.Split(string(b), "\n"), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q within %s; it holds:\n%s", events, line, d, b)
		}
	}
}
