package wire

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// keyFromSeed returns a fixed key pair for golden vectors.
func keyFromSeed(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return ed25519.NewKeyFromSeed(seed)
}

// TestCanonicalGolden pins the canonical form and the signature over it:
// a change to either breaks every peer running the previous version.
func TestCanonicalGolden(t *testing.T) {
	e := &Envelope{Kind: KindControlRequest, ID: "0123456789abcdef0123456789abcdef", Re: "", Seq: 0,
		From: "alpha", To: "beta", Issued: time.UnixMilli(1767225600000), Expires: time.UnixMilli(1767225615000),
		Body: []byte(`{"verb":"stop","fleet":"kb","reply":"00112233aabbccdd"}`)}
	sum := sha256.Sum256(e.Body)
	want := "fleetmgr-federation/1\ncontrol-request\n0123456789abcdef0123456789abcdef\n\n0\nalpha\nbeta\n1767225600000\n1767225615000\n" + hex.EncodeToString(sum[:])
	if got := string(e.Canonical()); got != want {
		t.Fatalf("canonical form:\n%q\nwant\n%q", got, want)
	}
	key := keyFromSeed(7)
	h, err := Seal(e, key)
	if err != nil {
		t.Fatal(err)
	}
	// ed25519 signatures are deterministic (RFC 8032): the value is fixed.
	const wantSig = "Jdn4K0eO3ojwCIVz4bKB4K7ELKhpnzpkacpJcn2jA7/0uAEWzC1zQQbdh7m+MsJ4xwXoEPbO1LpZhsOvt61wCg=="
	if h[HdrSig] != wantSig {
		t.Errorf("signature %v, want %v", h[HdrSig], wantSig)
	}
	// The pinned signature verifies over the literal form above (not only
	// over whatever Canonical returns).
	sig, _ := base64.StdEncoding.DecodeString(wantSig)
	if !ed25519.Verify(identity.PublicKey(key), []byte(want), sig) {
		t.Error("the pinned signature does not verify over the literal canonical form")
	}
	if h[HdrKey] != identity.FormatPublicKey(identity.PublicKey(key)) || h[HdrIssued] != int64(1767225600000) || h[HdrVersion] != int64(1) {
		t.Errorf("headers %v", h)
	}
	if _, ok := h[HdrRe]; ok {
		t.Error("empty re sent as a header")
	}
	// Re and Seq are signed: changing either changes the form.
	e2 := *e
	e2.Re, e2.Seq = e.ID, 3
	if c := string(e2.Canonical()); !strings.Contains(c, "\n"+e.ID+"\n3\n") {
		t.Errorf("re/seq not in the canonical form: %q", c)
	}
}

func TestSealRefusesBadFields(t *testing.T) {
	key := keyFromSeed(1)
	now := time.Now()
	base := Envelope{Kind: KindPresence, ID: NewID(), From: "alpha", To: Broadcast, Issued: now, Expires: now.Add(time.Minute), Body: []byte("{}")}
	for name, mut := range map[string]func(e *Envelope){
		"unknown kind":  func(e *Envelope) { e.Kind = "gossip" },
		"short id":      func(e *Envelope) { e.ID = "abc" },
		"upper id":      func(e *Envelope) { e.ID = strings.ToUpper(NewID()) },
		"newline in re": func(e *Envelope) { e.Re = "0123456789abcdef0123456789abcde\n" },
		"bad from":      func(e *Envelope) { e.From = "Alpha\nbeta" },
		"bad to":        func(e *Envelope) { e.To = "a.b" },
		"no expiry":     func(e *Envelope) { e.Expires = time.Time{} },
		"backwards":     func(e *Envelope) { e.Expires = e.Issued.Add(-time.Second) },
		"too long":      func(e *Envelope) { e.Expires = e.Issued.Add(MaxLifetime + time.Second) },
		"too big":       func(e *Envelope) { e.Body = make([]byte, MaxPresenceBody+1) },
	} {
		e := base
		mut(&e)
		if _, err := Seal(&e, key); err == nil {
			t.Errorf("%s: sealed", name)
		}
	}
	if _, err := Seal(&base, key); err != nil {
		t.Fatalf("good envelope: %v", err)
	}
}

// fixture is a verifier for host beta trusting alpha (and beta itself),
// and a clock.
type fixture struct {
	alpha, beta, stranger ed25519.PrivateKey
	v                     *Verifier
	now                   time.Time
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{alpha: keyFromSeed(1), beta: keyFromSeed(2), stranger: keyFromSeed(3), now: time.UnixMilli(1767225600000)}
	tr, err := identity.ParseTrust([]string{identity.FormatTrustLine("alpha", identity.PublicKey(f.alpha), identity.CapAll)})
	if err != nil {
		t.Fatal(err)
	}
	tr, err = tr.WithSelf("beta", identity.PublicKey(f.beta))
	if err != nil {
		t.Fatal(err)
	}
	f.v = &Verifier{Trust: tr, Skew: 5 * time.Second, Now: func() time.Time { return f.now }}
	return f
}

