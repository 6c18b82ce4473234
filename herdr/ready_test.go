package herdr_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/herdrd"
)

// counted starts a stand-in tuned by tune whose calls are counted.
func counted(t *testing.T, tune func(*herdrd.Config)) (*herdr.Client, *herdrd.CallCounter) {
	cc := &herdrd.CallCounter{}
	hc := standin(t, func(c *herdrd.Config) {
		c.LogCalls, c.Logger = true, slog.New(cc)
		if tune != nil {
			tune(c)
		}
	})
	return hc, cc
}

// agentLater is a command line that makes the pane an agent (the stand-in's status escape)
// after a pause, so that a watcher has to wait for it.
const agentLater = `sleep 1.5; printf '\033]777;herdr-status;idle\007'`

// watchAgentLater makes a workspace, starts watching its root pane for an agent, then types
// agentLater in it; the watch is closed when the test ends.
func watchAgentLater(t *testing.T, hc *herdr.Client) *herdr.AgentWatch {
	t.Helper()
	ctx := context.Background()
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pane := w.RootPane.PaneID
	watch := hc.WatchAgent(ctx, pane)
	t.Cleanup(watch.Close)
	if err := hc.PaneSendInput(ctx, pane, agentLater, []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	return watch
}

// TestWatchAgentEvents: against a herdr with the push methods (protocol 20 and 22), an agent
// appearing in a pane after the watch began ends the wait from herdr's event: pane.get is
// asked once (the state when the wait starts), never polled, and events.subscribe was taken.
// The agent shows 1.5 s after the command; polling would have asked pane.get about six times.
func TestWatchAgentEvents(t *testing.T) {
	for _, proto := range []int{20, 22} {
		t.Run("protocol"+strconv.Itoa(proto), func(t *testing.T) {
			hc, cc := counted(t, func(c *herdrd.Config) { c.Protocol = proto })
			ctx := context.Background()
			watch := watchAgentLater(t, hc)
			before := cc.Counts()
			r, err := watch.Wait(ctx, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			after := cc.Counts()
			if !r.Ready || r.Status != herdr.StatusIdle || r.Agent != "standin" || r.Via != herdr.ViaEvents || r.Fallback != "" {
				t.Fatalf("wait = %+v, want ready idle standin via events", r)
			}
			if n := after["pane.get"] - before["pane.get"]; n != 1 {
				t.Errorf("pane.get asked %d times during the wait, want 1 (the first look; the event ended it)", n)
			}
			if after["events.subscribe"] != 1 || after["pane.read"] != 0 {
				t.Errorf("calls %v: want one events.subscribe and no screen read", after)
			}
			t.Logf("ready after %s; calls %v", r.Took.Round(time.Millisecond), after)
		})
	}
}

// TestWatchAgentPolling: a herdr without the methods (an unknown method to it) and one whose
// protocol predates them (19, from ping: nothing is asked of it) are polled with pane.get,
// and the agent is still seen.
func TestWatchAgentPolling(t *testing.T) {
	for name, tune := range map[string]func(*herdrd.Config){
		"without-push": func(c *herdrd.Config) { c.WithoutPush = true },
		"protocol19":   func(c *herdrd.Config) { c.Protocol = 19 },
	} {
		t.Run(name, func(t *testing.T) {
			hc, cc := counted(t, tune)
			ctx := context.Background()
			watch := watchAgentLater(t, hc)
			r, err := watch.Wait(ctx, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			calls := cc.Counts()
			if !r.Ready || r.Status != herdr.StatusIdle || r.Via != herdr.ViaPolling || r.Fallback == "" {
				t.Fatalf("wait = %+v, want ready idle via polling with a reason", r)
			}
			if calls["pane.get"] < 2 {
				t.Errorf("pane.get asked %d times: the agent came 1.5 s later, so polling asks more than once", calls["pane.get"])
			}
			// The stand-in logs only the calls it serves: the refused events.subscribe of the
			// herdr without it is not counted, and protocol 19 is never asked.
			wantSub := 0
			if name == "without-push" {
				if !strings.Contains(r.Fallback, "does not know") {
					t.Errorf("fallback %q", r.Fallback)
				}
			} else if !strings.Contains(r.Fallback, "protocol 19") {
				t.Errorf("fallback %q", r.Fallback)
			}
			if calls["events.subscribe"] != wantSub {
				t.Errorf("events.subscribe asked %d times, want %d", calls["events.subscribe"], wantSub)
			}
			t.Logf("ready after %s (%s); calls %v", r.Took.Round(time.Millisecond), r.Fallback, calls)
		})
	}
}

// TestWatchAgentGoneAndTimeout: a pane that closes during the wait ends it as gone (protocol
// 22: from pane_closed), and a plain shell never becomes ready: the wait ends at its timeout
// with the status herdr shows a shell.
func TestWatchAgentGoneAndTimeout(t *testing.T) {
	hc := standin(t, func(c *herdrd.Config) { c.Protocol = 22 })
	ctx := context.Background()
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tab, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: w.Workspace.WorkspaceID})
	if err != nil {
		t.Fatal(err)
	}
	shell := hc.WatchAgent(ctx, w.RootPane.PaneID)
	defer shell.Close()
	gone := hc.WatchAgent(ctx, tab.RootPane.PaneID)
	defer gone.Close()
	if err := hc.PaneSendInput(ctx, tab.RootPane.PaneID, "sleep 1; exit", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	r, err := gone.Wait(ctx, 20*time.Second)
	if err != nil || !r.Gone || r.Ready || r.Via != herdr.ViaEvents {
		t.Fatalf("wait on a pane whose shell exits = %+v, %v; want gone via events", r, err)
	}
	if r.Took >= herdr.AgentBackstop {
		t.Errorf("the pane's end was seen after %s, by the backstop read, not from pane_closed", r.Took)
	}
	r, err = shell.Wait(ctx, 700*time.Millisecond)
	if err != nil || r.Ready || r.Gone || r.Status != herdr.StatusUnknown {
		t.Fatalf("wait on a plain shell = %+v, %v; want not ready, status unknown", r, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	again := hc.WatchAgent(ctx, w.RootPane.PaneID)
	defer again.Close()
	if _, err := again.Wait(cctx, time.Second); err == nil {
		t.Fatal("a wait whose context ended reported no error")
	}
}
