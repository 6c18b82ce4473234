package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func TestSeenSetFloodByOnePeer(t *testing.T) { brokertest.Each(t, testSeenSetFloodByOnePeer) }

// testSeenSetFloodByOnePeer: a peer trusted for presence only (shown,
// never obeyed) floods beta with validly signed control requests and
// presence, each with an id of its own and an expiry an hour away. Every
// id is recorded before the capability check, and the seen-sets were
// bounded only in all: once the flood filled them (100,000 ids), every
// other host's requests were refused as seen-set-failed and its presence
// dropped, for an hour. Now a host fills only its own share (SeenPerHost):
// its surplus is refused, dead-lettered and counted, while alpha's
// requests still run and its presence still counts. The bounds are small
// here so the flood is too (bounded in count).
func testSeenSetFloodByOnePeer(t *testing.T, b *brokertest.Broker) {
	e := newFedEnv(t, b)
	const share, total, flood = 20, 60, 45
	alpha := e.newHost("alpha", hostOpts{heartbeat: 500 * time.Millisecond, noStart: true})
	beta := e.newHost("beta", hostOpts{heartbeat: 500 * time.Millisecond, noStart: true})
	mallory := e.newHost("mallory", hostOpts{noStart: true})
	tr, err := identity.ParseTrust([]string{alpha.line(identity.CapAll), mallory.line(identity.Capabilities(0))})
	if err != nil {
		t.Fatal(err)
	}
	beta.cfg.Trust = tr
	beta.cfg.SeenMax, beta.cfg.SeenPerHost = total, share
	tr, _ = identity.ParseTrust([]string{beta.line(identity.CapAll)})
	alpha.cfg.Trust = tr
	beta.start(t)
	alpha.start(t)
	wait.For(t, 5*time.Second, "beta sees alpha online", wait.Bool(func() bool { hv, _ := hostIn(beta.fed, alpha.id); return hv.Online }))

	admin := e.adminChannel()
	now := time.Now()
	inst := alpha.fed.Status().Instance
	var ids []string
	for i := range flood {
		body, _ := json.Marshal(wire.ControlRequest{Verb: "stop", Fleet: "kb", Reply: inst})
		env := &wire.Envelope{Kind: wire.KindControlRequest, ID: wire.NewID(), From: mallory.id, To: beta.id,
			Issued: now, Expires: now.Add(time.Hour), Body: body}
		h, b := sealed(t, env, mallory.key)
		publishRaw(t, admin, ExchangeControl, beta.id, h, b)
		ids = append(ids, env.ID)
		pres, _ := json.Marshal(wire.Presence{HeartbeatMS: 60_000, StartedMS: now.UnixMilli(),
			Fleets: []wire.FleetSummary{{Name: fmt.Sprintf("f%d", i), State: "running"}}})
		penv := &wire.Envelope{Kind: wire.KindPresence, ID: wire.NewID(), From: mallory.id, To: wire.Broadcast,
			Issued: now.Add(time.Duration(i) * time.Millisecond), Expires: now.Add(time.Hour), Body: pres}
		h, b = sealed(t, penv, mallory.key)
		publishRaw(t, admin, ExchangeRoster, RosterKey(mallory.id), h, b)
	}
	// Every request of the flood is dead-lettered: a share of them (those
	// beta checked first: it checks requests concurrently, so not always the
	// first published) as not-authorised, the rest as seen-set-failed; none
	// is run.
	var dlq []dlqMessage
	reasons := map[string]int{}
	for i, id := range ids {
		m := e.waitDLQ(admin, &dlq, fmt.Sprintf("flood request %d", i), func(m dlqMessage) bool { return m.ID == id })
		reasons[m.Reason]++
	}
	if reasons[string(wire.ReasonNotAuthorised)] != share || reasons[string(wire.ReasonSeenSetFailed)] != flood-share {
		t.Fatalf("the flood's dead-letter reasons: %v; want %d %s and %d %s", reasons, share, wire.ReasonNotAuthorised, flood-share, wire.ReasonSeenSetFailed)
	}
	if n := beta.exec.count(); n != 0 {
		t.Fatalf("the flood ran %d requests: %+v", n, beta.exec.snapshot())
	}
	if got := testutil.ToFloat64(beta.fed.Metrics().Rejections.WithLabelValues(string(wire.ReasonSeenSetFailed))); got != flood-share {
		t.Fatalf("rejections{seen-set-failed} = %v, want %d", got, flood-share)
	}
	wait.For(t, 10*time.Second, "mallory's surplus presence dropped", wait.Bool(func() bool {
		return testutil.ToFloat64(beta.fed.Metrics().PresenceDropped.WithLabelValues(string(wire.ReasonSeenSetFailed))) >= 1
	}))
	if n := beta.fed.seen.LenFrom(mallory.id); n != share {
		t.Fatalf("mallory holds %d ids of beta's control seen-set, want its share %d", n, share)
	}

	// alpha is not affected: its requests run, its presence counts.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := alpha.fed.Control(ctx, beta.id, "status", "kb", nil); err != nil {
			t.Fatalf("alpha's request %d after the flood: %v", i, err)
		}
	}
	if n := beta.exec.count(); n != 3 {
		t.Fatalf("alpha's requests: %d run, want 3", n)
	}
	before := testutil.ToFloat64(beta.fed.Metrics().PresenceReceived.WithLabelValues(alpha.id))
	wait.For(t, 5*time.Second, "alpha's presence still taken", wait.Bool(func() bool {
		return testutil.ToFloat64(beta.fed.Metrics().PresenceReceived.WithLabelValues(alpha.id)) >= before+2
	}))
	if hv, _ := hostIn(beta.fed, alpha.id); !hv.Online {
		t.Fatalf("alpha as beta sees it after the flood: %+v", hv)
	}
}
