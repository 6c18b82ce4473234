package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestEventsRemote, on each broker (issue 25: `events NAME@HOST` through
// the signed read path): alpha (on the host) and beta (in a network
// namespace, reaching the broker through the relay) federated; alpha
// calls a tool of docs@beta and restarts docs@beta. Then on alpha:
//   - `events docs@beta --json` has beta's own journal of docs (host
//     beta, fleet docs@beta): the restart with "ended N members", the
//     call that came from alpha (origin peer alpha); and alpha's own
//     event of the call it sent (no host);
//   - --kind, -n and --until filter on beta's side;
//   - the MCP tool fleetmgr_events with fleets [docs@beta] answers the
//     same way;
//   - -f is refused with exit 2, saying why and what to do;
//   - a fleet beta does not have is an error naming it;
//   - beta's journal has alpha's events requests (federation.request).
func TestEventsRemote(t *testing.T) { brokertest.Each(t, testEventsRemote) }

func testEventsRemote(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}})
	docs := peerview.RemoteName("docs", p.beta.host)
	c := connectRemoteHTTP(t, p.alpha.Env)
	waitFleetEnum(t, c.cs, "fleet_whoami", sortedNames(docs, "kb"), 30*time.Second)
	if w := whoamiOf(t, call(t, c.cs, "fleet_whoami", map[string]any{"fleet": docs})); w.Fleet != "docs" {
		t.Fatalf("fleet_whoami on %s: %+v", docs, w)
	}
	if res := call(t, c.cs, "fleetmgr_restart", map[string]any{"fleet": docs, "confirm": true}); res.IsError {
		t.Fatalf("fleetmgr_restart %s: %s", docs, textOf(res))
	}

	var all []journal.Event
	wait.For(t, 30*time.Second, "beta's restart of docs in `events "+docs+"` on alpha", func() (bool, string) {
		all = eventsJSON(t, p.alpha.Env, docs)
		for _, e := range all {
			if e.Host == p.beta.host && e.Kind == journal.KindRestart {
				return true, ""
			}
		}
		return false, p.alpha.MustRun("events", docs).Stdout
	})
	var restart, peerCall, ownCall *journal.Event
	for i := range all {
		e := &all[i]
		if e.Fleet != docs {
			t.Errorf("event of fleet %q in events %s: %+v", e.Fleet, docs, e)
		}
		switch {
		case e.Host == p.beta.host && e.Kind == journal.KindRestart:
			restart = e
		case e.Host == p.beta.host && e.Kind == journal.KindCall && e.Origin == "peer "+p.alpha.host:
			peerCall = e
		case e.Host == "" && e.Kind == journal.KindCall:
			ownCall = e
		}
		if _, ok := e.Data["arguments"]; ok && e.Host != "" {
			t.Errorf("a peer's event carries call arguments: %+v", e)
		}
	}
	if restart == nil || !strings.Contains(restart.Detail, "ended") || peerCall == nil || peerCall.Detail != "fleet_whoami" || ownCall == nil {
		t.Fatalf("events %s on alpha: restart %+v, beta's record of alpha's call %+v, alpha's own %+v; all:\n%s",
			docs, restart, peerCall, ownCall, p.alpha.MustRun("events", docs).Stdout)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Errorf("events not oldest first at %d: %v then %v", i, all[i-1].Time, all[i].Time)
		}
	}
	text := p.alpha.MustRun("events", docs).Stdout
	if !strings.Contains(text, docs) || !strings.Contains(text, "fleet.restart") {
		t.Errorf("events %s (text):\n%s", docs, text)
	}

	// The filters are applied by beta.
	kinds := eventsJSON(t, p.alpha.Env, docs, "--kind", "fleet.restart")
	if len(kinds) == 0 {
		t.Fatal("--kind fleet.restart: no events")
	}
	for _, e := range kinds {
		if e.Kind != journal.KindRestart || e.Host != p.beta.host {
			t.Errorf("--kind fleet.restart gave %+v", e)
		}
	}
	if one := eventsJSON(t, p.alpha.Env, docs, "-n", "1"); len(one) != 1 {
		t.Errorf("-n 1 gave %d events", len(one))
	}
	if none := eventsJSON(t, p.alpha.Env, docs, "--until", "1h"); len(none) != 0 {
		t.Errorf("--until 1h (an hour ago) gave %d events: %+v", len(none), none)
	}

	// The MCP tool.
	res := call(t, c.cs, serveapi.EventsTool, map[string]any{"fleets": []string{docs}, "kinds": []string{"fleet.restart"}})
	if res.IsError {
		t.Fatalf("%s: %s", serveapi.EventsTool, textOf(res))
	}
	var er serveapi.EventsResult
	b2, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b2, &er); err != nil || len(er.Events) == 0 || er.Events[0].Host != p.beta.host || er.Events[0].Fleet != docs {
		t.Fatalf("%s fleets [%s]: %v %+v", serveapi.EventsTool, docs, err, er)
	}

	// Following another host's fleet is refused, with why.
	r := p.alpha.Run("events", docs, "-f")
	if r.Code != 2 || !strings.Contains(r.Stderr, "-f is not available for a fleet of another host") {
		t.Errorf("events %s -f: exit %d\n%s%s", docs, r.Code, r.Stdout, r.Stderr)
	}
	// A fleet beta does not have.
	nope := peerview.RemoteName("nope", p.beta.host)
	r = p.alpha.Run("events", nope)
	if r.Code == 0 || !strings.Contains(r.Stderr, "no fleet nope") {
		t.Errorf("events %s: exit %d\n%s%s", nope, r.Code, r.Stdout, r.Stderr)
	}

	// beta journalled alpha's reads.
	wait.For(t, 10*time.Second, "beta's journal of alpha's events requests", func() (bool, string) {
		for _, e := range eventsJSON(t, p.beta.Env, "docs", "--kind", journal.KindFederation) {
			if e.Detail == "events" && e.Origin == "peer "+p.alpha.host && e.Outcome == "executed" {
				return true, ""
			}
		}
		return false, p.beta.MustRun("events", "--kind", journal.KindFederation).Stdout
	})
}
