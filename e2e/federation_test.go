package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/doctor"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/membership"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/nsrelay"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// fedHeartbeat is the test federation's heartbeat: short, so expiry (3
// beats) is quick, long enough for a loaded 2-core machine to keep it.
const fedHeartbeat = 500 * time.Millisecond

// fedPeer is one manager of a test federation.
type fedPeer struct {
	env   *harness.Env
	host  string
	serve *harness.Serve
}

// fedPair builds two federated managers on broker b: alpha on the host
// (fleets docs, and kb declared with host = beta), beta in a network
// namespace of its own reaching the broker only through nsrelay (fleets kb
// and wiki). Each has its own state dir, herdr config dir and fleets, a
// [federation] table (a vhost of the test's own, heartbeat fedHeartbeat,
// control_timeout 10s) and the other's trust line, made by `fleetmgr
// federation key`. Nothing is started.
func fedPair(t *testing.T, b *brokertest.Broker) (alpha, beta *fedPeer, relay *nsrelay.Relay, vhost string) {
	t.Helper()
	tag := strings.TrimPrefix(brokertest.Unique("x"), "x-")
	vhost = "fmfed-" + tag
	alpha = &fedPeer{host: "alpha-" + tag}
	beta = &fedPeer{host: "beta-" + tag}
	b.Cleanup(t, []string{vhost}, []string{federation.BrokerUser(alpha.host), federation.BrokerUser(beta.host)})

	ns := netns.New(t, "beta")
	relay = nsrelay.StartFor(t, ns, bins.NSRelay, b.MgmtURL, b.AMQPURL)
	alpha.env, _ = brokerEnvFleets(t, b, nil, []harness.Fleet{{Name: "docs"}, {Name: "kb", Extra: fmt.Sprintf("host = %q\n", beta.host)}})
	beta.env, _ = brokerEnvFleets(t, b, ns, []harness.Fleet{{Name: "kb"}, {Name: "wiki"}})
	fed := func(host string) string {
		return fmt.Sprintf("\n[federation]\nhost = %q\nvhost = %q\nheartbeat = %q\ncontrol_timeout = \"10s\"\ntrust = []\n", host, vhost, fedHeartbeat)
	}
	appendFile(t, alpha.env.ConfigPath, fed(alpha.host))
	appendFile(t, beta.env.ConfigPath, fed(beta.host))
	lineOf := func(p *fedPeer) string {
		var k membership.KeyInfo
		if err := json.Unmarshal([]byte(p.env.MustRun("federation", "key", "--json").Stdout), &k); err != nil {
			t.Fatal(err)
		}
		if !k.Created || k.Host != p.host || k.TrustLine != p.host+" "+k.Key {
			t.Fatalf("federation key of %s: %+v", p.host, k)
		}
		if again := strings.TrimSpace(p.env.MustRun("federation", "key").Stdout); again != k.TrustLine {
			t.Fatalf("the trust line changed on a second run: %q, then %q", k.TrustLine, again)
		}
		return k.TrustLine
	}
	la, lb := lineOf(alpha), lineOf(beta)
	setTrust(t, alpha.env.ConfigPath, lb)
	setTrust(t, beta.env.ConfigPath, la)
	return alpha, beta, relay, vhost
}

// brokerEnvFleets is brokerEnvIn with fleets described in full.
func brokerEnvFleets(t *testing.T, b *brokertest.Broker, ns *netns.NS, fleets []harness.Fleet) (*harness.Env, []string) {
	t.Helper()
	tag := brokertest.Unique("fme2e")
	var vhosts, users []string
	for i, f := range fleets {
		v, u := tag+"/"+f.Name, tag+"-"+f.Name
		vhosts, users = append(vhosts, v), append(users, u)
		fleets[i].Extra += fmt.Sprintf("vhost = %q\nbroker_user = %q\n", v, u)
	}
	extra := fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = %q\nadmin_user_env = %q\nadmin_password_env = %q\n",
		b.MgmtURL, b.AMQPURL, brokertest.EnvUser, brokertest.EnvPassword)
	var e *harness.Env
	if ns != nil {
		e = harness.NewEnvIn(t, bins, ns, extra, fleets...)
	} else {
		e = harness.NewEnv(t, bins, extra, fleets...)
	}
	e.Environ = append(e.Environ, brokertest.EnvUser+"="+b.User, brokertest.EnvPassword+"="+b.Password)
	b.Cleanup(t, vhosts, users)
	return e, vhosts
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func setTrust(t *testing.T, path string, lines ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	q := make([]string, len(lines))
	for i, l := range lines {
		q[i] = strconv.Quote(l)
	}
	s := strings.Replace(string(b), "trust = []", "trust = ["+strings.Join(q, ", ")+"]", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fedSession is an MCP session to p's serve (inside its namespace when
// it has one).
func fedSession(t *testing.T, p *fedPeer) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-fed", Version: "test"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.env.URL(), HTTPClient: p.env.HTTPClient(), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// fedList calls fleetmgr_list on cs.
func fedList(t *testing.T, cs *mcp.ClientSession) *proxy.ListResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_list", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var lr proxy.ListResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &lr); err != nil {
		t.Fatal(err)
	}
	return &lr
}

