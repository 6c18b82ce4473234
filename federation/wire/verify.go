package wire

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// Reason names why a message was refused. It is the value of the
// dead-letter header HdrRejectReason, the reason= of the WARN log line and
// the reason label of the counters, so it is one fixed word.
type Reason string

// The reasons, in the order the verifier checks (a message is refused for
// the first that applies), then the ones found after verification.
const (
	ReasonOversized          Reason = "oversized"            // body larger than the kind allows
	ReasonUnsigned           Reason = "unsigned"             // no signature or no key header
	ReasonMalformed          Reason = "malformed"            // a header missing or invalid, a kind not taken here, a payload that does not decode
	ReasonUntrustedKey       Reason = "untrusted-key"        // signer's key not in the trust list
	ReasonBadSignature       Reason = "bad-signature"        // the signature does not verify under that key
	ReasonFromMismatch       Reason = "from-mismatch"        // from is not the host the key belongs to
	ReasonToMismatch         Reason = "to-mismatch"          // to is not this host (or not "*" for presence)
	ReasonRoutingKeyMismatch Reason = "routing-key-mismatch" // the exchange or routing key it came by does not match to/from
	ReasonExpired            Reason = "expired"              // past expires (+ skew)
	ReasonNotYetValid        Reason = "not-yet-valid"        // issued in the future (beyond skew)
	ReasonReplayed           Reason = "replayed"             // its id was seen before
	ReasonSeenSetFailed      Reason = "seen-set-failed"      // the seen-set could not record it (full, disk): refused, fail closed
	ReasonNotAuthorised      Reason = "not-authorised"       // the peer's capabilities do not allow the verb
	ReasonUnknownVerb        Reason = "unknown-verb"         // a control verb this host does not know
	ReasonStale              Reason = "stale"                // presence older than what the view holds (reordering, not an attack)
)

// Reasons lists every Reason, for pre-creating counter series.
var Reasons = []Reason{ReasonOversized, ReasonUnsigned, ReasonMalformed, ReasonUntrustedKey, ReasonBadSignature,
	ReasonFromMismatch, ReasonToMismatch, ReasonRoutingKeyMismatch, ReasonExpired, ReasonNotYetValid, ReasonReplayed,
	ReasonSeenSetFailed, ReasonNotAuthorised, ReasonUnknownVerb, ReasonStale}

// Rejection is a refused message: the reason, a detail for logs (never
// secret, bounded), and whatever of the envelope could be read (nil when
// nothing could).
type Rejection struct {
	Reason Reason
	Detail string
	// Env is the envelope as far as it parsed; its fields are unverified
	// unless Reason comes after ReasonFromMismatch in the pipeline.
	Env *Envelope
}

// Error returns "reason: detail".
func (r *Rejection) Error() string { return string(r.Reason) + ": " + r.Detail }

func reject(reason Reason, env *Envelope, format string, args ...any) *Rejection {
	d := fmt.Sprintf(format, args...)
	if len(d) > 300 {
		d = d[:300] + "…"
	}
	return &Rejection{Reason: reason, Detail: d, Env: env}
}

// Delivery is a message as it came off a queue.
type Delivery struct {
	// Exchange and RoutingKey are what it was published to, as the broker
	// reports them (basic.deliver).
	Exchange, RoutingKey string
	// Headers are the AMQP headers.
	Headers map[string]any
	// Body is the AMQP body.
	Body []byte
}

// Route describes one queue's expectations: which kinds it takes and by
// which exchange and routing key each must have come.
type Route struct {
	// Kinds are the kinds accepted on this queue.
	Kinds []Kind
	// Self is this manager's host id.
	Self string
	// Broadcast: To must be Broadcast (roster); else To must be Self.
	Broadcast bool
	// Exchange is the exchange the messages must have been published to.
	Exchange string
	// RoutingKey returns the routing key a message with these (verified)
	// fields must have been published with.
	RoutingKey func(e *Envelope) string
	// ArrivalBound, when not 0, judges freshness on arrival instead of
	// by issued/expires against Skew (presence: whether a host is alive is
	// when its beats arrive, on the receiver's clock, so a sender whose
	// clock is off is still shown — and its offset measured — rather than
	// hidden; docs/FEDERATION.md "Clock skew"). issued must then be within
	// ArrivalBound of now either way, and the id is kept until
	// max(now, issued) + ArrivalBound + the message's lifetime, so that a
	// replay after it is forgotten is refused as expired.
	ArrivalBound time.Duration
}

