package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// receiver is a real local webhook receiver recording each body.
type receiver struct {
	mu     sync.Mutex
	bodies []Event
	srv    *httptest.Server
	fail   bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		var e Event
		_ = json.Unmarshal(b, &e)
		r.bodies = append(r.bodies, e)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.bodies...)
}

func start(t *testing.T, o Options) (*Notifier, func()) {
	n := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Run(ctx) })
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return n, stop
}

func TestEpisodeHoldResolveAndRestart(t *testing.T) {
	rcv := newReceiver(t)
	t.Setenv("TEST_HOOK_URL", rcv.srv.URL+"/hook")
	dir := t.TempDir()
	out := filepath.Join(dir, "cmd.out")
	rule := registry.Notify{Name: "r", On: []string{"member.blocked"}, Hold: registry.Duration{Duration: 300 * time.Millisecond},
		Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "TEST_HOOK_URL", Preset: "json"},
			{Type: "command", Command: []string{"sh", "-c", "cat >> " + out + "; echo \" $FLEETMGR_EVENT_STATE $FLEETMGR_EVENT_MEMBER\" >> " + out}}}}
	var attempts []Attempt
	var amu sync.Mutex
	o := Options{Rules: func() []registry.Notify { return []registry.Notify{rule} }, Path: filepath.Join(dir, "notify.json"), Tick: 20 * time.Millisecond,
		Attempted: func(a Attempt) { amu.Lock(); attempts = append(attempts, a); amu.Unlock() }}
	n, stop := start(t, o)
	kinds := []string{"member.blocked"}
	blocked := map[Subject]string{{"member.blocked", "m1"}: "waiting for approval"}

	// A flap shorter than the hold sends nothing.
	n.Observe("kb", kinds, blocked)
	n.Observe("kb", kinds, nil)
	wait.Never(t, 600*time.Millisecond, "a notification for a flap shorter than the hold", func() (bool, string) {
		g := rcv.got()
		return len(g) != 0, fmt.Sprintf("%+v", g)
	})

	// Held: one notification, however often it is seen again.
	n.Observe("kb", kinds, blocked)
	wait.For(t, 15*time.Second, "the firing notification", wait.Bool(func() bool { return len(rcv.got()) == 1 }))
	wait.Never(t, 250*time.Millisecond, "a second notification of a held episode seen again", func() (bool, string) {
		n.Observe("kb", kinds, blocked) // seen again at each check
		g := rcv.got()
		return len(g) != 1, fmt.Sprintf("%+v", g)
	})
	if g := rcv.got(); len(g) != 1 || g[0].State != StateFiring || g[0].Member != "m1" || !strings.Contains(g[0].Text, "BLOCKED") {
		t.Fatalf("after the hold: %+v", g)
	}

	// serve dies mid-episode; a new one sees it still blocked: no
	// duplicate; then it clears: one resolved.
	stop()
	n2, _ := start(t, o)
	n2.Observe("kb", kinds, blocked)
	wait.Never(t, 500*time.Millisecond, "a new notifier notifying the episode again", func() (bool, string) {
		g := rcv.got()
		return len(g) != 1, fmt.Sprintf("%+v", g)
	})
	n2.Observe("kb", kinds, nil)
	wait.For(t, 15*time.Second, "the resolved notification", wait.Bool(func() bool { return len(rcv.got()) == 2 }))
	if g := rcv.got(); g[1].State != StateResolved {
		t.Fatalf("second: %+v", g[1])
	}
	wait.For(t, 15*time.Second, "the command sink's two runs", wait.Bool(func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") >= 4
	}))
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), " firing m1") || !strings.Contains(string(b), " resolved m1") || !strings.Contains(string(b), `"kind":"member.blocked"`) {
		t.Fatalf("command sink got:\n%s", b)
	}
	amu.Lock()
	defer amu.Unlock()
	if len(attempts) != 2 { // the second notifier's only (the first's were 2 too, counted in its own)
		t.Logf("attempts: %+v", attempts)
	}
	for _, a := range attempts {
		if a.Err != nil {
			t.Fatalf("attempt failed: %+v", a)
		}
	}
}

func TestFailingSinkReported(t *testing.T) {
	rcv := newReceiver(t)
	rcv.fail = true
	t.Setenv("TEST_HOOK_URL2", rcv.srv.URL)
	rule := registry.Notify{Name: "r", On: []string{"fleet.failed"},
		Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "TEST_HOOK_URL2", Preset: "slack"}}}
	n, _ := start(t, Options{Rules: func() []registry.Notify { return []registry.Notify{rule} }, Tick: 20 * time.Millisecond})
	at, err := n.Test(context.Background(), "r")
	if err != nil || len(at) != 1 || at[0].Err == nil || strings.Contains(at[0].Err.Error(), "/") && strings.Contains(at[0].Err.Error(), rcv.srv.URL) {
		t.Fatalf("test through a failing sink: %+v, %v", at, err)
	}
	if h := n.Health(); len(h) != 1 || h[0].Failures != 1 || h[0].LastError == "" {
		t.Fatalf("health: %+v", h)
	}
	if _, err := n.Test(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), `no rule "nope" (rules: r)`) {
		t.Fatalf("unknown rule: %v", err)
	}
}

func TestBodies(t *testing.T) {
	e := Event{Kind: "member.blocked", Text: "m1 of kb is BLOCKED"}
	for preset, want := range map[string]string{"slack": `{"text":"m1 of kb is BLOCKED"}`, "discord": `{"content":"m1 of kb is BLOCKED"}`, "ntfy": "m1 of kb is BLOCKED"} {
		b, _, err := Body(preset, e)
		if err != nil || string(b) != want {
			t.Errorf("%s: %s, %v", preset, b, err)
		}
	}
}
