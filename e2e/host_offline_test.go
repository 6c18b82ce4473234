package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestNotifyHostOffline, on each broker (issue 25: host.offline): alpha
// has a [[notify]] rule on host.offline (hold 2s) with a webhook sink (a
// real local receiver); beta runs in a network namespace of its own.
// beta's serve killed (SIGKILL: no offline announced) makes its presence
// expire on alpha: one firing notification naming host beta after the
// hold, none again while it stays away; beta's serve started again: one
// "resolved". alpha's journal has beta's state changes (federation.host)
// and the two notification attempts.
func TestNotifyHostOffline(t *testing.T) { brokertest.Each(t, testNotifyHostOffline) }

func testNotifyHostOffline(t *testing.T, b *brokertest.Broker) {
	p := newRemotePair(t, b, remotePairOpts{alphaFleets: []string{"kb"}, betaFleets: []string{"docs"}})
	h := newHookReceiver(t)
	urlFile := filepath.Join(p.alpha.Dir, "hook.url")
	if err := os.WriteFile(urlFile, []byte(h.srv.URL+"/hook\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendFile(t, p.alpha.ConfigPath, fmt.Sprintf("\n[[notify]]\nname = \"hosts\"\non = [\"host.offline\"]\nhold = \"2s\"\n\n[[notify.sinks]]\ntype = \"webhook\"\nurl_file = %q\n", urlFile))
	p.alpha.stopServe(t)
	p.alpha.startServe()
	beta := p.beta.host
	hostEvent := func(state string) bool {
		for _, e := range eventsJSON(t, p.alpha.Env, "--kind", journal.KindHost) {
			if e.Origin == beta && e.Outcome == state {
				return true
			}
		}
		return false
	}
	wait.For(t, 20*time.Second, "alpha's journal: beta online", wait.Bool(func() bool { return hostEvent("online") }))

	p.beta.killServe(t)
	wait.For(t, 20*time.Second, "the host.offline notification", wait.Bool(func() bool { return len(h.got()) >= 1 }))
	wait.Never(t, 2*time.Second, "a second notification while beta stays away", func() (bool, string) {
		return len(h.got()) != 1, fmt.Sprint(h.got())
	})
	g := h.got()[0]
	if g["kind"] != "host.offline" || g["host"] != beta || g["state"] != "firing" || g["rule"] != "hosts" {
		t.Fatalf("firing: %v", g)
	}
	if !hostEvent("expired") {
		t.Fatalf("alpha's journal lacks beta's expiry:\n%s", p.alpha.MustRun("events").Stdout)
	}

	p.beta.startServe()
	wait.For(t, 30*time.Second, "the resolved notification", wait.Bool(func() bool { return len(h.got()) >= 2 }))
	if g := h.got()[1]; g["state"] != "resolved" || g["host"] != beta || len(h.got()) != 2 {
		t.Fatalf("after beta came back: %v", h.got())
	}
	// The attempt is journalled once the sink returned: wait for it.
	wait.For(t, 10*time.Second, "alpha's journal of the two host.offline notifications sent", func() (bool, string) {
		sent := 0
		for _, e := range eventsJSON(t, p.alpha.Env, "--kind", journal.KindNotify) {
			if e.Outcome == "sent" && e.Data["event_kind"] == "host.offline" && e.Data["host"] == beta {
				sent++
			}
		}
		return sent == 2, fmt.Sprintf("%d sent:\n%s", sent, p.alpha.MustRun("events", "--kind", journal.KindNotify).Stdout)
	})
}
