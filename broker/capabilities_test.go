package broker_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
)

// Overview bodies as the brokers send them (the fields fleetmgr reads, cut
// from GET /api/overview of RabbitMQ 3.10.8 and LavinMQ 1.0.0).
const (
	rabbitOverview  = `{"management_version":"3.10.8","product_version":"3.10.8","product_name":"RabbitMQ","rabbitmq_version":"3.10.8","erlang_version":"25.2.3","node":"rabbit@vm"}`
	lavinmqOverview = `{"lavinmq_version":"1.0.0","node":"vm","object_totals":{"queues":0}}`
)

func TestOverviewProduct(t *testing.T) {
	for _, c := range []struct {
		body, name, version string
	}{
		{rabbitOverview, broker.RabbitMQ, "3.10.8"},
		{lavinmqOverview, broker.LavinMQ, "1.0.0"},
		// A LavinMQ that also carried RabbitMQ's fields is still LavinMQ.
		{`{"lavinmq_version":"2.9.0","rabbitmq_version":"3.13.0","product_name":"RabbitMQ"}`, broker.LavinMQ, "2.9.0"},
		// Another broker speaking the API: its own product fields.
		{`{"product_name":"Other","product_version":"0.1"}`, "Other", "0.1"},
		{`{}`, "", ""},
	} {
		var o broker.Overview
		if err := json.Unmarshal([]byte(c.body), &o); err != nil {
			t.Fatal(err)
		}
		if n, v := o.Product(); n != c.name || v != c.version {
			t.Errorf("Product() of %s = %q %q, want %q %q", c.body, n, v, c.name, c.version)
		}
	}
}

// TestCapabilitiesProbe drives the probe against a local HTTP server
// answering like each broker, and like neither.
func TestCapabilitiesProbe(t *testing.T) {
	var overview atomic.Value
	var topic atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/overview":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(overview.Load().(string)))
		case "/api/topic-permissions":
			if s := int(topic.Load()); s != http.StatusOK {
				w.WriteHeader(s)
				_, _ = w.Write([]byte("404 Not Found"))
				return
			}
			_, _ = w.Write([]byte(`[]`))
		default:
			t.Errorf("unexpected request %s", r.URL.Path)
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	a, err := broker.NewAdmin(srv.URL, "u", "p", broker.AdminOptions{RetryMax: 1, RetryWaitMin: time.Millisecond, RetryWaitMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		overview    string
		topicStatus int
		product     string
		mgmt        string
		topicPerms  bool
	}{
		{rabbitOverview, http.StatusOK, broker.RabbitMQ, "3.10.8", true},
		{lavinmqOverview, http.StatusNotFound, broker.LavinMQ, "", false},
		// Probed, not inferred: a LavinMQ that gains the endpoint has it,
		// a RabbitMQ without it (before 3.7) has not.
		{lavinmqOverview, http.StatusOK, broker.LavinMQ, "", true},
		{rabbitOverview, http.StatusNotFound, broker.RabbitMQ, "3.10.8", false},
	} {
		overview.Store(c.overview)
		topic.Store(int32(c.topicStatus))
		caps, err := a.Capabilities(ctxT(t))
		if err != nil {
			t.Fatalf("%s with topic-permissions %d: %v", c.product, c.topicStatus, err)
		}
		if caps.Product != c.product || caps.ManagementVersion != c.mgmt || caps.Has(broker.TopicPermissions) != c.topicPerms {
			t.Errorf("%s with topic-permissions %d: %+v", c.product, c.topicStatus, caps)
		}
		if missing := caps.Missing(); c.topicPerms != (len(missing) == 0) {
			t.Errorf("%s with topic-permissions %d: Missing() = %v", c.product, c.topicStatus, missing)
		}
	}
	// Neither 200 nor 404 is an error, not a guess.
	overview.Store(rabbitOverview)
	topic.Store(http.StatusForbidden)
	if _, err := a.Capabilities(ctxT(t)); !broker.IsAuth(err) {
		t.Errorf("403 on topic-permissions: %v, want an auth error", err)
	}
	topic.Store(http.StatusInternalServerError)
	var ue *broker.UnreachableError
	if _, err := a.Capabilities(ctxT(t)); !errors.As(err, &ue) {
		t.Errorf("500 on topic-permissions: %v, want unreachable", err)
	}
	overview.Store(`<html>`)
	if _, err := a.Capabilities(ctxT(t)); err == nil {
		t.Error("an overview that is not JSON was accepted")
	}
}

// TestCapabilitiesOfEachBroker: the real brokers name themselves, with the
// version their own tools report, and RabbitMQ has topic permissions where
// LavinMQ has none.
func TestCapabilitiesOfEachBroker(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		caps, err := b.Admin(t).Capabilities(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", b.Name, caps)
		if caps.Product != b.Product || !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(caps.Version) {
			t.Errorf("%s: product %q version %q, want %s and a version", b.Name, caps.Product, caps.Version, b.Product)
		}
		if v, ok := b.ToolVersion(t); ok && v != caps.Version {
			t.Errorf("%s: the management API says version %q, its command-line tool %q", b.Name, caps.Version, v)
		}
		want := map[string][]broker.Capability{brokertest.NameRabbitMQ: nil, brokertest.NameLavinMQ: {broker.TopicPermissions}}[b.Name]
		if got := caps.Missing(); !slices.Equal(got, want) {
			t.Errorf("%s: missing capabilities %v, want %v", b.Name, got, want)
		}
		if (b.Name == brokertest.NameRabbitMQ) != (caps.ManagementVersion != "") {
			t.Errorf("%s: management_version %q (RabbitMQ reports its plugin's, LavinMQ none)", b.Name, caps.ManagementVersion)
		}
	})
}
