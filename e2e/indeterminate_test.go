package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
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
