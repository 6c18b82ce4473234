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

// TestHostOffline: a peer whose presence expired notifies once after the
// hold and resolves once when it is online again; a peer that is back
// before the hold sends nothing; a rule naming fleets watches only their
// hosts; a peer not judged (ObserveHosts without it: never seen since a
// restart, or this host lost the broker) keeps its episode, neither
// resolved nor repeated by a new notifier.
func TestHostOffline(t *testing.T) {
	rcv := newReceiver(t)
	t.Setenv("TEST_HOOK_URL3", rcv.srv.URL)
	dir := t.TempDir()
	hold := registry.Duration{Duration: 300 * time.Millisecond}
	rules := []registry.Notify{
		{Name: "hosts", On: []string{KindHostOffline}, Hold: hold, Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "TEST_HOOK_URL3"}}},
		{Name: "docs-only", On: []string{KindHostOffline}, Fleets: []string{"docs@gamma"}, Hold: hold, Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "TEST_HOOK_URL3"}}},
		{Name: "members", On: []string{"member.blocked"}, Hold: hold, Sinks: []registry.NotifySink{{Type: "webhook", URLEnv: "TEST_HOOK_URL3"}}},
	}
	o := Options{Rules: func() []registry.Notify { return rules }, Path: filepath.Join(dir, "notify.json"), Tick: 20 * time.Millisecond}
	n, stop := start(t, o)
	got := func() string { return fmt.Sprintf("%+v", rcv.got()) }

	// beta back before the hold: nothing.
	n.ObserveHosts(map[string]string{"beta": "its presence expired"}, nil)
	n.ObserveHosts(nil, []string{"beta"})
	wait.Never(t, 600*time.Millisecond, "a notification for a host back before the hold", func() (bool, string) { return len(rcv.got()) != 0, got() })

	// beta away for longer: one firing, from the rule of all fleets only.
	n.ObserveHosts(map[string]string{"beta": "its presence expired; last beat at 10:00:00"}, nil)
	wait.For(t, 15*time.Second, "the firing notification", wait.Bool(func() bool { return len(rcv.got()) == 1 }))
	wait.Never(t, 300*time.Millisecond, "a second notification of the held episode", func() (bool, string) {
		n.ObserveHosts(map[string]string{"beta": "its presence expired; last beat at 10:00:00"}, nil)
		return len(rcv.got()) != 1, got()
	})
	g := rcv.got()[0]
	if g.Rule != "hosts" || g.Kind != KindHostOffline || g.Host != "beta" || g.Fleet != "" || g.State != StateFiring ||
		!strings.HasPrefix(g.Text, "host beta is offline") || !strings.Contains(g.Text, "presence expired") {
		t.Fatalf("firing: %+v", g)
	}

	// A new notifier (serve restarted) that cannot judge beta yet keeps
	// the episode: no resolution, no repeat.
	stop()
	n2, _ := start(t, o)
	n2.ObserveHosts(nil, nil)
	n2.ObserveHosts(map[string]string{"beta": "still away"}, nil)
	wait.Never(t, 500*time.Millisecond, "the restarted notifier notifying beta again or resolving it", func() (bool, string) { return len(rcv.got()) != 1, got() })
	n2.ObserveHosts(nil, []string{"beta"})
	wait.For(t, 15*time.Second, "the resolved notification", wait.Bool(func() bool { return len(rcv.got()) == 2 }))
	if g := rcv.got()[1]; g.State != StateResolved || g.Host != "beta" || !strings.HasPrefix(g.Text, "resolved: host beta no longer offline") {
		t.Fatalf("resolved: %+v", g)
	}

	// gamma: watched by both host rules (docs-only names docs@gamma).
	n2.ObserveHosts(map[string]string{"gamma": "it announced a clean stop"}, nil)
	wait.For(t, 15*time.Second, "gamma's two firings", wait.Bool(func() bool { return len(rcv.got()) == 4 }))
	rs := map[string]bool{}
	for _, e := range rcv.got()[2:] {
		rs[e.Rule] = e.Host == "gamma" && e.State == StateFiring
	}
	if !rs["hosts"] || !rs["docs-only"] || len(rs) != 2 {
		t.Fatalf("gamma's firings: %s", got())
	}
}