// Seen records message ids, with the (verified) host that sent each,
// until a time and reports whether an id is new. Add must be atomic: of
// two concurrent Adds of one id exactly one is fresh. An error refuses the
// message (fail closed); a Seen may bound the ids one host holds, so that
// one peer cannot fill it for all (MemorySeen, FileSeen).
type Seen interface {
	Add(from, id string, until time.Time) (fresh bool, err error)
}

// Verifier runs the verification pipeline (issue order: signature by a
// trusted key, from is that key's host, to is this host and matches the
// routing key, not expired, id never seen).
type Verifier struct {
	// Trust is who is trusted (identity.Trust.WithSelf to include this
	// host's own key).
	Trust *identity.Trust
	// Skew is the clock skew allowed at both ends of [issued, expires].
	Skew time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Verified is a message that passed: its envelope and the peer (trust
// entry) that signed it.
type Verified struct {
	Envelope
	Peer identity.Peer
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Verify checks d against the route, in this order: size (before any
// hashing: oversized), signature headers present (unsigned), envelope
// headers well formed and a kind this route takes (malformed), the
// kind's size bound (oversized), signer key trusted (untrusted-key),
// signature valid (bad-signature), from is the key's host
// (from-mismatch), to is this host or "*" as the route wants
// (to-mismatch), exchange and routing key match (routing-key-mismatch),
// not expired / not yet valid (expired, not-yet-valid, with Skew), and
// last the id is new in seen (replayed; seen-set-failed when seen
// errs). seen may be nil (no replay check, for tests of the earlier
// steps). The body is not decoded: payload errors are the caller's
// (ReasonMalformed).
func (v *Verifier) Verify(d Delivery, r Route, seen Seen) (*Verified, *Rejection) {
	maxBody := 0
	for _, k := range r.Kinds {
		maxBody = max(maxBody, k.MaxBody())
	}
	if len(d.Body) > maxBody {
		return nil, reject(ReasonOversized, nil, "body of %d bytes is larger than anything this queue takes (%d)", len(d.Body), maxBody)
	}
	keyText, okKey := d.Headers[HdrKey].(string)
	sigText, okSig := d.Headers[HdrSig].(string)
	if !okKey || !okSig || keyText == "" || sigText == "" {
		return nil, reject(ReasonUnsigned, nil, "no %s or %s header", HdrKey, HdrSig)
	}
	env, err := parseHeaders(d.Headers)
	if err != nil {
		return nil, reject(ReasonMalformed, env, "%v", err)
	}
	env.Body = d.Body
	if !slices.Contains(r.Kinds, env.Kind) {
		return nil, reject(ReasonMalformed, env, "kind %s is not taken on this queue", env.Kind)
	}
	if err := env.check(); err != nil {
		if len(env.Body) > env.Kind.MaxBody() {
			return nil, reject(ReasonOversized, env, "%v", err)
		}
		return nil, reject(ReasonMalformed, env, "%v", err)
	}
	pub, err := identity.ParsePublicKey(keyText)
	if err != nil {
		return nil, reject(ReasonMalformed, env, "%s: %v", HdrKey, err)
	}
	sig, err := base64.StdEncoding.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, reject(ReasonMalformed, env, "%s is not a base64 ed25519 signature", HdrSig)
	}
	peer, ok := v.Trust.ByKey(pub)
	if !ok {
		return nil, reject(ReasonUntrustedKey, env, "signed by %s, which no trust entry lists (claims to be from %q)", keyText, env.From)
	}
	if !ed25519.Verify(pub, env.Canonical(), sig) {
		return nil, reject(ReasonBadSignature, env, "the signature does not verify under %s (host %s's key)", keyText, peer.Host)
	}
	if env.From != peer.Host {
		return nil, reject(ReasonFromMismatch, env, "from %q, but signed by host %q's key", env.From, peer.Host)
	}
	if r.Broadcast && env.To != Broadcast || !r.Broadcast && env.To != r.Self {
		want := r.Self
		if r.Broadcast {
			want = Broadcast
		}
		return nil, reject(ReasonToMismatch, env, "to %q, this queue takes %q", env.To, want)
	}
	if want := r.RoutingKey(env); d.Exchange != r.Exchange || d.RoutingKey != want {
		return nil, reject(ReasonRoutingKeyMismatch, env, "came by exchange %q key %q, want exchange %q key %q", clip(d.Exchange), clip(d.RoutingKey), r.Exchange, want)
	}
	now := v.now()
	until := env.Expires.Add(v.Skew)
	if r.ArrivalBound > 0 {
		if off := now.Sub(env.Issued); off > r.ArrivalBound {
			return nil, reject(ReasonExpired, env, "issued %s ago by the sender's clock, more than the %s a clock may be off", off.Round(time.Millisecond), r.ArrivalBound)
		} else if -off > r.ArrivalBound {
			return nil, reject(ReasonNotYetValid, env, "issued %s in the future by the sender's clock, more than the %s a clock may be off", (-off).Round(time.Millisecond), r.ArrivalBound)
		}
		until = env.Issued
		if now.After(until) {
			until = now
		}
		until = until.Add(r.ArrivalBound + env.Expires.Sub(env.Issued))
	} else if now.After(env.Expires.Add(v.Skew)) {
		return nil, reject(ReasonExpired, env, "expired at %s, %s ago (skew allowed %s)", env.Expires.UTC().Format(time.RFC3339Nano), now.Sub(env.Expires).Round(time.Millisecond), v.Skew)
	}
	if r.ArrivalBound == 0 && env.Issued.After(now.Add(v.Skew)) {
		return nil, reject(ReasonNotYetValid, env, "issued %s in the future (skew allowed %s)", env.Issued.Sub(now).Round(time.Millisecond), v.Skew)
	}
	if seen != nil {
		fresh, err := seen.Add(env.From, env.ID, until)
		if err != nil {
			return nil, reject(ReasonSeenSetFailed, env, "%v", err)
		}
		if !fresh {
			return nil, reject(ReasonReplayed, env, "id %s was seen before", env.ID)
		}
	}
	return &Verified{Envelope: *env, Peer: peer}, nil
}

// parseHeaders reads the envelope fields from headers. On error the
// envelope holds what was read so far (for the log).
func parseHeaders(h map[string]any) (*Envelope, error) {
	e := &Envelope{}
	ver, ok := intHeader(h, HdrVersion)
	if !ok {
		return e, fmt.Errorf("%s missing or not an integer", HdrVersion)
	}
	if ver != Version {
		return e, fmt.Errorf("envelope version %d, this manager reads %d", ver, Version)
	}
	str := func(name string, dst *string, required bool) error {
		v, present := h[name]
		if !present {
			if required {
				return fmt.Errorf("%s missing", name)
			}
			return nil
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s is a %T, not a string", name, v)
		}
		*dst = s
		return nil
	}
	var kind string
	for _, f := range []struct {
		name     string
		dst      *string
		required bool
	}{{HdrKind, &kind, true}, {HdrID, &e.ID, true}, {HdrRe, &e.Re, false}, {HdrFrom, &e.From, true}, {HdrTo, &e.To, true}} {
		if err := str(f.name, f.dst, f.required); err != nil {
			return e, err
		}
	}
	e.Kind = Kind(kind)
	if v, present := h[HdrSeq]; present {
		n, ok := toInt(v)
		if !ok || n < 0 || n > 1<<32-1 {
			return e, fmt.Errorf("%s is not a 32-bit unsigned integer", HdrSeq)
		}
		e.Seq = uint32(n)
	}
	is, ok1 := intHeader(h, HdrIssued)
	ex, ok2 := intHeader(h, HdrExpires)
	if !ok1 || !ok2 {
		return e, fmt.Errorf("%s and %s must be integers (Unix milliseconds)", HdrIssued, HdrExpires)
	}
	e.Issued, e.Expires = time.UnixMilli(is), time.UnixMilli(ex)
	return e, nil
}

func intHeader(h map[string]any, name string) (int64, bool) {
	v, ok := h[name]
	if !ok {
		return 0, false
	}
	return toInt(v)
}

// toInt accepts any AMQP integer type: brokers and clients may narrow or
// widen a table's integers.
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}
