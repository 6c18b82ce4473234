// Package wire is the federation's message format: the signed envelope
// every message between managers carries, its canonical form, its
// mapping onto AMQP headers, the size bounds per kind, the verification
// pipeline with its named failure reasons, and the seen-sets that refuse
// replays (docs/FEDERATION.md, "Messages" and "Verification").
//
// A message is an AMQP body (the kind's JSON payload, kept byte for byte)
// and a set of x-fleetmgr-* headers holding the envelope fields, the
// signer's public key and an ed25519 signature over the canonical form:
//
//	fleetmgr-federation/1 LF kind LF id LF re LF seq LF from LF to LF
//	issued LF expires LF sha256hex(body)
//
// with issued and expires as decimal Unix milliseconds and seq as a
// decimal integer. Every field is checked against a character set that
// excludes LF before it is signed or verified, so the form is unambiguous
// without escaping; no JSON is ever canonicalized.
package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/identity"
)

// Version is the envelope version this package writes and reads. It is
// part of the canonical form's prefix, so a signature made for another
// version never verifies as this one.
const Version = 1

// domain is the canonical form's first line: it separates these
// signatures from anything else the same key might sign.
const domain = "fleetmgr-federation/1"

// Broadcast is the To of messages meant for every manager (presence,
// offline).
const Broadcast = "*"

// Kind is what a message is. Each kind has a payload type (see
// payload.go), a body size bound (MaxBody) and the queues that accept it
// (the Route of the verifier).
type Kind string

// The kinds of message (docs/FEDERATION.md "Messages"): presence and
// control, tool calls and catalogues. Requests go to control.<host>, answers to the caller's
// reply queue, presence to every roster queue.
const (
	KindPresence         Kind = "presence"          // heartbeat: a host and its fleets
	KindOffline          Kind = "offline"           // a host's clean stop
	KindControlRequest   Kind = "control-request"   // start/stop/restart/status/logs of a fleet
	KindControlReply     Kind = "control-reply"     // its result or refusal
	KindCallRequest      Kind = "call-request"      // a tools/call for a remote fleet
	KindCallProgress     Kind = "call-progress"     // a progress notification of that call
	KindCallReply        Kind = "call-reply"        // the call's result or error
	KindCancel           Kind = "cancel"            // the caller gave up on a call
	KindCatalogueRequest Kind = "catalogue-request" // a fleet's tools/list
	KindCatalogueReply   Kind = "catalogue-reply"   // its answer
)

// Body size bounds per kind, in bytes. Presence is bounded by what a host
// may announce (MaxFleets fleets, each summary bounded, see payload.go)
// with room to spare; requests that carry only a verb and small
// arguments get 64 KiB; a tool call's arguments and result get the call
// cap of the local forwarding path (64 MiB, one message each; see
// docs/FEDERATION.md "Large messages").
const (
	MaxPresenceBody  = 256 << 10
	MaxSmallBody     = 4 << 10
	MaxRequestBody   = 64 << 10
	MaxControlReply  = 4 << 20
	MaxCallBody      = 64 << 20
	MaxProgressBody  = 64 << 10
	MaxCatalogueBody = 8 << 20
)

// MaxBody returns the largest body a message of kind k may have, or 0 for
// an unknown kind.
func (k Kind) MaxBody() int {
	switch k {
	case KindPresence:
		return MaxPresenceBody
	case KindOffline, KindCancel, KindCatalogueRequest:
		return MaxSmallBody
	case KindControlRequest:
		return MaxRequestBody
	case KindControlReply:
		return MaxControlReply
	case KindCallRequest, KindCallReply:
		return MaxCallBody
	case KindCallProgress:
		return MaxProgressBody
	case KindCatalogueReply:
		return MaxCatalogueBody
	}
	return 0
}

// Known reports whether k is one of the kinds above.
func (k Kind) Known() bool { return k.MaxBody() > 0 }

// MaxLifetime bounds Expires-Issued of any message: a longer-lived message
// would make the seen-sets keep its id for that long.
const MaxLifetime = time.Hour

// idLen is the length of a message id: 128 random bits in lower-case hex.
const idLen = 32

// NewID returns a fresh random message id: 32 lower-case hex digits from
// crypto/rand, never one that reads as a sequenced id (SplitSeqID; one in
// 65,536 draws is drawn again), so random ids are always judged one by
// one.
func NewID() string {
	var b [idLen / 2]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("crypto/rand failed: " + err.Error())
		}
		if b[8] != 0 || b[9] != 0 {
			return hex.EncodeToString(b[:])
		}
	}
}

