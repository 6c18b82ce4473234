package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestRemoteCallCutByRestart, on each broker (issue 27 item 8: never
// invite a second run): alpha calls fleet_slow on docs@beta; once beta's
// fleetd stand-in has executed it, docs is restarted on beta, cutting
// the call. alpha's caller is told that the call may have run on beta
// and to check before calling again, naming docs@beta, never "call it
// again"; the tool error carries _meta io.github.fleetmgr/outcome =
// indeterminate; both journals record the call as indeterminate (beta's
// from peer alpha, alpha's of docs@beta), with its cause; the call ran
// once and was not retried.
func TestRemoteCallCutByRestart(t *testing.T) { brokertest.Each(t, testRemoteCallCutByRestart) }

func testRemoteCallCutByRestart(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"},
		alphaManager: `call_timeout = "60s"`, betaManager: `call_timeout = "60s"`})
	docs := peerview.RemoteName("docs", p.beta.host)
	c := connectRemoteHTTP(t, p.alpha.Env)
	waitFleetEnum(t, c.cs, "fleet_slow", sortedNames(docs, "kb"), 30*time.Second)

	type outcome struct {
		text string
		meta any
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.callTool(t, 90*time.Second, "fleet_slow", map[string]any{"fleet": docs, "seconds": 60, "steps": 3}, standinRequestID("cut-1"))
		o := outcome{err: err}
		if res != nil {
			o.text, o.meta = textOf(res), res.Meta[proxy.MetaOutcome]
			if !res.IsError {
				o.text = "NOT AN ERROR: " + o.text
			}
		}
		done <- o
	}()
	waitStandinEvent(t, p.beta.events, "executed fleet_slow request-id=cut-1", 20*time.Second)
	p.beta.MustRun("restart", "docs", "--yes")
	var o outcome
	select {
	case o = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the cut call was not answered within 60 s of the restart")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !strings.Contains(o.text, "fleet "+docs+":") || !strings.Contains(o.text, "may have run on "+p.beta.host) ||
		!strings.Contains(o.text, "check before calling it again") || strings.Contains(o.text, "call it again once") || o.meta != proxy.OutcomeIndeterminate {
		t.Fatalf("the call cut by docs' restart on beta answered (meta %v): %s", o.meta, o.text)
	}
	t.Logf("answer: %s", o.text)

	find := func(e *remoteHostEnv, fleet string) (bool, string) {
		evs := eventsJSON(t, e.Env, fleet, "--kind", journal.KindCall)
		for _, ev := range evs {
			if ev.Detail == "fleet_slow" && ev.Outcome == proxy.OutcomeIndeterminate && ev.Data["cause"] != nil {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", evs)
	}
	wait.For(t, 10*time.Second, "beta's journal: the peer's call indeterminate", func() (bool, string) { return find(p.beta, "docs") })
	wait.For(t, 10*time.Second, "alpha's journal: the call of "+docs+" indeterminate", func() (bool, string) { return find(p.alpha, docs) })
	wait.Never(t, 2*time.Second, "the cut call executed again", func() (bool, string) {
		n := standinExecutions(p.beta.events, "cut-1")
		return n != 1, fmt.Sprintf("cut-1 executed %d times (want 1)", n)
	})
}

// TestRemoteControlIndeterminate, on each broker (issue 27 item 8 for
// the lifecycle verbs): alpha stops beta's fleet hung (its fleetd ignores
// SIGTERM, so beta's stop takes stop_grace, longer than alpha's
// control_timeout) and the request is cut three ways after it left: the
// timeout, beta going away (its relay killed: beta expires), and alpha's
// own broker connection closed. Each time alpha's CLI says that the stop
// may have run on beta and to check `fleetmgr status hung@beta` before
// trying again, naming hung@beta, never the old "may still run there
// once" nor an invitation to run it again; alpha's journal records each
// as indeterminate with its cause, and beta's, whose stop ran past
// alpha's expiry, as indeterminate with what it did. A stop to a host
// the broker has no queue for never left: it keeps a plain error.
func TestRemoteControlIndeterminate(t *testing.T) {
	brokertest.Each(t, testRemoteControlIndeterminate)
}

func testRemoteControlIndeterminate(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"hung"},
		betaArgs: map[string][]string{"hung": {"--ignore-term"}}, betaManager: `stop_grace = "12s"`,
		alphaFederation: `control_timeout = "6s"`})
	hung := peerview.RemoteName("hung", p.beta.host)
	cs := fedSession(t, &fedPeer{env: p.alpha.Env, host: p.alpha.host})
	waitHostState(t, cs, p.beta.host, "online", 30*time.Second)
	peerStops := func() int {
		return strings.Count(p.beta.serve.Log(), `msg="federation: running a peer's request" from=`+p.alpha.host+" verb=stop fleet=hung")
	}
	// stop runs `fleetmgr stop hung@beta --yes` on alpha in the
	// background; cut, once beta runs it, cuts it.
	stop := func(what string, cut func()) {
		t.Helper()
		n := peerStops()
		done := make(chan harness.Result, 1)
		go func() { done <- p.alpha.Run("stop", hung, "--yes") }()
		wait.For(t, 20*time.Second, "beta running alpha's stop of hung", wait.Bool(func() bool { return peerStops() > n }))
		if cut != nil {
			cut()
		}
		var r harness.Result
		select {
		case r = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: alpha's stop of %s not answered within 60 s", what, hung)
		}
		if r.Code != 1 || !strings.Contains(r.Stderr, hung) || !strings.Contains(r.Stderr, "may have run on "+p.beta.host) ||
			!strings.Contains(r.Stderr, "check `fleetmgr status "+hung+"` before trying again") ||
			strings.Contains(r.Stderr, "may still run there once") || strings.Contains(r.Stderr, "again once") {
			t.Errorf("%s: alpha's stop of %s: exit %d\n%s%s", what, hung, r.Code, r.Stdout, r.Stderr)
		}
		// The wait's progress names the peer's answer and alpha's
		// control_timeout, not this host's stop_grace.
		if what == "timeout" && (!strings.Contains(r.Stderr, "waiting for "+hung+": host "+p.beta.host+"'s answer") ||
			!strings.Contains(r.Stderr, "timeout 6s") || strings.Contains(r.Stderr, "SIGKILL after stop_grace")) {
			t.Errorf("%s: the progress of alpha's stop of %s does not name beta's answer and control_timeout:\n%s", what, hung, r.Stderr)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(r.Stderr))
	}
	// beta's stop ends (SIGKILL after stop_grace); then start it again
	// on beta for the next cut.
	settle := func() {
		t.Helper()
		wait.For(t, 40*time.Second, "beta's hung stopped", wait.Bool(func() bool { return listRow(t, p.beta.Env, "hung").State == "stopped" }))
		p.beta.MustRun("start", "hung")
	}

	// 1. The timeout: alpha waits control_timeout, beta's stop takes
	// stop_grace.
	stop("timeout", nil)
	settle()
	// 2. beta goes away: its relay killed, beta expires on alpha.
	stop("beta gone", func() { p.relay.Kill() })
	p.relay.Restart()
	waitHostState(t, cs, p.beta.host, "online", 30*time.Second)
	settle()
	// 3. alpha's own broker connection closed by the broker.
	stop("alpha's broker lost", func() { closeConnection(t, b, "fleetmgr federation "+p.alpha.host) })
	settle()

	// Never left: no control queue for the host.
	nohost := "hung@nohost-" + p.beta.host[5:]
	if r := p.alpha.Run("stop", nohost, "--yes"); r.Code == 0 || !strings.Contains(r.Stderr, "no such host on the broker") || strings.Contains(r.Stderr, "may have run") {
		t.Errorf("stop %s: exit %d\n%s", nohost, r.Code, r.Stderr)
	}

	// alpha's journal: three indeterminate stops of hung@beta, each with
	// its cause; the one that never left an error.
	var causes []string
	for _, ev := range eventsJSON(t, p.alpha.Env, "--kind", journal.KindControl) {
		switch {
		case ev.Fleet == hung && ev.Detail == "stop" && ev.Outcome == proxy.OutcomeIndeterminate:
			c, _ := ev.Data["cause"].(string)
			causes = append(causes, c)
		case ev.Fleet == hung && ev.Detail == "stop":
			t.Errorf("alpha's journal: a stop of %s recorded %q, not indeterminate", hung, ev.Outcome)
		case ev.Fleet == nohost && !strings.HasPrefix(ev.Outcome, "error: "):
			t.Errorf("alpha's journal: the stop of %s that never left recorded %q", nohost, ev.Outcome)
		}
	}
	want := []string{"no reply", "went away", "broker"}
	if len(causes) != len(want) {
		t.Fatalf("alpha's journal has %d indeterminate stops of %s, want %d: %q", len(causes), hung, len(want), causes)
	}
	for i, w := range want {
		if !strings.Contains(causes[i], w) {
			t.Errorf("alpha's journal: indeterminate stop %d's cause %q lacks %q", i+1, causes[i], w)
		}
	}
	// beta's journal: each stop ran (once) past alpha's expiry.
	n := 0
	for _, ev := range eventsJSON(t, p.beta.Env, "hung", "--kind", journal.KindFederation) {
		if ev.Detail == "stop" && ev.Origin == "peer "+p.alpha.host {
			n++
			if ev.Outcome != proxy.OutcomeIndeterminate || ev.Data["result"] != "executed" || ev.Data["cause"] == nil {
				t.Errorf("beta's journal of alpha's stop: %+v", ev)
			}
		}
	}
	if n != 3 || peerStops() != 3 {
		t.Errorf("beta ran alpha's stop %d times (journal: %d), want 3", peerStops(), n)
	}
}

// closeConnection closes the broker connection whose client-given name
// is name, through the management API (as an operator's "force close").
func closeConnection(t *testing.T, b *brokertest.Broker, name string) {
	t.Helper()
	req, _ := http.NewRequest("GET", b.MgmtURL+"/api/connections", nil)
	req.SetBasicAuth(b.User, b.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var conns []struct {
		Name             string `json:"name"`
		ClientProperties struct {
			ConnectionName string `json:"connection_name"`
		} `json:"client_properties"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&conns); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		if c.ClientProperties.ConnectionName != name {
			continue
		}
		del, _ := http.NewRequest("DELETE", b.MgmtURL+"/api/connections/"+url.PathEscape(c.Name), nil)
		del.SetBasicAuth(b.User, b.Password)
		r, err := http.DefaultClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode/100 != 2 {
			t.Fatalf("closing connection %q: %s", c.Name, r.Status)
		}
		return
	}
	t.Fatalf("no broker connection named %q", name)
}
