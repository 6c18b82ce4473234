package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func presenceOf(hb time.Duration, started int64, fleets ...wire.FleetSummary) *wire.Presence {
	return &wire.Presence{HeartbeatMS: hb.Milliseconds(), StartedMS: started, Fleets: fleets}
}

// TestViewExpiryOnReceiverClock: a host expires 3 heartbeats after its
// last beat arrived, whatever the sender's clock says.
func TestViewExpiryOnReceiverClock(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	v := newView("alpha", []string{"beta", "gamma"}, c.now, DefaultClockSkew)
	// The sender's clock is an hour ahead: irrelevant.
	if changed, stale, online := v.apply("beta", c.t.Add(time.Hour), presenceOf(2*time.Second, 1, kb), 0); !changed || stale || !online {
		t.Fatalf("first presence: changed=%v stale=%v came online=%v", changed, stale, online)
	}
	if _, _, online := v.apply("beta", c.t.Add(time.Hour+time.Second), presenceOf(2*time.Second, 1, kb), 0); online {
		t.Fatal("a second beat of an online host came online again")
	}
	at := func(d time.Duration) HostState {
		c.t = time.Unix(1000, 0).Add(d)
		hv, _ := viewHost(v, "beta")
		return hv.State
	}
	if s := at(6 * time.Second); s != HostOnline {
		t.Fatalf("at exactly 3 beats: %s", s)
	}
	if s := at(6*time.Second + time.Millisecond); s != HostExpired {
		t.Fatalf("past 3 beats: %s", s)
	}
	if exp, online := v.sweep(); len(exp) != 1 || exp[0] != "beta" || online != 0 {
		t.Fatalf("sweep: %v %d", exp, online)
	}
	if exp, _ := v.sweep(); len(exp) != 0 {
		t.Fatalf("expiry reported twice: %v", exp)
	}
	hv, _ := viewHost(v, "beta")
	if len(hv.Fleets) != 1 || hv.LastSeen != time.Unix(1000, 0) {
		t.Fatalf("expired host lost its fleets or last-seen: %+v", hv)
	}
	// gamma never spoke; alpha (self) is not listed.
	if g, ok := viewHost(v, "gamma"); !ok || g.State != HostNeverSeen {
		t.Fatalf("gamma: %+v", g)
	}
	if _, ok := viewHost(v, "alpha"); ok {
		t.Fatal("self listed")
	}
	// A beat brings it back.
	if changed, _, online := v.apply("beta", c.t.Add(2*time.Hour), presenceOf(2*time.Second, 1, kb), 0); !changed || !online {
		t.Fatalf("return: changed=%v came online=%v", changed, online)
	}
	if hv, _ := viewHost(v, "beta"); hv.State != HostOnline {
		t.Fatalf("back: %s", hv.State)
	}
}

func viewHost(v *view, h string) (HostView, bool) {
	for _, hv := range v.snapshot() {
		if hv.Host == h {
			return hv, true
		}
	}
	return HostView{}, false
}

// TestViewOrdering: stale presence (older in the same run, or an earlier
// run) changes nothing; offline wins over older presence only.
func TestViewOrdering(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	v := newView("alpha", nil, c.now, DefaultClockSkew)
	t0 := time.Unix(5000, 0)
	v.apply("beta", t0, presenceOf(time.Second, 10, kb), 0)
	if _, stale, _ := v.apply("beta", t0, presenceOf(time.Second, 10), 0); !stale {
		t.Fatal("same issued accepted")
	}
	if _, stale, _ := v.apply("beta", t0.Add(-time.Second), presenceOf(time.Second, 10), 0); !stale {
		t.Fatal("older issued accepted")
	}
	if _, stale, _ := v.apply("beta", t0.Add(time.Hour), presenceOf(time.Second, 9), 0); !stale {
		t.Fatal("earlier run accepted")
	}
	if hv, _ := viewHost(v, "beta"); len(hv.Fleets) != 1 {
		t.Fatalf("stale presence changed the view: %+v", hv)
	}
	// A later run with an earlier clock (NTP stepped back) is accepted.
	if _, stale, _ := v.apply("beta", t0.Add(-time.Hour), presenceOf(time.Second, 11), 0); stale {
		t.Fatal("new run refused")
	}
	if _, stale := v.markOffline("beta", t0.Add(-2*time.Hour)); !stale {
		t.Fatal("offline older than the presence applied")
	}
	if changed, stale := v.markOffline("beta", t0); !changed || stale {
		t.Fatalf("offline: %v %v", changed, stale)
	}
	hv, _ := viewHost(v, "beta")
	if hv.State != HostOffline || len(hv.Fleets) != 0 {
		// The later run announced no fleets; it is offline now.
		t.Fatalf("offline: %+v", hv)
	}
	if _, stale, _ := v.apply("beta", t0.Add(-time.Minute), presenceOf(time.Second, 11), 0); !stale {
		t.Fatal("a beat sent before the offline revived it")
	}
	if _, stale, _ := v.apply("beta", t0.Add(time.Second), presenceOf(time.Second, 11), 0); stale {
		t.Fatal("a beat after the offline refused")
	}
	if hv, _ := viewHost(v, "beta"); hv.State != HostOnline {
		t.Fatalf("after the offline: %s", hv.State)
	}
}