// controlRoute is beta's control queue.
func controlRoute() Route {
	return Route{Kinds: []Kind{KindControlRequest, KindCallRequest, KindCancel, KindCatalogueRequest}, Self: "beta",
		Exchange: "fleet.control", RoutingKey: func(e *Envelope) string { return e.To }}
}

// rosterRoute is beta's roster queue.
func rosterRoute() Route {
	return Route{Kinds: []Kind{KindPresence, KindOffline}, Self: "beta", Broadcast: true,
		Exchange: "fleet.roster", RoutingKey: func(e *Envelope) string { return "roster." + e.From }}
}

// request returns a delivery of a control request alpha → beta, sealed
// with key after mut changed the envelope.
func (f *fixture) request(t testing.TB, key ed25519.PrivateKey, mut func(e *Envelope)) Delivery {
	e := &Envelope{Kind: KindControlRequest, ID: NewID(), From: "alpha", To: "beta", Issued: f.now, Expires: f.now.Add(15 * time.Second),
		Body: []byte(`{"verb":"stop","fleet":"kb","reply":"00112233aabbccdd"}`)}
	if mut != nil {
		mut(e)
	}
	h, err := Seal(e, key)
	if err != nil {
		t.Fatal(err)
	}
	return Delivery{Exchange: "fleet.control", RoutingKey: e.To, Headers: h, Body: e.Body}
}

// TestVerifyPipeline is the rejection matrix at the unit level: each step
// of the pipeline, in order, with its reason.
func TestVerifyPipeline(t *testing.T) {
	f := newFixture(t)
	seen := &MemorySeen{Now: func() time.Time { return f.now }}
	good := f.request(t, f.alpha, nil)
	if v, rej := f.v.Verify(good, controlRoute(), seen); rej != nil || v.Peer.Host != "alpha" || v.Kind != KindControlRequest {
		t.Fatalf("good request: %v %+v", rej, v)
	}
	edit := func(d Delivery, fn func(h map[string]any)) Delivery {
		d.Headers = maps.Clone(d.Headers)
		fn(d.Headers)
		return d
	}
	cases := []struct {
		name string
		d    Delivery
		r    Route
		want Reason
	}{
		{"oversized body", Delivery{Exchange: "fleet.control", RoutingKey: "beta", Headers: good.Headers, Body: make([]byte, MaxCallBody+1)}, controlRoute(), ReasonOversized},
		{"unsigned: no headers", Delivery{Exchange: "fleet.control", RoutingKey: "beta", Body: good.Body}, controlRoute(), ReasonUnsigned},
		{"unsigned: no sig", edit(good, func(h map[string]any) { delete(h, HdrSig) }), controlRoute(), ReasonUnsigned},
		{"unsigned: empty key", edit(good, func(h map[string]any) { h[HdrKey] = "" }), controlRoute(), ReasonUnsigned},
		{"malformed: version", edit(good, func(h map[string]any) { h[HdrVersion] = int64(2) }), controlRoute(), ReasonMalformed},
		{"malformed: kind not taken here", f.presence(t, f.alpha, nil), controlRoute(), ReasonMalformed},
		{"malformed: id type", edit(good, func(h map[string]any) { h[HdrID] = int64(5) }), controlRoute(), ReasonMalformed},
		{"malformed: issued type", edit(good, func(h map[string]any) { h[HdrIssued] = "now" }), controlRoute(), ReasonMalformed},
		{"malformed: sig not base64", edit(good, func(h map[string]any) { h[HdrSig] = "%%%" }), controlRoute(), ReasonMalformed},
		{"oversized for its kind", f.request(t, f.alpha, nil), controlRoute(), ""}, // replaced below
		{"untrusted key", f.request(t, f.stranger, nil), controlRoute(), ReasonUntrustedKey},
		{"bad signature: field changed", edit(good, func(h map[string]any) { h[HdrExpires] = h[HdrExpires].(int64) + 1 }), controlRoute(), ReasonBadSignature},
		{"bad signature: body changed", Delivery{Exchange: "fleet.control", RoutingKey: "beta", Headers: good.Headers, Body: []byte(`{"verb":"start","fleet":"kb","reply":"00112233aabbccdd"}`)}, controlRoute(), ReasonBadSignature},
		{"bad signature: other key's sig", edit(good, func(h map[string]any) { h[HdrKey] = identity.FormatPublicKey(identity.PublicKey(f.beta)) }), controlRoute(), ReasonBadSignature},
		{"from mismatch", f.request(t, f.alpha, func(e *Envelope) { e.From = "gamma" }), controlRoute(), ReasonFromMismatch},
		{"from mismatch: own key claims alpha", f.request(t, f.beta, nil), controlRoute(), ReasonFromMismatch},
		{"to mismatch", f.request(t, f.alpha, func(e *Envelope) { e.To = "gamma" }), controlRoute(), ReasonToMismatch},
		{"routing key mismatch", withRoute(f.request(t, f.alpha, nil), "fleet.control", "gamma"), controlRoute(), ReasonRoutingKeyMismatch},
		{"exchange mismatch (default exchange)", withRoute(f.request(t, f.alpha, nil), "", "control.beta"), controlRoute(), ReasonRoutingKeyMismatch},
		{"expired", f.request(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(-time.Minute), f.now.Add(-6*time.Second) }), controlRoute(), ReasonExpired},
		{"not yet valid", f.request(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(6*time.Second), f.now.Add(time.Minute) }), controlRoute(), ReasonNotYetValid},
		{"replayed", good, controlRoute(), ReasonReplayed},
		{"presence: to a host", f.presence(t, f.alpha, func(e *Envelope) { e.To = "beta" }), rosterRoute(), ReasonToMismatch},
		{"presence: key of another host", withRoute(f.presence(t, f.alpha, nil), "fleet.roster", "roster.gamma"), rosterRoute(), ReasonRoutingKeyMismatch},
	}
	cases[9] = struct {
		name string
		d    Delivery
		r    Route
		want Reason
	}{"oversized for its kind", func() Delivery {
		d := f.request(t, f.alpha, nil)
		d.Body = make([]byte, MaxRequestBody+1)
		return d
	}(), controlRoute(), ReasonOversized}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, rej := f.v.Verify(tc.d, tc.r, seen)
			if rej == nil {
				t.Fatalf("accepted: %+v", v)
			}
			if rej.Reason != tc.want {
				t.Fatalf("reason %s (%s), want %s", rej.Reason, rej.Detail, tc.want)
			}
		})
	}
	// Within the skew both ends pass.
	edge := f.request(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(4*time.Second), f.now.Add(-4*time.Second+time.Hour) })
	if _, rej := f.v.Verify(edge, controlRoute(), seen); rej != nil {
		t.Fatalf("within skew: %v", rej)
	}
	// A failed step before the replay check records nothing: the same
	// message, once valid, passes.
	later := f.request(t, f.alpha, func(e *Envelope) { e.Issued, e.Expires = f.now.Add(10*time.Second), f.now.Add(time.Minute) })
	if _, rej := f.v.Verify(later, controlRoute(), seen); rej == nil || rej.Reason != ReasonNotYetValid {
		t.Fatalf("early: %v", rej)
	}
	f.now = f.now.Add(6 * time.Second)
	if _, rej := f.v.Verify(later, controlRoute(), seen); rej != nil {
		t.Fatalf("once valid: %v", rej)
	}
}

