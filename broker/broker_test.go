package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestVhostUserPermissionsQueues drives the management API of each real
// broker: vhost created then existing (201/204), a user limited to it, a
// queue seen by ListQueues and with an exact depth from QueueDepth.
func TestVhostUserPermissionsQueues(t *testing.T) {
	brokertest.Each(t, testVhostUserPermissionsQueues)
}

func testVhostUserPermissionsQueues(t *testing.T, b *brokertest.Broker) {
	ctx := ctxT(t)
	a := b.Admin(t)
	// A "/" inside the name proves the path escaping (%2F).
	vhost := brokertest.Unique("fmunit/a")
	other := brokertest.Unique("fmunit-b")
	user := brokertest.Unique("fmunit-user")
	b.Cleanup(t, []string{vhost, other}, []string{user})

	for i, want := range []bool{true, false} {
		created, err := a.EnsureVhost(ctx, vhost)
		if err != nil || created != want {
			t.Fatalf("EnsureVhost #%d: created=%v err=%v, want created=%v", i+1, created, err, want)
		}
	}
	if ok, err := a.VhostExists(ctx, vhost); !ok || err != nil {
		t.Fatalf("VhostExists(%q) = %v, %v", vhost, ok, err)
	}
	if _, err := a.EnsureVhost(ctx, other); err != nil {
		t.Fatal(err)
	}
	if created, err := a.EnsureUser(ctx, user, "pw-1", ""); err != nil || !created {
		t.Fatalf("EnsureUser: %v %v", created, err)
	}
	if created, err := a.EnsureUser(ctx, user, "pw-2", ""); err != nil || created {
		t.Fatalf("EnsureUser again: %v %v", created, err)
	}
	if err := a.SetPermissions(ctx, vhost, user); err != nil {
		t.Fatal(err)
	}

	own, err := broker.VhostURI(b.AMQPURL, user, "pw-2", vhost)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(own, "%2F") {
		t.Fatalf("vhost not escaped in %s", broker.Redact(own))
	}
	conn, err := broker.Dial(ctx, own)
	if err != nil {
		t.Fatalf("user on its own vhost: %v", err)
	}
	defer conn.Close()

	// The other vhost is refused; so is the old password.
	otherURI, _ := broker.VhostURI(b.AMQPURL, user, "pw-2", other)
	if c, err := broker.Dial(ctx, otherURI); err == nil {
		c.Close()
		t.Fatal("user opened a vhost it has no permission on")
	} else if !broker.IsAccessRefused(err) {
		t.Fatalf("other vhost: %v, want an access refusal", err)
	} else {
		t.Logf("other vhost refused: %v", err)
	}
	stale, _ := broker.VhostURI(b.AMQPURL, user, "pw-1", vhost)
	if c, err := broker.Dial(ctx, stale); err == nil {
		c.Close()
		t.Fatal("old password still accepted")
	} else if !broker.IsAccessRefused(err) {
		t.Fatalf("old password: %v, want an access refusal", err)
	}

	// A missing queue is "missing", and the connection stays usable.
	if _, _, err := broker.QueueDepth(conn, broker.InboxQueue("m1")); !errors.Is(err, broker.ErrQueueMissing) {
		t.Fatalf("missing queue: %v", err)
	}
	if err := broker.DeclareDurableQueue(conn, broker.InboxQueue("m1")); err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ch.PublishWithContext(ctx, "", broker.InboxQueue("m1"), false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
	ch.Close()
	wait.For(t, 5*time.Second, "inbox depth 3", func() (bool, string) {
		n, _, err := broker.QueueDepth(conn, broker.InboxQueue("m1"))
		if err != nil {
			t.Fatal(err)
		}
		return n == 3, fmt.Sprintf("depth %d", n)
	})

	qs, err := a.ListQueues(ctx, vhost)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Name != "agent.m1.inbox" {
		t.Fatalf("ListQueues(%q) = %+v", vhost, qs)
	}
	if qs, err := a.ListQueues(ctx, other); err != nil || len(qs) != 0 {
		t.Fatalf("ListQueues(%q) = %+v, %v; want none", other, qs, err)
	}

	if deleted, err := a.DeleteVhost(ctx, other); err != nil || !deleted {
		t.Fatalf("DeleteVhost: %v %v", deleted, err)
	}
	if deleted, err := a.DeleteVhost(ctx, other); err != nil || deleted {
		t.Fatalf("DeleteVhost of a missing vhost: %v %v", deleted, err)
	}
	if _, err := a.ListQueues(ctx, other); !broker.IsNotFound(err) {
		t.Fatalf("ListQueues on a deleted vhost: %v, want 404", err)
	}
}

// TestBadAdminCredentials, on each broker: a 401 is reported at once (no
// retries) and names the URL and the env-var keys to fix.
func TestBadAdminCredentials(t *testing.T) {
	brokertest.Each(t, testBadAdminCredentials)
}

func testBadAdminCredentials(t *testing.T, b *brokertest.Broker) {
	a, err := broker.NewAdmin(b.MgmtURL, b.User, "definitely-wrong", broker.AdminOptions{RetryWaitMin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = a.Overview(ctxT(t))
	if !broker.IsAuth(err) {
		t.Fatalf("want an auth error, got %v", err)
	}
	if el := time.Since(t0); el > 900*time.Millisecond {
		t.Fatalf("a 401 took %v: it was retried", el)
	}
	for _, want := range []string{b.MgmtURL + "/api/overview", "401", "admin_password_env"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "definitely-wrong") {
		t.Errorf("error leaks the password: %v", err)
	}
}

// TestRetriesOnlyConnectionErrorsAnd5xx uses a local HTTP server: 5xx is
// retried until it succeeds; 404 and 403 are not retried.
func TestRetriesOnlyConnectionErrorsAnd5xx(t *testing.T) {
	var calls atomic.Int32
	status := atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.EscapedPath() != "/api/vhosts/a%2Fb" {
			t.Errorf("path %q, want /api/vhosts/a%%2Fb", r.URL.EscapedPath())
		}
		if s := int(status.Load()); s != 0 {
			w.WriteHeader(s)
			return
		}
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	a, err := broker.NewAdmin(srv.URL, "u", "p", broker.AdminOptions{RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if created, err := a.EnsureVhost(ctx, "a/b"); err != nil || !created || calls.Load() != 3 {
		t.Fatalf("503,503,201: created=%v err=%v calls=%d", created, err, calls.Load())
	}
	for _, s := range []int{http.StatusForbidden, http.StatusNotFound, http.StatusBadRequest} {
		calls.Store(0)
		status.Store(int32(s))
		if _, err := a.EnsureVhost(ctx, "a/b"); err == nil || calls.Load() != 1 {
			t.Fatalf("HTTP %d: err=%v calls=%d, want an error after 1 call", s, err, calls.Load())
		}
	}
	calls.Store(0)
	status.Store(http.StatusInternalServerError)
	_, err = a.EnsureVhost(ctx, "a/b")
	var ue *broker.UnreachableError
	if !errors.As(err, &ue) || calls.Load() != 1+broker.DefaultRetryMax {
		t.Fatalf("persistent 500: err=%v calls=%d", err, calls.Load())
	}
}

// TestUnreachableNamesURL: nothing listening → UnreachableError naming the
// URL, after the retries, within a couple of seconds.
func TestUnreachableNamesURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	a, err := broker.NewAdmin(url, "u", "p", broker.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = a.EnsureVhost(ctxT(t), "x")
	var ue *broker.UnreachableError
	if !errors.As(err, &ue) || ue.Attempts != 1+broker.DefaultRetryMax || !strings.Contains(err.Error(), url+"/api/vhosts/x") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("gave up after %v: %v", time.Since(t0), err)
}

func TestURLRules(t *testing.T) {
	if u, err := broker.VhostURI("amqp://127.0.0.1:5672", "fleet-kb", "p@ss/word", "fleet/kb"); err != nil ||
		u != "amqp://fleet-kb:p%40ss%2Fword@127.0.0.1:5672/fleet%2Fkb" {
		t.Fatalf("VhostURI = %q, %v", u, err)
	}
	uri, _ := broker.VhostURI("amqp://127.0.0.1:5672", "fleet-kb", "p@ss/word", "fleet/kb")
	parsed, err := amqp.ParseURI(uri)
	if err != nil || parsed.Vhost != "fleet/kb" || parsed.Password != "p@ss/word" {
		t.Fatalf("amqp091 reads %q as %+v, %v", uri, parsed, err)
	}
	for _, bad := range []string{"amqp://u:p@h:5672", "amqp://h:5672/vh", "http://h:5672", "amqp://"} {
		if _, err := broker.ParseAMQPURL(bad); err == nil {
			t.Errorf("ParseAMQPURL(%q) accepted", bad)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	for _, bad := range []string{"http://u:p@h:15672", "ftp://h", "http://h:15672?x=1"} {
		if _, err := broker.ParseManagementURL(bad); err == nil {
			t.Errorf("ParseManagementURL(%q) accepted", bad)
		}
	}
	if got := broker.Redact("amqp://u:secret@h:1/v"); strings.Contains(got, "secret") {
		t.Errorf("Redact = %q", got)
	}
}