// hostState is the state cs's serve shows for host ("" when not listed).
func hostState(t *testing.T, cs *mcp.ClientSession, host string) (string, *proxy.ListResult) {
	t.Helper()
	lr := fedList(t, cs)
	if lr.Federation == nil {
		t.Fatalf("fleetmgr_list has no federation object: %+v", lr)
	}
	for _, h := range lr.Federation.Hosts {
		if h.Host == host {
			return h.State, lr
		}
	}
	return "", lr
}

// waitHostState polls cs until it shows host in state, and returns how
// long that took; it fails the test after limit.
func waitHostState(t *testing.T, cs *mcp.ClientSession, host, state string, limit time.Duration) time.Duration {
	t.Helper()
	return wait.For(t, limit, "host "+host+" "+state, func() (bool, string) {
		got, lr := hostState(t, cs, host)
		b, _ := json.Marshal(lr)
		return got == state, fmt.Sprintf("it is %q: %s", got, b)
	})
}

// waitConnected waits until p's serve says its federation is connected,
// and returns when it saw it.
func waitConnected(t *testing.T, p *fedPeer) time.Time {
	t.Helper()
	wait.LogLine(t, 30*time.Second, p.serve.Log, "federation: connected")
	return time.Now()
}

// logTime is the time of the last line of s's log holding msg (and
// host=HOST when host is set); the test fails when there is none.
func logTime(t *testing.T, s *harness.Serve, msg, host string) time.Time {
	t.Helper()
	lines := strings.Split(s.Log(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if !strings.Contains(l, msg) || host != "" && !strings.Contains(l, " host="+host) {
			continue
		}
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], "time=") {
			if at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0], "time=")); err == nil {
				return at
			}
		}
	}
	t.Fatalf("no log line %q (host %q):\n%s", msg, host, s.Log())
	return time.Time{}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// listRow is the `fleetmgr list --json` row of name.
func listRow(t *testing.T, e *harness.Env, name string) serveclient.ListRow {
	t.Helper()
	var rows []serveclient.ListRow
	if err := json.Unmarshal([]byte(e.MustRun("list", "--json").Stdout), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %s in list --json", name)
	return serveclient.ListRow{}
}

// metricValue is the value of the series line of /metrics that starts
// with prefix (0 when there is none).
func metricValue(t *testing.T, p *fedPeer, prefix string) float64 {
	t.Helper()
	resp, err := p.env.HTTPClient().Get("http://" + p.env.Listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, prefix)), 64)
			return v
		}
	}
	return 0
}

// TestFederation, on each broker: two managers, alpha on the host and
// beta in a network namespace of its own (the broker reached through a
// relay, nothing else shared), federated through a vhost of their own:
//   - `fleetmgr federation key` prints each host's trust line (created
//     once); each trusts the other's;
//   - presence both ways within 2 beats of both being connected;
//   - alpha's `fleetmgr status` (text and --json, valid for the schema),
//     `fleetmgr list` and fleetmgr_list show beta's fleets as NAME@HOST
//     with host, state, verdict counts (beta's last status report) and the
//     age of the last beat; the fleet alpha declares with host = beta is
//     filled from beta's presence under its own name;
//   - alpha stops, starts (CLI) and restarts (the MCP tool) beta's fleet,
//     reads its log tail and a fresh status of it; an unknown fleet on beta
//     and an unknown host are clear errors with a non-zero exit;
//   - kill -9 of beta's serve: alpha shows it expired within expiry + 1
//     beat, its fleets kept as UNKNOWN with the last-seen time; a request
//     to it gets no reply within control_timeout (exit 1) and never runs
//     later; beta's serve restarted: back online;
//   - the last genuine request before the kill, captured and published
//     again after beta's serve restarted, is dead-lettered as replayed and
//     not executed;
//   - presence beta publishes as alpha: refused by the broker (RabbitMQ's
//     topic permission), or dropped and counted by alpha (LavinMQ);
//   - a clean stop of beta's serve: alpha shows it offline at once.
func TestFederation(t *testing.T) {
	brokertest.Each(t, testFederation)
}

