package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/fleetd"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/nsrelay"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Helpers of the remote tool call tests: two managers federated over one
// broker, alpha on the host and beta in a network namespace of its own
// reaching the broker only through testbed/nsrelay (docs/ARCHITECTURE.md
// "Simulated hosts in tests"), so nothing but the broker joins them.

// remoteHostEnv is one manager of a remotePair.
type remoteHostEnv struct {
	*harness.Env
	host   string             // its [federation] host id
	key    ed25519.PrivateKey // its federation key
	events string             // its fleetd stand-ins' events file
	serve  *harness.Serve     // its running serve (nil before startServe)
}

// remotePair is alpha and beta, federated on vhost of broker b.
type remotePair struct {
	b           *brokertest.Broker
	vhost       string
	alpha, beta *remoteHostEnv
	ns          *netns.NS
	relay       *nsrelay.Relay
}

// remotePairOpts tune newRemotePair.
type remotePairOpts struct {
	alphaFleets, betaFleets []string
	// alphaManager and betaManager are extra [manager] lines of alpha's
	// and beta's (call_timeout, tools.deny …).
	alphaManager, betaManager string
	// heartbeat is both hosts' [federation] heartbeat (default 500ms).
	heartbeat string
	// alphaTrusts and betaTrusts are extra trust lines in alpha's and
	// beta's [federation] trust.
	alphaTrusts, betaTrusts []string
	// alphaCaps are the capabilities beta's trust line for alpha gives
	// ("" = all).
	alphaCaps string
	// sameNetwork runs beta in the host's network namespace, without the
	// relay (a benchmark's reference: what the relay's hops cost).
	sameNetwork bool
	// betaArgs are extra fleetd stand-in arguments of beta's fleets, by
	// fleet name (--ignore-term …).
	betaArgs map[string][]string
	// alphaFederation are extra lines of alpha's [federation] table
	// (control_timeout …).
	alphaFederation string
}

