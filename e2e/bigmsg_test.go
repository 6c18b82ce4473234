package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestMessageSizes: results and progress notifications of sizes around
// the hot path's buffers (the 16 KiB event scanner, the 64 KiB pooled
// message buffer) and well past them (1 MiB, 10 MiB) reach the caller
// intact (SHA-256 of the stand-in's filler text), through both mounts
// (HTTP /mcp, `fleetmgr mcp` over the unix socket), from a fleetd that
// answers with SSE (the go-sdk's default) and one that answers with plain
// JSON (the go-sdk's JSONResponse option); a message over the 64 MiB cap
// is a tool error naming the fleet and the cap.
func TestMessageSizes(t *testing.T) {
	e := newSizeEnv(t)
	serve := e.StartServe()
	clients := map[string]*sizeClient{"http": connectSizeHTTP(t, e), "stdio": connectSizeStdio(t, e)}
	waitEchoTool(t, clients["http"].cs, 20*time.Second)
	sizes := []int{16<<10 - 1, 16 << 10, 16<<10 + 1, 64<<10 + 1, 1 << 20, 10 << 20}
	seq := 0
	for _, mount := range []string{"http", "stdio"} {
		c := clients[mount]
		for _, fleet := range sizeFleets {
			for _, n := range sizes {
				t.Run(fmt.Sprintf("%s/%s/result/%d", mount, fleet, n), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					out, err := c.echoSize(ctx, fleet, n, 0, "")
					if err == nil {
						err = checkEchoResult(out.res)
					}
					if err != nil {
						t.Fatal(err)
					}
				})
				t.Run(fmt.Sprintf("%s/%s/progress/%d", mount, fleet, n), func(t *testing.T) {
					if fleet == "json" {
						skipWithoutFastPath(t, "a fleetd answering in JSON sends progress on its session's stream after the result; through the go-sdk the caller's request is over by then and the progress is lost (the fast path sends it on the caller's session: notifyLate)")
					}
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					seq++
					tok := fmt.Sprintf("size-%d", seq)
					out, err := c.echoSize(ctx, fleet, 1000, n, tok)
					if err == nil {
						err = checkEchoResult(out.res)
					}
					if err != nil {
						t.Fatal(err)
					}
					// The client hands notifications to its handler on its own
					// schedule, and a JSON fleetd sends progress on its
					// session's stream, in no set order with the result: wait
					// for it.
					progress := out.progress
					_ = wait.Until(context.Background(), 30*time.Second, wait.Bool(func() bool { // a shortfall is reported next
						if len(progress) == 0 {
							progress = c.progressOf(tok)
						}
						return len(progress) > 0
					}))
					if err := checkEchoProgress(progress, n); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
	// Over the cap: a tool error naming the fleet and the cap, and the
	// daemon still answers afterwards.
	over := 64<<20 + 1
	for _, mount := range []string{"http", "stdio"} {
		c := clients[mount]
		for _, fleet := range sizeFleets {
			t.Run(fmt.Sprintf("%s/%s/result/over-cap", mount, fleet), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				out, err := c.echoSize(ctx, fleet, over, 0, "")
				if err != nil {
					t.Fatal(err)
				}
				if msg := textOf(out.res); !out.res.IsError || !strings.Contains(msg, "fleet "+fleet) || !strings.Contains(msg, "64 MiB") {
					t.Fatalf("a %d-byte result: error %v, %q; want a tool error naming fleet %s and the 64 MiB cap", over, out.res.IsError, msg, fleet)
				}
				out, err = c.echoSize(ctx, fleet, 5000, 0, "")
				if err == nil {
					err = checkEchoResult(out.res)
				}
				if err != nil {
					t.Fatalf("the next call: %v", err)
				}
			})
		}
	}
	// A progress notification over the cap: from the SSE fleetd, on the
	// call's own stream, it fails the call with the tool error. The JSON
	// fleetd sends it on its session's own event stream (the go-sdk
	// server's JSONResponse mode), read by the go-sdk client with the cap
	// as its MaxEventSize: that stream breaks, serve says so naming the
	// fleet and the cap, and the session is reopened; the call itself,
	// answered on its own POST, returns its result, unless the session's
	// end overtakes it (then a tool error naming the fleet). Never is a
	// piece of the notification relayed.
	for _, mount := range []string{"http", "stdio"} {
		c := clients[mount]
		for _, fleet := range sizeFleets {
			t.Run(fmt.Sprintf("%s/%s/progress/over-cap", mount, fleet), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				seq++
				tok := fmt.Sprintf("size-%d", seq)
				warnings := strings.Count(serve.Log(), "a message on its event stream is larger than the cap")
				out, err := c.echoSize(ctx, fleet, 1000, over, tok)
				if err != nil {
					t.Fatal(err)
				}
				msg := textOf(out.res)
				switch {
				case fleet == "sse" && (!out.res.IsError || !strings.Contains(msg, "fleet sse") || !strings.Contains(msg, "64 MiB")):
					t.Fatalf("a %d-byte progress notification: error %v, %q; want a tool error naming fleet sse and the 64 MiB cap", over, out.res.IsError, msg)
				case fleet == "json" && out.res.IsError && !strings.Contains(msg, "fleet json"):
					t.Fatalf("a %d-byte progress notification: %q, want the result or a tool error naming fleet json", over, msg)
				case fleet == "json" && !out.res.IsError:
					if err := checkEchoResult(out.res); err != nil {
						t.Fatal(err)
					}
				}
				if fleet == "json" {
					wait.For(t, 20*time.Second, "serve to log the broken event stream naming fleet json and the cap", wait.Bool(func() bool {
						log := serve.Log()
						return strings.Count(log, "a message on its event stream is larger than the cap") > warnings &&
							strings.Contains(log, `fleet=json cap="64 MiB"`)
					}))
				}
				if p := c.progressOf(tok); len(p) != 0 {
					t.Fatalf("%d progress notifications relayed", len(p))
				}
				out, err = c.echoSize(ctx, fleet, 5000, 0, "")
				if err == nil {
					err = checkEchoResult(out.res)
				}
				if err != nil {
					t.Fatalf("the next call: %v", err)
				}
			})
		}
	}
}