// ValidID reports whether s is a message id (32 lower-case hex digits).
func ValidID(s string) bool {
	if len(s) != idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Envelope is one message's signed fields and its body.
type Envelope struct {
	// Kind is what the message is.
	Kind Kind
	// ID is the message's own id (NewID), never reused: the seen-sets
	// refuse a second message with an id they hold.
	ID string
	// Re is the id of the request this message answers (replies,
	// progress, cancel); "" otherwise.
	Re string
	// Seq orders several messages answering one request (progress 1, 2,
	// …; the final reply after them); 0 otherwise.
	Seq uint32
	// From is the sending host's id; To the receiving host's, or
	// Broadcast.
	From, To string
	// Issued and Expires bound when the message may be acted on (the
	// receiver allows its clock skew on both ends). Millisecond precision:
	// Seal truncates them.
	Issued, Expires time.Time
	// Body is the kind's JSON payload, signed as its SHA-256.
	Body []byte
}

// check validates the fields that go into the canonical form.
func (e *Envelope) check() error {
	switch {
	case !e.Kind.Known():
		return fmt.Errorf("unknown kind %q", clip(string(e.Kind)))
	case !ValidID(e.ID):
		return fmt.Errorf("id %q is not 32 lower-case hex digits", clip(e.ID))
	case e.Re != "" && !ValidID(e.Re):
		return fmt.Errorf("re %q is not a message id", clip(e.Re))
	case !identity.ValidHost(e.From):
		return fmt.Errorf("from %q is not a host id", clip(e.From))
	case e.To != Broadcast && !identity.ValidHost(e.To):
		return fmt.Errorf("to %q is not a host id or %q", clip(e.To), Broadcast)
	case e.Issued.IsZero() || e.Expires.IsZero():
		return fmt.Errorf("issued and expires must both be set")
	case !e.Expires.After(e.Issued):
		return fmt.Errorf("expires %s is not after issued %s", e.Expires.UTC().Format(time.RFC3339Nano), e.Issued.UTC().Format(time.RFC3339Nano))
	case e.Expires.Sub(e.Issued) > MaxLifetime:
		return fmt.Errorf("lifetime %s is longer than the %s allowed", e.Expires.Sub(e.Issued), MaxLifetime)
	case len(e.Body) > e.Kind.MaxBody():
		return fmt.Errorf("%s body of %d bytes is larger than the %d allowed", e.Kind, len(e.Body), e.Kind.MaxBody())
	}
	return nil
}

// Canonical returns the bytes the signature covers (see the package
// comment). It does not validate e; Seal and the verifier do first.
func (e *Envelope) Canonical() []byte {
	sum := sha256.Sum256(e.Body)
	var b bytes.Buffer
	b.Grow(len(domain) + 200)
	b.WriteString(domain)
	for _, f := range []string{string(e.Kind), e.ID, e.Re, strconv.FormatUint(uint64(e.Seq), 10), e.From, e.To,
		strconv.FormatInt(e.Issued.UnixMilli(), 10), strconv.FormatInt(e.Expires.UnixMilli(), 10), hex.EncodeToString(sum[:])} {
		b.WriteByte('\n')
		b.WriteString(f)
	}
	return b.Bytes()
}

// truncate drops sub-millisecond precision (the wire carries ms).
func (e *Envelope) truncate() {
	e.Issued = time.UnixMilli(e.Issued.UnixMilli())
	e.Expires = time.UnixMilli(e.Expires.UnixMilli())
}

// Header names. Every envelope field is a header; the body is the AMQP
// body.
const (
	HdrVersion = "x-fleetmgr-v"       // int: Version
	HdrKind    = "x-fleetmgr-kind"    // string: Kind
	HdrID      = "x-fleetmgr-id"      // string: 32 hex
	HdrRe      = "x-fleetmgr-re"      // string: 32 hex or absent
	HdrSeq     = "x-fleetmgr-seq"     // int: Seq (absent = 0)
	HdrFrom    = "x-fleetmgr-from"    // string: host id
	HdrTo      = "x-fleetmgr-to"      // string: host id or "*"
	HdrIssued  = "x-fleetmgr-issued"  // int: Unix ms
	HdrExpires = "x-fleetmgr-expires" // int: Unix ms
	HdrKey     = "x-fleetmgr-key"     // string: "ed25519:BASE64" of the signer
	HdrSig     = "x-fleetmgr-sig"     // string: base64 of the 64-byte signature

	// HdrRejectReason, HdrRejectDetail and HdrRejectedBy are added to a
	// message dead-lettered by its receiver (see federation's control
	// consumer): the Reason, a short detail, and the receiver's host.
	HdrRejectReason = "x-fleetmgr-reject-reason"
	HdrRejectDetail = "x-fleetmgr-reject-detail"
	HdrRejectedBy   = "x-fleetmgr-rejected-by"
	// HdrOrigExchange and HdrOrigRoutingKey keep where a dead-lettered
	// message was published.
	HdrOrigExchange   = "x-fleetmgr-original-exchange"
	HdrOrigRoutingKey = "x-fleetmgr-original-routing-key"
)

// Seal validates e, truncates its times to milliseconds, signs its
// canonical form with key and returns the AMQP headers to publish with
// e.Body. Seal never sends anything; the caller publishes.
func Seal(e *Envelope, key ed25519.PrivateKey) (map[string]any, error) {
	e.truncate()
	if err := e.check(); err != nil {
		return nil, err
	}
	sig := ed25519.Sign(key, e.Canonical())
	h := map[string]any{
		HdrVersion: int64(Version),
		HdrKind:    string(e.Kind),
		HdrID:      e.ID,
		HdrFrom:    e.From,
		HdrTo:      e.To,
		HdrIssued:  e.Issued.UnixMilli(),
		HdrExpires: e.Expires.UnixMilli(),
		HdrKey:     identity.FormatPublicKey(identity.PublicKey(key)),
		HdrSig:     base64.StdEncoding.EncodeToString(sig),
	}
	if e.Re != "" {
		h[HdrRe] = e.Re
	}
	if e.Seq != 0 {
		h[HdrSeq] = int64(e.Seq)
	}
	return h, nil
}

// clip shortens s for messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