// newRemotePair builds alpha (on the host) and beta (in a namespace) with
// their fleets started, each trusting the other, and starts both serves.
func newRemotePair(t testing.TB, b *brokertest.Broker, o remotePairOpts) *remotePair {
	t.Helper()
	if o.heartbeat == "" {
		o.heartbeat = "500ms"
	}
	tag := brokertest.Unique("f16")
	suffix := tag[len(tag)-6:]
	p := &remotePair{b: b, vhost: tag + "-fed"}
	p.alpha = newRemoteHostEnv(t, b, nil, "alpha-"+suffix, tag+"a", o.alphaManager, o.alphaFleets)
	if !o.sameNetwork {
		p.ns = netns.New(t, "beta")
		p.relay = nsrelay.StartFor(t, p.ns, bins.NSRelay, b.MgmtURL, b.AMQPURL)
	}
	p.beta = newRemoteHostEnv(t, b, p.ns, "beta-"+suffix, tag+"b", o.betaManager, o.betaFleets, o.betaArgs)
	b.Cleanup(t, []string{p.vhost}, []string{federation.BrokerUser(p.alpha.host), federation.BrokerUser(p.beta.host)})

	alphaLine := identity.FormatTrustLine(p.alpha.host, identity.PublicKey(p.alpha.key), identity.CapAll)
	if o.alphaCaps != "" {
		alphaLine += " " + o.alphaCaps
	}
	betaLine := identity.FormatTrustLine(p.beta.host, identity.PublicKey(p.beta.key), identity.CapAll)
	p.alpha.federate(t, p.vhost, o.heartbeat, append([]string{betaLine}, o.alphaTrusts...), o.alphaFederation)
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

// newRemoteHostEnv is one manager's Env with fleets on the stand-ins, each
// fleet with a vhost and broker user of its own, the stand-ins recording
// their events to a file of the Env's.
func newRemoteHostEnv(t testing.TB, b *brokertest.Broker, ns *netns.NS, host, tag, managerExtra string, names []string, args ...map[string][]string) *remoteHostEnv {
	t.Helper()
	var hf []harness.Fleet
	var vhosts, users []string
	for _, n := range names {
		vhost, user := tag+"/"+n, tag+"-"+n
		vhosts, users = append(vhosts, vhost), append(users, user)
		f := harness.Fleet{Name: n, Extra: fmt.Sprintf("vhost = %q\nbroker_user = %q\n", vhost, user)}
		for _, a := range args {
			f.Args = append(f.Args, a[n]...)
		}
		hf = append(hf, f)
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
	h := &remoteHostEnv{Env: e, host: host, events: filepath.Join(e.Dir, "events")}
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
func (h *remoteHostEnv) federate(t testing.TB, vhost, heartbeat string, trust []string, extra ...string) {
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
	for _, l := range extra {
		if _, err := fmt.Fprintln(f, l); err != nil {
			t.Fatal(err)
		}
	}
}

// startServe starts (or starts again) the Env's serve.
func (h *remoteHostEnv) startServe() *harness.Serve {
	if dir := os.Getenv("FLEETMGR_REMOTE_BENCH_PROFILE"); dir != "" {
		// A CPU profile of this serve, written when it ends
		// (daemon/profile.go): where a remote call's time goes.
		h.Environ = append(h.Environ, "FLEETMGR_CPUPROFILE="+filepath.Join(dir, h.host+".pprof"))
	}
	h.serve = h.StartServe()
	return h.serve
}

// killServe kills the Env's serve with SIGKILL (its fleets keep running)
// and waits until the process is gone (reaped by the harness).
func (h *remoteHostEnv) killServe(t *testing.T) { h.signalServe(t, syscall.SIGKILL) }

// stopServe stops the Env's serve cleanly (SIGTERM: it announces its host
// offline) and waits until the process is gone.
func (h *remoteHostEnv) stopServe(t *testing.T) { h.signalServe(t, syscall.SIGTERM) }

func (h *remoteHostEnv) signalServe(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid := h.serve.Cmd.Process.Pid
	if err := h.serve.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("serve %d to die", pid), wait.Bool(func() bool { return syscall.Kill(pid, 0) != nil }))
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
	var tools []*mcp.Tool
	wait.For(t, d, fmt.Sprintf("%s's fleet enum %v", tool, fleets), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var last []string
		for _, tl := range res.Tools {
			if tl.Name == tool {
				if last = fleetEnum(t, tl); slices.Equal(last, fleets) {
					tools = res.Tools
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("enum %v", last)
	})
	return tools
}

// whoamiOf decodes a fleet_whoami result.
func whoamiOf(t testing.TB, res *mcp.CallToolResult) fleetd.WhoamiResult {
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

// standinRequestID returns _meta giving a call the stand-in's request id id.
func standinRequestID(id string) mcp.Meta { return mcp.Meta{fleetd.RequestIDMetaKey: id} }

// standinExecutions counts the executions of request id in an events file.
func standinExecutions(events, id string) int {
	b, _ := os.ReadFile(events)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "executed ") && strings.HasSuffix(l, " request-id="+id) {
			n++
		}
	}
	return n
}

// waitStandinEvent waits up to d for an events file to hold line.
func waitStandinEvent(t *testing.T, events, line string, d time.Duration) {
	t.Helper()
	wait.For(t, d, fmt.Sprintf("%q in %s", line, events), func() (bool, string) {
		b, _ := os.ReadFile(events)
		return slices.Contains(strings.Split(string(b), "\n"), line), "it holds:\n" + string(b)
	})
}

// remoteTestKey is a fresh ed25519 key.
func remoteTestKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// remoteAdminChannel opens a channel (publisher confirms on) on vhost as the
// broker's administrator, who may read and publish anything there.
func remoteAdminChannel(t *testing.T, b *brokertest.Broker, vhost string) *amqp.Channel {
	t.Helper()
	uri, err := broker.VhostURI(b.AMQPURL, b.User, b.Password, vhost)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := broker.Dial(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}

// captureCallRequest returns the first call-request in queue (a copy of
// fleet.control's messages for one host), waiting up to d.
func captureCallRequest(t *testing.T, ch *amqp.Channel, queue string, d time.Duration) amqp.Delivery {
	t.Helper()
	var got amqp.Delivery
	wait.For(t, d, "a call request in "+queue, wait.Bool(func() bool {
		for {
			m, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return false
			}
			if m.Headers[wire.HdrKind] == string(wire.KindCallRequest) {
				got = m
				return true
			}
		}
	}))
	return got
}

// remotePublishRaw publishes body with headers as they are, and waits for the
// broker's confirm.
func remotePublishRaw(t *testing.T, ch *amqp.Channel, exchange, key string, headers amqp.Table, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false,
		amqp.Publishing{Headers: headers, Body: body, ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to %s/%s not confirmed: %v %v", exchange, key, ok, err)
	}
}

// remotePublishSealed signs env with key and publishes it.
func remotePublishSealed(t *testing.T, ch *amqp.Channel, exchange, key string, env *wire.Envelope, signer ed25519.PrivateKey) {
	t.Helper()
	h, err := wire.Seal(env, signer)
	if err != nil {
		t.Fatal(err)
	}
	remotePublishRaw(t, ch, exchange, key, amqp.Table(h), env.Body)
}

// remoteDeadLetters are the messages read from fleet.dlq so far, by a test.
var remoteDeadLetters = struct {
	sync.Mutex
	m map[*amqp.Channel][]amqp.Delivery
}{m: map[*amqp.Channel][]amqp.Delivery{}}

// waitRemoteDeadLetterWhere waits up to d for a message in fleet.dlq (read as
// the administrator on ch) that match accepts.
func waitRemoteDeadLetterWhere(t *testing.T, ch *amqp.Channel, what string, d time.Duration, match func(amqp.Delivery) bool) amqp.Delivery {
	t.Helper()
	var found amqp.Delivery
	wait.For(t, d, "dead letter "+what+" in "+federation.QueueDLQ, wait.Bool(func() bool {
		for {
			m, ok, err := ch.Get(federation.QueueDLQ, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			remoteDeadLetters.Lock()
			remoteDeadLetters.m[ch] = append(remoteDeadLetters.m[ch], m)
			remoteDeadLetters.Unlock()
		}
		remoteDeadLetters.Lock()
		defer remoteDeadLetters.Unlock()
		for _, m := range remoteDeadLetters.m[ch] {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	}))
	return found
}

// waitRemoteDeadLetter waits for the dead letter of message id.
func waitRemoteDeadLetter(t *testing.T, ch *amqp.Channel, id string, d time.Duration) amqp.Delivery {
	t.Helper()
	return waitRemoteDeadLetterWhere(t, ch, "of message "+id, d, func(m amqp.Delivery) bool { return m.Headers[wire.HdrID] == id })
}

// waitRemoteDeadLetterReason waits for a dead letter refused for reason.
func waitRemoteDeadLetterReason(t *testing.T, ch *amqp.Channel, reason wire.Reason, d time.Duration) amqp.Delivery {
	t.Helper()
	return waitRemoteDeadLetterWhere(t, ch, "refused as "+string(reason), d, func(m amqp.Delivery) bool { return m.Headers[wire.HdrRejectReason] == string(reason) })
}

// remoteMetricsText returns e's serve's /metrics.
func remoteMetricsText(t *testing.T, e *harness.Env) string {
	t.Helper()
	resp, err := e.HTTPClient().Get("http://" + e.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitRemoteMetric waits up to d for e's /metrics to hold line.
func waitRemoteMetric(t *testing.T, e *harness.Env, line string, d time.Duration) {
	t.Helper()
	wait.For(t, d, fmt.Sprintf("%q in /metrics", line), wait.Bool(func() bool {
		return slices.Contains(strings.Split(remoteMetricsText(t, e), "\n"), line)
	}))
}

// remoteNarrowTrust gives host's trust line in e's fleets.toml the capabilities
// caps.
func remoteNarrowTrust(t *testing.T, e *harness.Env, host, caps string) {
	t.Helper()
	b, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"` + regexp.QuoteMeta(host) + ` (ed25519:[A-Za-z0-9+/=]+)[^"]*"`)
	if !re.Match(b) {
		t.Fatalf("no trust line for %s in %s", host, e.ConfigPath)
	}
	b = re.ReplaceAll(b, []byte(`"`+host+` $1 `+caps+`"`))
	if err := os.WriteFile(e.ConfigPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sortedNames is names, sorted (a fleet enum's order).
func sortedNames(names ...string) []string {
	slices.Sort(names)
	return names
}