func withRoute(d Delivery, ex, rk string) Delivery {
	d.Exchange, d.RoutingKey = ex, rk
	return d
}

func (f *fixture) presence(t testing.TB, key ed25519.PrivateKey, mut func(e *Envelope)) Delivery {
	e := &Envelope{Kind: KindPresence, ID: NewID(), From: "alpha", To: Broadcast, Issued: f.now, Expires: f.now.Add(6 * time.Second),
		Body: []byte(`{"heartbeat_ms":2000,"fleets":[]}`)}
	if mut != nil {
		mut(e)
	}
	h, err := Seal(e, key)
	if err != nil {
		t.Fatal(err)
	}
	return Delivery{Exchange: "fleet.roster", RoutingKey: "roster." + e.From, Headers: h, Body: e.Body}
}

// TestVerifyIntegerWidths: a broker or client may re-encode header
// integers narrower; they still verify.
func TestVerifyIntegerWidths(t *testing.T) {
	f := newFixture(t)
	d := f.request(t, f.alpha, nil)
	d.Headers[HdrVersion] = int8(1)
	if _, rej := f.v.Verify(d, controlRoute(), nil); rej != nil {
		t.Fatal(rej)
	}
}

func TestSigIsBase64Of64Bytes(t *testing.T) {
	f := newFixture(t)
	d := f.request(t, f.alpha, nil)
	b, err := base64.StdEncoding.DecodeString(d.Headers[HdrSig].(string))
	if err != nil || len(b) != 64 {
		t.Fatalf("%v %d", err, len(b))
	}
}

