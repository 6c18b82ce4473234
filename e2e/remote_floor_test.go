package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
)

// amqpFloor is BenchmarkRemoteOverhead's floor: a bare AMQP request and
// reply over the same broker, vhost and (when beta dials through it) the
// same namespace relay as a remote call, with none of fleetmgr's work —
// no MCP, no signing or verifying, no seen-set, no fleetd. The "alpha"
// side publishes each request (publisher confirms on, mandatory, a TTL,
// awaited alongside the reply, as federation.roundTrip does) to a queue
// the "beta" side consumes (prefetch 16, acknowledged on arrival as
// control.<host> is); beta answers each on a confirm-mode channel to
// alpha's exclusive reply queue, waiting for the confirm as
// sendAnswer does. What a remote call costs above this floor is
// fleetmgr's; the floor itself is the broker's and the relay's.
type amqpFloor struct {
	ch      *amqp.Channel // alpha's publishing channel (confirm mode)
	mu      sync.Mutex    // guards pending and ch's publishes
	pending map[string]chan struct{}
	reqQ    string
	replyQ  string
	next    atomic.Uint64
	// fedShape: requests go as the federation's do — through a topic
	// exchange to a durable queue with a dead-letter exchange and a
	// length cap, each message with the envelope's eleven headers — and
	// answers through a direct exchange: what the federation's topology
	// costs the broker over the bare default-exchange round trip.
	fedShape bool
	reqX     string
	headers  amqp.Table
}

// newAMQPFloor opens both sides on vhost of b: alpha dialled directly,
// beta with dialBeta (through the relay, or directly), each with
// broker.QuickAck as the federation's connections have.
func newAMQPFloor(tb testing.TB, b *brokertest.Broker, vhost, tag string, fedShape bool, dialBeta func(ctx context.Context, network, addr string) (net.Conn, error)) *amqpFloor {
	tb.Helper()
	uri, err := broker.VhostURI(b.AMQPURL, b.User, b.Password, vhost)
	if err != nil {
		tb.Fatal(err)
	}
	dial := func(d func(ctx context.Context, network, addr string) (net.Conn, error)) *amqp.Connection {
		c, err := amqp.DialConfig(uri, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Dial: func(network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := d(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return broker.QuickAck(c), nil
		}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c
	}
	direct := (&net.Dialer{}).DialContext
	f := &amqpFloor{pending: map[string]chan struct{}{}, reqQ: "floor-req-" + tag, replyQ: "floor-reply-" + tag}

	// beta: consume requests, answer each.
	bc := dial(dialBeta)
	bin, err := bc.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if fedShape {
		f.fedShape, f.reqX = true, "floor-x-"+tag
		f.headers = amqp.Table{}
		for _, h := range []string{"v", "kind", "id", "re", "seq", "from", "to", "issued", "expires", "key", "sig"} {
			f.headers["x-fleetmgr-"+h] = strings.Repeat("0", 40)
		}
		if err := bin.ExchangeDeclare(f.reqX, "topic", false, true, false, false, nil); err != nil {
			tb.Fatal(err)
		}
		if err := bin.ExchangeDeclare(f.reqX+"-dlx", "fanout", false, true, false, false, nil); err != nil {
			tb.Fatal(err)
		}
		if _, err := bin.QueueDeclare(f.reqQ, true, true, false, false, amqp.Table{"x-dead-letter-exchange": f.reqX + "-dlx", "x-max-length": int64(10000)}); err != nil {
			tb.Fatal(err)
		}
		if err := bin.QueueBind(f.reqQ, "beta", f.reqX, false, nil); err != nil {
			tb.Fatal(err)
		}
	} else if _, err := bin.QueueDeclare(f.reqQ, false, true, false, false, nil); err != nil {
		tb.Fatal(err)
	}
	_ = bin.Qos(16, 0, false)
	reqs, err := bin.Consume(f.reqQ, "", false, false, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	bout, err := bc.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if err := bout.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	go func() {
		for d := range reqs {
			_ = d.Ack(false)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				x := ""
				if f.fedShape {
					x = f.reqX + "-reply"
				}
				dc, err := bout.PublishWithDeferredConfirmWithContext(ctx, x, d.ReplyTo, false, false,
					amqp.Publishing{CorrelationId: d.CorrelationId, Headers: f.headers, ContentType: "application/json", Body: d.Body})
				if err == nil {
					_, _ = dc.WaitContext(ctx)
				}
			}()
		}
	}()

	// alpha: publish requests, take replies.
	ac := dial(direct)
	if f.ch, err = ac.Channel(); err != nil {
		tb.Fatal(err)
	}
	if err := f.ch.Confirm(false); err != nil {
		tb.Fatal(err)
	}
	rch, err := ac.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := rch.QueueDeclare(f.replyQ, false, true, true, false, nil); err != nil {
		tb.Fatal(err)
	}
	if fedShape {
		if err := rch.ExchangeDeclare(f.reqX+"-reply", "direct", false, true, false, false, nil); err != nil {
			tb.Fatal(err)
		}
		if err := rch.QueueBind(f.replyQ, f.replyQ, f.reqX+"-reply", false, nil); err != nil {
			tb.Fatal(err)
		}
	}
	_ = rch.Qos(16, 0, false)
	replies, err := rch.Consume(f.replyQ, "", false, true, false, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for d := range replies {
			f.mu.Lock()
			c := f.pending[d.CorrelationId]
			delete(f.pending, d.CorrelationId)
			f.mu.Unlock()
			if c != nil {
				close(c)
			}
			_ = d.Ack(false)
		}
	}()
	return f
}

// call is one request and its reply (a body of the size of a
// fleet_whoami call request).
func (f *amqpFloor) call(ctx context.Context) error {
	id := strconv.FormatUint(f.next.Add(1), 10)
	c := make(chan struct{})
	f.mu.Lock()
	f.pending[id] = c
	f.mu.Unlock()
	x, key := "", f.reqQ
	if f.fedShape {
		x, key = f.reqX, "beta"
	}
	dc, err := f.ch.PublishWithDeferredConfirmWithContext(ctx, x, key, true, false, amqp.Publishing{
		CorrelationId: id, ReplyTo: f.replyQ, Headers: f.headers, ContentType: "application/json", Expiration: "30000", Body: floorBody})
	if err != nil {
		return err
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C:
		f.mu.Lock()
		delete(f.pending, id)
		f.mu.Unlock()
		return fmt.Errorf("floor request %s: no reply in 30 s", id)
	}
	<-dc.Done()
	return nil
}

// floorBody is about what a fleet_whoami call request carries.
var floorBody = []byte(`{"fleet":"docs","tool":"fleet_whoami","reply":"0123456789abcdef","arguments":{}}`)

// callers returns n callers of f (they share its connections, as
// concurrent remote calls share the federation's).
func (f *amqpFloor) callers(n int) []func(context.Context) error {
	fns := make([]func(context.Context) error, n)
	for i := range fns {
		fns[i] = f.call
	}
	return fns
}

// cpuNSOf is cpuNS summed over pids.
func cpuNSOf(pids []int) int64 {
	var n int64
	for _, p := range pids {
		n += cpuNS(p)
	}
	return n
}

// brokerPIDs are the broker's processes on this machine (RabbitMQ's Erlang
// VM, beam.smp; LavinMQ's lavinmq): their CPU is the broker's share of a
// call, other users of the same broker included.
func brokerPIDs() []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + d.Name() + "/comm")
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "beam.smp", "lavinmq":
			pids = append(pids, pid)
		}
	}
	return pids
}
