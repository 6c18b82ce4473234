package proxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedteamDialBurstSharesListenerChecks: a burst of new connections to
// one fleet (many concurrent first calls) must not run one listener check
// (a /proc/net/tcp read and a scan of every process's fds, each slower the
// more sockets are open) per connection: measured on 2 cores, 80
// concurrent first calls took 2 s, past a 1 s call_timeout. Concurrent
// dials share a check, but only one that began after their own connection
// was established (as strong as one check per connection), so sequential
// dials still get one check each.
func TestRedteamDialBurstSharesListenerChecks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	p := New(Options{Manager: kbOnPort(t, ln.Addr().(*net.TCPAddr).Port), Version: "test"})
	var checks atomic.Int32
	var mu sync.Mutex
	var began []time.Time
	p.ups.checks.verify = func(ctx context.Context, name string, port int) error {
		checks.Add(1)
		mu.Lock()
		began = append(began, time.Now())
		mu.Unlock()
		time.Sleep(30 * time.Millisecond) // a scan under load: a sleep stands in for its duration
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			c, err := p.ups.dial(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			c.Close()
		})
	}
	wg.Wait()
	if n := checks.Load(); n > 10 {
		t.Fatalf("60 concurrent dials ran %d listener checks, want a few shared ones", n)
	}
	checks.Store(0)
	for range 3 {
		c, err := p.ups.dial(ctx, "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if n := checks.Load(); n != 3 {
		t.Fatalf("3 sequential dials ran %d listener checks, want 3 (each connection checked by a scan that began after it was established)", n)
	}
}
