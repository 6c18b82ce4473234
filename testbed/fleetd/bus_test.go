package fleetd

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestInboxPerMemberAndRedial against each real broker and the herdr
// stand-in: each spawned member gets a durable agent.<id>.inbox in the
// fleet's vhost; while the vhost is gone (deleting it drops the daemon's
// connection) a spawn fails with broker_error and creates no tab; once the
// vhost is back the daemon redials by itself and spawns work again.
func TestInboxPerMemberAndRedial(t *testing.T) {
	brokertest.Each(t, testInboxPerMemberAndRedial)
}

func testInboxPerMemberAndRedial(t *testing.T, b *brokertest.Broker) {
	hc := startHerdr(t, "kb")
	admin := b.Admin(t)
	vhost, user := brokertest.Unique("fmstandin")+"/kb", brokertest.Unique("fmstandin-kb")
	b.Cleanup(t, []string{vhost}, []string{user})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	grant := func() {
		t.Helper()
		if _, err := admin.EnsureVhost(ctx, vhost); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.EnsureUser(ctx, user, "pw-standin", ""); err != nil {
			t.Fatal(err)
		}
		if err := admin.SetPermissions(ctx, vhost, user); err != nil {
			t.Fatal(err)
		}
	}
	grant()
	uri, err := broker.VhostURI(b.AMQPURL, user, "pw-standin", vhost)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "kb", HerdrSocket: hc.Socket, WorktreeRoot: filepath.Join(t.TempDir(), "wt"),
		BrokerURI: uri, BrokerURIEnv: "KB_URI"}
	r := startDaemon(t, cfg)
	if l := r.logs.String(); !strings.Contains(l, "fleet=kb broker connected") || strings.Contains(l, "pw-standin") {
		t.Fatalf("startup log: want the broker line naming the fleet, without the password:\n%s", l)
	}
	conn, err := broker.Dial(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close() }()
	cs := connect(t, r.url, nil, nil)
	var row MemberRow
	call(t, cs, "fleet_spawn", map[string]any{"id": "m1"}, &row)
	if row.Fleet != "kb" || row.ID != "m1" {
		t.Fatalf("spawn row %+v", row)
	}
	if _, _, err := broker.QueueDepth(conn, "agent.m1.inbox"); err != nil {
		t.Fatalf("agent.m1.inbox: %v", err)
	}

	// The vhost disappears: the daemon's connection is closed by the broker.
	if _, err := admin.DeleteVhost(ctx, vhost); err != nil {
		t.Fatal(err)
	}
	wait.LogLine(t, 10*time.Second, r.logs.String, "broker connection lost")
	res := call(t, cs, "fleet_spawn", map[string]any{"id": "m2"}, nil)
	if !res.IsError || !strings.Contains(errText(res), ErrBroker) {
		t.Fatalf("spawn with the vhost gone: %+v %s", res, errText(res))
	}
	if _, ok := tabByLabel(t, hc, r.d.memberLabel("m2")); ok {
		t.Fatal("a member without an inbox got a tab")
	}

	// Back again: the watcher redials (backoff ≤ 5 s) and spawns work.
	grant()
	wait.LogLine(t, 10*time.Second, r.logs.String, "broker connection restored")
	call(t, cs, "fleet_spawn", map[string]any{"id": "m3"}, &row)
	conn.Close()
	if conn, err = broker.Dial(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if _, _, err := broker.QueueDepth(conn, "agent.m3.inbox"); err != nil {
		t.Fatalf("agent.m3.inbox after the redial: %v", err)
	}
	if _, _, err := broker.QueueDepth(conn, "agent.m2.inbox"); !errors.Is(err, broker.ErrQueueMissing) {
		t.Fatalf("agent.m2.inbox: %v, want missing", err)
	}
}

// TestBrokerRefusedAtStartup, against each broker: a URI the broker
// refuses makes Run fail, naming the fleet and not the password.
func TestBrokerRefusedAtStartup(t *testing.T) {
	brokertest.Each(t, testBrokerRefusedAtStartup)
}

func testBrokerRefusedAtStartup(t *testing.T, b *brokertest.Broker) {
	uri, err := broker.VhostURI(b.AMQPURL, "no-such-user", "pw-refused", "no-such-vhost")
	if err != nil {
		t.Fatal(err)
	}
	cfg := noHerdr(t)
	cfg.BrokerURI, cfg.BrokerURIEnv, cfg.LeadLaunch = uri, EnvBrokerURI, false
	d, err := New(cfg, &syncbuf.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = d.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "fleet=kb") || !broker.IsAccessRefused(err) || strings.Contains(err.Error(), "pw-refused") {
		t.Fatalf("Run = %v", err)
	}
}