func TestPayloadChecks(t *testing.T) {
	okFleet := FleetSummary{Name: "kb", State: "running", UptimeS: 10, Members: 2, Verdicts: map[string]int{"WORKING": 1, "IDLE": 1}, Catalogue: strings.Repeat("a", 64)}
	p := Presence{HeartbeatMS: 2000, Fleets: []FleetSummary{okFleet}}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(p *Presence){
		"heartbeat 0":    func(p *Presence) { p.HeartbeatMS = 0 },
		"heartbeat 2m":   func(p *Presence) { p.HeartbeatMS = 120000 },
		"too many":       func(p *Presence) { p.Fleets = make([]FleetSummary, MaxFleets+1) },
		"bad name":       func(p *Presence) { p.Fleets[0].Name = "KB" },
		"bad state":      func(p *Presence) { p.Fleets[0].State = "running\n" },
		"bad catalogue":  func(p *Presence) { p.Fleets[0].Catalogue = "xyz" },
		"verdict key":    func(p *Presence) { p.Fleets[0].Verdicts = map[string]int{"a b": 1} },
		"negative count": func(p *Presence) { p.Fleets[0].Members = -1 },
		"twice":          func(p *Presence) { p.Fleets = append(p.Fleets, okFleet) },
	} {
		q := p
		q.Fleets = append([]FleetSummary(nil), p.Fleets...)
		mut(&q)
		if err := q.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := ControlRequest{Verb: "logs", Fleet: "kb", Args: []byte(`{"lines":5}`), Reply: "00112233aabbccdd"}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(r *ControlRequest){
		"args array": func(r *ControlRequest) { r.Args = []byte(`[1]`) },
		"no reply":   func(r *ControlRequest) { r.Reply = "" },
		"bad fleet":  func(r *ControlRequest) { r.Fleet = "../x" },
		"bad verb":   func(r *ControlRequest) { r.Verb = "st op" },
	} {
		q := r
		mut(&q)
		if err := q.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPresenceBoundFits: MaxFleets summaries at their largest fit in
// MaxPresenceBody.
func TestPresenceBoundFits(t *testing.T) {
	p := Presence{HeartbeatMS: 60000, StartedMS: 1 << 50}
	maxAge := int64(1 << 40)
	for i := 0; i < MaxFleets; i++ {
		v := map[string]int{}
		for j := 0; j < MaxVerdictKinds; j++ {
			v[strings.Repeat(string(rune('A'+j)), 16)] = 1_000_000
		}
		name := []byte(strings.Repeat("z", 32))
		name[29], name[30], name[31] = byte('a'+i/100), byte('a'+i/10%10), byte('a'+i%10)
		p.Fleets = append(p.Fleets, FleetSummary{Name: string(name), State: strings.Repeat("s", 16), UptimeS: 1 << 40,
			Restarts: 1_000_000_000, CrashLoop: true, Members: 1_000_000, Verdicts: v, Catalogue: strings.Repeat("f", 64), VerdictsAgeS: &maxAge})
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	b, err := jsonMarshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxPresenceBody {
		t.Fatalf("largest presence is %d bytes, bound %d", len(b), MaxPresenceBody)
	}
	t.Logf("largest presence: %d bytes (bound %d)", len(b), MaxPresenceBody)
}

// TestSizeBounds: for every kind, a body of exactly its bound seals and
// verifies on a queue taking it; one byte more is refused by Seal and,
// published anyway, by the verifier as oversized.
func TestSizeBounds(t *testing.T) {
	f := newFixture(t)
	all := []Kind{KindPresence, KindOffline, KindControlRequest, KindControlReply, KindCallRequest, KindCallProgress,
		KindCallReply, KindCancel, KindCatalogueRequest, KindCatalogueReply}
	for _, k := range all {
		t.Run(string(k), func(t *testing.T) {
			to, rk, ex := "beta", "beta", "fleet.control"
			if k == KindPresence || k == KindOffline {
				to, rk, ex = Broadcast, "roster.alpha", "fleet.roster"
			}
			r := Route{Kinds: []Kind{k}, Self: "beta", Broadcast: to == Broadcast, Exchange: ex, RoutingKey: func(*Envelope) string { return rk }}
			env := &Envelope{Kind: k, ID: NewID(), From: "alpha", To: to, Issued: f.now, Expires: f.now.Add(time.Minute), Body: make([]byte, k.MaxBody())}
			h, err := Seal(env, f.alpha)
			if err != nil {
				t.Fatalf("at the bound: %v", err)
			}
			if _, rej := f.v.Verify(Delivery{Exchange: ex, RoutingKey: rk, Headers: h, Body: env.Body}, r, nil); rej != nil {
				t.Fatalf("at the bound: %v", rej)
			}
			over := *env
			over.Body = make([]byte, k.MaxBody()+1)
			if _, err := Seal(&over, f.alpha); err == nil {
				t.Fatal("Seal took one byte over the bound")
			}
			if _, rej := f.v.Verify(Delivery{Exchange: ex, RoutingKey: rk, Headers: h, Body: over.Body}, r, nil); rej == nil || rej.Reason != ReasonOversized {
				t.Fatalf("one byte over: %v", rej)
			}
		})
	}
}