// TestPresenceBodyBounds: invalid and duplicate summaries are left out,
// more than MaxFleets are cut and counted, and the result fits its bound.
func TestPresenceBodyBounds(t *testing.T) {
	var fleets []wire.FleetSummary
	for i := 0; i < wire.MaxFleets+44; i++ {
		fleets = append(fleets, wire.FleetSummary{Name: fmt.Sprintf("f%03d", i), State: "running"})
	}
	fleets = append(fleets, wire.FleetSummary{Name: "Bad Name", State: "running"}, wire.FleetSummary{Name: "f000", State: "stopped"})
	f := &Federation{cfg: Config{Heartbeat: time.Second, Source: SourceFunc(func(context.Context) []wire.FleetSummary { return fleets })},
		log: testLogger(t, "x"), warn: newLimiter(time.Second), started: time.Unix(7, 0)}
	b, err := f.presenceBody(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Presence
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Fleets) != wire.MaxFleets || p.Truncated != 44 || p.Fleets[0].Name != "f000" || p.StartedMS != 7000 || p.HeartbeatMS != 1000 {
		t.Fatalf("%d fleets, truncated %d, first %+v", len(p.Fleets), p.Truncated, p.Fleets[0])
	}
	if err := p.Check(); err != nil || len(b) > wire.MaxPresenceBody {
		t.Fatalf("check %v, %d bytes", err, len(b))
	}
}

// TestHostPermissionsRegexps: the regexps (read the same way by RabbitMQ's
// and LavinMQ's PCRE engines for these constructs) let a host at its own
// things only; the broker tests check the brokers agree.
func TestHostPermissionsRegexps(t *testing.T) {
	p := HostPermissions("alpha")
	cases := []struct {
		re, name string
		want     bool
	}{
		{p.Configure, "roster.alpha", true},
		{p.Configure, "reply.alpha.0123456789abcdef", true},
		{p.Configure, "reply.alpha.0123456789abcdeg", false},
		{p.Configure, "roster.alphabet", false},
		{p.Configure, "control.alpha", false},
		{p.Configure, "fleet.dlq", false},
		{p.Configure, "fleet.roster", false},
		{p.Write, "fleet.roster", true},
		{p.Write, "fleet.control", true},
		{p.Write, "fleet.dlx", true},
		{p.Write, "fleet.reply.beta", true},
		{p.Write, "fleet.dlq", false},
		{p.Write, "", false},
		{p.Write, "amq.default", false},
		{p.Write, "control.beta", false},
		{p.Read, "control.alpha", true},
		{p.Read, "control.beta", false},
		{p.Read, "fleet.reply.alpha", true},
		{p.Read, "fleet.reply.beta", false},
		{p.Read, "fleet.control", false},
		{p.Read, "fleet.dlq", false},
		{p.Read, "roster.beta", false},
	}
	for _, c := range cases {
		if got := regexp.MustCompile(c.re).MatchString(c.name); got != c.want {
			t.Errorf("%s ~ %q = %v, want %v", c.re, c.name, got, c.want)
		}
	}
	tp := RosterTopicPermission("alpha")
	for key, want := range map[string]bool{"roster.alpha": true, "roster.alpha.kb": true, "roster.alphabet": false, "roster.beta": false, "roster.alpha-2": false} {
		if got := regexp.MustCompile(tp.Write).MatchString(key); got != want {
			t.Errorf("topic write %q = %v, want %v", key, got, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	key, _, _ := identity.LoadOrCreateKey(t.TempDir() + "/k")
	good := Config{Host: "alpha", Key: key, URI: "amqp://x", StateDir: t.TempDir(), ClientOnly: true}
	if f, err := New(good); err != nil {
		t.Fatal(err)
	} else {
		_ = f.Stop(context.Background())
	}
	for name, mut := range map[string]func(c *Config){
		"bad host":   func(c *Config) { c.Host = "Alpha" },
		"no key":     func(c *Config) { c.Key = nil },
		"no uri":     func(c *Config) { c.URI = "" },
		"fast beat":  func(c *Config) { c.Heartbeat = time.Millisecond },
		"no source":  func(c *Config) { c.ClientOnly = false },
		"long timer": func(c *Config) { c.ControlTimeout = 2 * time.Hour },
	} {
		c := good
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWhenVhostReady: a declaration RabbitMQ refuses because a new
// vhost's supervisor is not running yet is tried again until it passes;
// any other error is returned at once.
func TestWhenVhostReady(t *testing.T) {
	notYet := &broker.HTTPError{Method: "PUT", URL: "u", Status: 400, Body: `{"error":"bad_request","reason":"… {vhost_supervisor_not_running,<<\"v\">>}"}`}
	n := 0
	err := whenVhostReady(context.Background(), func() error {
		if n++; n < 3 {
			return notYet
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("after two refusals: %v, %d tries", err, n)
	}
	other := &broker.HTTPError{Method: "PUT", URL: "u", Status: 400, Body: "inequivalent arg 'x-max-length'"}
	n = 0
	if err := whenVhostReady(context.Background(), func() error { n++; return other }); err != other || n != 1 {
		t.Fatalf("another 400: %v after %d tries", err, n)
	}
}
