package fleetd

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/broker"
)

// bus is the stand-in's AMQP side: one connection to the fleet's vhost,
// used to declare each spawned member's durable agent.<member>.inbox queue
// (docs/fleetd.md: queues have no fleet namespace). When the broker
// goes away the daemon keeps serving; a watcher redials with backoff, and a
// spawn while the broker is down fails with a tool error.
type bus struct {
	uri string // amqp://user:pass@host:port/vhost; never logged as is
	log *log.Logger

	mu   sync.Mutex
	conn *amqp.Connection // nil while disconnected

	cancel context.CancelFunc
	done   chan struct{} // closed when the watcher has returned
}

// ErrBroker starts tool errors about the broker.
const ErrBroker = "broker_error"

// connectBus dials the broker when the config has a URI and starts the
// watcher, owned by the daemon and stopped by closeBus. A first dial that
// fails is fatal: the daemon exits, as a fleetd that cannot reach its
// vhost would.
func (d *Daemon) connectBus(ctx context.Context) error {
	if d.cfg.BrokerURI == "" {
		d.log.Printf("fleet=%s no broker URI (%s): members get no inbox queue", d.cfg.Name, d.cfg.BrokerURIEnv)
		return nil
	}
	b := &bus{uri: d.cfg.BrokerURI, log: d.log, done: make(chan struct{})}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := broker.Dial(dctx, b.uri)
	cancel()
	if err != nil {
		return fmt.Errorf("fleetd stand-in: fleet=%s broker (%s): %w", d.cfg.Name, broker.Redact(b.uri), err)
	}
	b.conn = conn
	d.log.Printf("fleet=%s broker connected: %s (from %s)", d.cfg.Name, broker.Redact(b.uri), d.cfg.BrokerURIEnv)
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = wcancel
	go b.watch(wctx, d.cfg.Name)
	d.bus = b
	return nil
}

// closeBus stops the watcher and closes the connection.
func (d *Daemon) closeBus() {
	b := d.bus
	if b == nil {
		return
	}
	b.cancel()
	<-b.done
	b.mu.Lock()
	if b.conn != nil {
		_ = b.conn.Close()
		b.conn = nil
	}
	b.mu.Unlock()
}

// watch waits for the connection to close and redials (200 ms doubling to
// 5 s) until ctx ends.
func (b *bus) watch(ctx context.Context, fleet string) {
	defer close(b.done)
	for {
		b.mu.Lock()
		conn := b.conn
		b.mu.Unlock()
		if conn != nil {
			closed := conn.NotifyClose(make(chan *amqp.Error, 1))
			select {
			case <-ctx.Done():
				return
			case err := <-closed:
				b.log.Printf("fleet=%s broker connection lost: %v; redialling", fleet, err)
			}
			b.mu.Lock()
			b.conn = nil
			b.mu.Unlock()
		}
		wait := 200 * time.Millisecond
		for {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := broker.Dial(dctx, b.uri)
			cancel()
			if err == nil {
				b.mu.Lock()
				b.conn = c
				b.mu.Unlock()
				b.log.Printf("fleet=%s broker connection restored", fleet)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}
}

// declareInbox declares member's durable inbox queue in the fleet's vhost.
func (b *bus) declareInbox(member string) error {
	b.mu.Lock()
	conn := b.conn
	b.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return errors.New("not connected to the broker (reconnecting)")
	}
	return broker.DeclareDurableQueue(conn, broker.InboxQueue(member))
}