func testFederation(t *testing.T, b *brokertest.Broker) {
	alpha, beta, _, vhost := fedPair(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// beta's kb runs before either serve: presence reports what is there.
	beta.env.MustRun("start", "kb")
	beta.serve = beta.env.StartServe()
	alpha.serve = alpha.env.StartServe()
	waitConnected(t, alpha)
	waitConnected(t, beta)
	ca, cb := fedSession(t, alpha), fedSession(t, beta)
	waitHostState(t, ca, beta.host, "online", 20*time.Second)
	waitHostState(t, cb, alpha.host, "online", 20*time.Second)
	// Timed by the serves' own log lines (one clock, this machine's):
	// from the later connection to the later "host online".
	up := later(logTime(t, alpha.serve, "federation: connected", ""), logTime(t, beta.serve, "federation: connected", ""))
	seen := later(logTime(t, alpha.serve, "federation: host online", beta.host), logTime(t, beta.serve, "federation: host online", alpha.host))
	if d := seen.Sub(up); d > 2*fedHeartbeat {
		t.Errorf("presence both ways took %s after both connected, more than 2 beats (%s)", d, 2*fedHeartbeat)
	} else {
		t.Logf("%s: presence both ways %s after both connected", b.Name, d)
	}

	// Verdicts: a member in beta's kb; beta's status of it is what its
	// presence then carries (no sampling per beat).
	kbPort := beta.env.Ports["kb"]
	spawnMemberIn(t, beta.env, kbPort, "m1")
	beta.env.MustRun("status", "kb")
	kbRemote := "kb@" + beta.host
	wikiRemote := "wiki@" + beta.host
	sch := statusSchema(t)
	var rep = statusJSON(t, alpha.env, sch)
	// On a timeout the checks below say what is wrong.
	_ = wait.Until(context.Background(), 10*time.Second, wait.Bool(func() bool {
		if fleetRow(t, rep, "kb").MemberCount == 1 {
			return true
		}
		rep = statusJSON(t, alpha.env, sch)
		return false
	}))
	kb := fleetRow(t, rep, "kb") // declared on beta in alpha's file: filled from beta's presence
	if kb.Host != beta.host || kb.State != "running" || kb.Verdict != "" || kb.Remote == nil || kb.Remote.HostState != "online" ||
		kb.MemberCount != 1 || len(kb.Summary) != 1 || kb.Remote.BeatAgeS == nil || *kb.Remote.BeatAgeS > 3*fedHeartbeat.Seconds() {
		t.Errorf("alpha's status of kb (on beta): %+v remote %+v", kb, kb.Remote)
	}
	for _, f := range rep.Fleets {
		if f.Name == kbRemote {
			t.Errorf("kb is listed twice (as kb and %s)", kbRemote)
		}
	}
	wiki := fleetRow(t, rep, wikiRemote)
	if wiki.Host != beta.host || wiki.State != "stopped" || wiki.Remote.HostState != "online" || wiki.MemberCount != 0 {
		t.Errorf("alpha's status of %s: %+v remote %+v", wikiRemote, wiki, wiki.Remote)
	}
	if rep.Federation == nil || rep.Federation.Host != alpha.host || !rep.Federation.Connected {
		t.Errorf("federation object: %+v", rep.Federation)
	}
	text := alpha.env.MustRun("status").Stdout
	for _, want := range []string{wikiRemote, "on " + beta.host + ": last beat", "federation: this host is " + alpha.host + ", connected", "  " + beta.host + ": online, 2 fleet(s)"} {
		if !strings.Contains(text, want) {
			t.Errorf("alpha's status lacks %q:\n%s", want, text)
		}
	}
	list := alpha.env.MustRun("list").Stdout
	if !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(wikiRemote)+`\s+`+beta.host+`\s+stopped`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^kb\s+`+beta.host+`\s+running\s+\S+\s+\d+\s+1\s+1 `).MatchString(list) {
		t.Errorf("alpha's list:\n%s", list)
	}
	if row := listRow(t, alpha.env, wikiRemote); row.Host != beta.host || row.Remote == nil || row.Remote.BeatAgeS == nil {
		t.Errorf("alpha's list --json row of %s: %+v", wikiRemote, row)
	}
	// Completion of start offers beta's fleets (from alpha's serve).
	if c := alpha.env.MustRun("__complete", "start", "").Stdout; !strings.Contains(c, wikiRemote+"\n") || !strings.Contains(c, "docs\n") {
		t.Errorf("completion of start:\n%s", c)
	}
	// check: the host provisioned, and the protections this broker gives.
	var chk doctor.Report
	if err := json.Unmarshal([]byte(alpha.env.Run("check", "--json").Stdout), &chk); err != nil {
		t.Fatal(err)
	}
	if f := chk.Federation; f == nil || f.Host != alpha.host || !f.Provisioned || len(f.Trust) != 1 || f.Protections == nil ||
		f.Protections.TopicPermissions != (b.Product == "RabbitMQ") || !f.Protections.Permissions || !strings.HasPrefix(f.TrustLine, alpha.host+" ed25519:") {
		t.Errorf("check --json federation on %s: %+v", b.Name, chk.Federation)
	}

	// Capture every request to beta (the administrator may bind to
	// fleet.control; no host may), to publish one again later.
	adminURI, err := broker.VhostURI(b.AMQPURL, b.User, b.Password, vhost)
	if err != nil {
		t.Fatal(err)
	}
	ach, err := dialT(t, adminURI).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ach.QueueDeclare("capture", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ach.QueueBind("capture", beta.host, federation.ExchangeControl, false, nil); err != nil {
		t.Fatal(err)
	}

	// Control of beta's kb from alpha.
	pid0 := listRow(t, beta.env, "kb").PID
	// beta's kb has member m1: the stop is refused by beta unless
	// confirmed (issue 24 item 3), then goes on with --yes.
	if r := alpha.env.Run("stop", kbRemote); r.Code != 2 || !strings.Contains(r.Stderr, "would end 1 live member") {
		t.Errorf("stop %s of a fleet with a member, unconfirmed: exit %d\n%s%s", kbRemote, r.Code, r.Stdout, r.Stderr)
	}
	r := alpha.env.MustRun("stop", kbRemote, "--yes")
	if !strings.Contains(r.Stdout, kbRemote+": stopped") {
		t.Errorf("stop %s:\n%s", kbRemote, r.Stdout)
	}
	if row := listRow(t, beta.env, "kb"); row.State != "stopped" {
		t.Fatalf("beta's kb after alpha's stop: %+v", row)
	}
	r = alpha.env.MustRun("start", kbRemote)
	if !strings.Contains(r.Stdout, kbRemote+": running") || !strings.Contains(r.Stdout, kbRemote+": fleetd") {
		t.Errorf("start %s (steps relayed):\n%s", kbRemote, r.Stdout)
	}
	pid1 := listRow(t, beta.env, "kb").PID
	if pid1 == 0 || pid1 == pid0 {
		t.Fatalf("beta's kb after alpha's start: pid %d (was %d)", pid1, pid0)
	}
	res, err := ca.CallTool(ctx, &mcp.CallToolParams{Name: "fleetmgr_restart", Arguments: map[string]any{"fleet": kbRemote}})
	if err != nil || res.IsError {
		t.Fatalf("fleetmgr_restart %s: %v %s", kbRemote, err, textOf(res))
	}
	var ar proxy.ActionResult
	sb, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(sb, &ar)
	pid2 := listRow(t, beta.env, "kb").PID
	if ar.Fleet != kbRemote || ar.State != "running" || ar.PID != pid2 || pid2 == pid1 || len(ar.Steps) == 0 {
		t.Errorf("fleetmgr_restart result %+v; beta's kb pid %d (was %d)", ar, pid2, pid1)
	}
	if !strings.Contains(beta.serve.Log(), `msg="federation: running a peer's request" from=`+alpha.host+" verb=restart fleet=kb") {
		t.Errorf("beta's serve did not log alpha's request:\n%s", beta.serve.Log())
	}
	logs := alpha.env.MustRun("logs", kbRemote, "-n", "3")
	if n := strings.Count(logs.Stdout, "\n"); n != 3 || !strings.Contains(unstamped(readFile(t, filepath.Join(beta.env.StateDir, "fleets", "kb", "fleetd.log"))), strings.TrimSpace(logs.Stdout)) {
		t.Errorf("logs %s -n 3 (%d lines) is not the tail of beta's fleetd.log:\n%s", kbRemote, n, logs.Stdout)
	}
	st := statusJSON(t, alpha.env, sch, kbRemote)
	if len(st.Fleets) != 1 || st.Fleets[0].Name != kbRemote || st.Fleets[0].Health == nil || !st.Fleets[0].Health.OK || st.Fleets[0].PID != pid2 {
		t.Errorf("status %s (a fresh probe by beta): %+v", kbRemote, st.Fleets)
	}
	// --all on alpha is alpha's fleets only: kb, declared on beta, is not
	// stopped through the federation.
	alpha.env.MustRun("stop", "--all")
	if row := listRow(t, beta.env, "kb"); row.State != "running" || row.PID != pid2 {
		t.Errorf("alpha's stop --all reached beta's kb: %+v", row)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stop", "nope@" + beta.host}, "unknown fleet"},
		{[]string{"start", "kb@nohost-" + beta.host[5:]}, "no such host on the broker"},
	} {
		r := alpha.env.Run(c.args...)
		if r.Code == 0 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("fleetmgr %v: exit %d, stderr %q; want non-zero and %q", c.args, r.Code, r.Stderr, c.want)
		}
	}
	// The last request before the kill: a genuine restart, executed once.
	var captured amqp.Delivery
	_ = wait.Until(context.Background(), 5*time.Second, wait.Bool(func() bool { // drains capture, keeping the last restart
		for {
			d, ok, err := ach.Get("capture", true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return captured.Body != nil
			}
			if d.Headers[wire.HdrKind] == string(wire.KindControlRequest) && strings.Contains(string(d.Body), `"verb":"restart"`) {
				captured = d
			}
		}
	}))
	if captured.Body == nil {
		t.Fatal("the restart request was not captured")
	}

	// kill -9 of beta's serve: expired within expiry + 1 beat.
	if err := beta.serve.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitHostState(t, ca, beta.host, "expired", 20*time.Second)
	wait.LogLine(t, 5*time.Second, alpha.serve.Log, `msg="federation: host expired: no presence for 3 heartbeats" host=`+beta.host) // the sweep after
	if d, limit := logTime(t, alpha.serve, "federation: host expired", beta.host).Sub(killed), (federation.ExpiryBeats+1)*fedHeartbeat; d > limit {
		t.Errorf("alpha logged beta expired %s after the kill, more than expiry + 1 beat (%s)", d, limit)
	} else {
		t.Logf("%s: beta expired %s after kill -9", b.Name, d)
	}
	rep = statusJSON(t, alpha.env, sch)
	wiki = fleetRow(t, rep, wikiRemote)
	if wiki.Verdict != "UNKNOWN" || wiki.State != "unknown" || wiki.Remote.HostState != "expired" || wiki.Remote.ReportedState != "stopped" ||
		wiki.Remote.LastSeen.IsZero() || !strings.Contains(wiki.Error, "expired: no beat for") {
		t.Errorf("an expired host's fleet: %+v remote %+v", wiki, wiki.Remote)
	}
	// No reply within control_timeout: a clear error, exit 1; the request
	// expires in beta's queue and never runs.
	t0 := time.Now()
	r = alpha.env.Run("stop", kbRemote)
	if r.Code != 1 || !strings.Contains(r.Stderr, "no reply") || !strings.Contains(r.Stderr, "expired") {
		t.Errorf("stop %s with beta's serve dead: exit %d after %s, stderr %q", kbRemote, r.Code, time.Since(t0).Round(time.Millisecond), r.Stderr)
	}

	// beta's serve again: online, kb still running (the stop never ran),
	// and the captured restart is refused as replayed, never executed.
	beta.serve = beta.env.StartServe()
	waitHostState(t, ca, beta.host, "online", 20*time.Second)
	waitConnected(t, beta)
	rejected := metricValue(t, beta, `fleetmgr_federation_rejections_total{reason="replayed"}`)
	p := amqp.Publishing{Headers: captured.Headers, ContentType: captured.ContentType, MessageId: captured.MessageId, Type: captured.Type, Body: captured.Body}
	if err := ach.PublishWithContext(ctx, federation.ExchangeControl, beta.host, false, false, p); err != nil {
		t.Fatal(err)
	}
	var dead amqp.Delivery
	wait.For(t, 10*time.Second, "the replayed request in fleet.dlq", wait.Bool(func() bool {
		for {
			d, ok, err := ach.Get(federation.QueueDLQ, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return false
			}
			if d.Headers[wire.HdrID] == captured.Headers[wire.HdrID] {
				dead = d
				return true
			}
		}
	}))
	if dead.Headers[wire.HdrRejectReason] != string(wire.ReasonReplayed) || dead.Headers[wire.HdrRejectedBy] != beta.host {
		t.Errorf("dead letter headers: %v", dead.Headers)
	}
	if n := metricValue(t, beta, `fleetmgr_federation_rejections_total{reason="replayed"}`); n != rejected+1 {
		t.Errorf("replayed rejections %v → %v", rejected, n)
	}
	// Two heartbeats: what a wrongly executed restart would need to show.
	wait.Never(t, 2*fedHeartbeat, "beta's kb changed by the expired stop or the replayed restart", func() (bool, string) {
		row := listRow(t, beta.env, "kb")
		return row.State != "running" || row.PID != pid2, fmt.Sprintf("%s pid %d, want running pid %d", row.State, row.PID, pid2)
	})

	// Presence beta sends as alpha, signed with beta's key.
	forgeAs(t, b, beta, alpha, vhost)

	// A clean stop: offline at once.
	if err := beta.serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.LogLine(t, 20*time.Second, beta.serve.Log, "federation: left (offline announced)")
	waitHostState(t, ca, beta.host, "offline", 10*time.Second)
	left := logTime(t, beta.serve, "federation: left (offline announced)", "")
	if d := logTime(t, alpha.serve, "federation: host announced offline", beta.host).Sub(left); d > fedHeartbeat {
		t.Errorf("alpha took beta's offline %s after beta sent it, more than a beat", d)
	}
}

// forgeAs publishes presence claiming to be victim, signed with from's
// key, with from's broker user: RabbitMQ refuses it (topic permission on
// roster.<victim>); on a broker without topic permissions it reaches the
// roster queues and the victim drops it, counted as from-mismatch (the
// key is from's, the claim victim's).
func forgeAs(t *testing.T, b *brokertest.Broker, from, victim *fedPeer, vhost string) {
	t.Helper()
	key, err := identity.LoadKey(filepath.Join(from.env.StateDir, "federation.key"))
	if err != nil {
		t.Fatal(err)
	}
	pw, err := federation.HostPassword(from.env.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	uri, err := broker.VhostURI(b.AMQPURL, federation.BrokerUser(from.host), pw, vhost)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(&wire.Presence{HeartbeatMS: 500, StartedMS: time.Now().UnixMilli(),
		Fleets: []wire.FleetSummary{{Name: "forged", State: "running"}}})
	now := time.Now()
	env := &wire.Envelope{Kind: wire.KindPresence, ID: wire.NewID(), From: victim.host, To: wire.Broadcast, Issued: now, Expires: now.Add(time.Minute), Body: body}
	h, err := wire.Seal(env, key)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := dialT(t, uri).Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const dropped = `fleetmgr_federation_presence_dropped_total{reason="from-mismatch"}`
	before := metricValue(t, victim, dropped)
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), federation.ExchangeRoster, federation.RosterKey(victim.host), false, false,
		amqp.Publishing{Headers: amqp.Table(h), Body: body})
	if b.Product == "RabbitMQ" {
		select {
		case e := <-closed:
			if e == nil || e.Code != amqp.AccessRefused || !strings.Contains(e.Reason, "roster."+victim.host) {
				t.Errorf("forged presence: channel closed with %v, want 403 ACCESS_REFUSED on topic roster.%s", e, victim.host)
			}
		case <-time.After(10 * time.Second):
			t.Error("RabbitMQ took presence sent as another host (no topic permission in force?)")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("%s did not take the forged presence: %v %v", b.Name, ok, err)
	}
	wait.For(t, 10*time.Second, victim.host+" to drop a presence as from-mismatch", wait.Bool(func() bool { return metricValue(t, victim, dropped) > before }))
}
