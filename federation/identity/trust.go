package identity

import (
	"crypto/ed25519"
	"fmt"
	"sort"
	"strings"
)

// Capabilities is what a trusted peer may ask of this host, beyond being
// shown (presence from every trusted peer is accepted). The zero value
// allows nothing but presence.
type Capabilities uint8

// The capabilities a trust line can name.
const (
	// CapRead allows the read-only requests: status and logs of a fleet,
	// and a fleet's tool catalogue.
	CapRead Capabilities = 1 << iota
	// CapControl allows start, stop and restart of a fleet; it implies
	// CapRead.
	CapControl
	// CapCalls allows tool calls forwarded to a fleet (and reading the
	// catalogue they need); it implies nothing else.
	CapCalls

	// CapAll is every capability: the default of a trust line that names
	// none.
	CapAll = CapRead | CapControl | CapCalls
)

// capNames are the words of a trust line's capability list, in the order
// FormatCapabilities writes them. "all" and "presence" are accepted on
// input too (see ParseCapabilities).
var capNames = []struct {
	name string
	cap  Capabilities
}{{"read", CapRead}, {"control", CapControl}, {"calls", CapCalls}}

// Has reports whether c includes every capability of want (CapControl
// counts as CapRead).
func (c Capabilities) Has(want Capabilities) bool {
	if c&CapControl != 0 {
		c |= CapRead
	}
	return c&want == want
}

// String returns the capability list as a trust line writes it:
// "all", "presence" (none), or e.g. "read,calls".
func (c Capabilities) String() string {
	if c == CapAll {
		return "all"
	}
	if c == 0 {
		return "presence"
	}
	var parts []string
	for _, n := range capNames {
		if c&n.cap != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}

// ParseCapabilities parses a comma-separated list of "read", "control",
// "calls", or the single word "all" (every one) or "presence" (none:
// the peer is shown, never obeyed). Words may not repeat.
func ParseCapabilities(s string) (Capabilities, error) {
	switch s {
	case "all":
		return CapAll, nil
	case "presence":
		return 0, nil
	}
	var c Capabilities
	for _, w := range strings.Split(s, ",") {
		var found Capabilities
		for _, n := range capNames {
			if w == n.name {
				found = n.cap
			}
		}
		switch {
		case w == "all" || w == "presence":
			return 0, fmt.Errorf("capability %q stands alone; it cannot be combined with others", w)
		case found == 0:
			return 0, fmt.Errorf("unknown capability %q (want a comma-separated list of read, control, calls; or all; or presence)", clip(w))
		case c&found != 0:
			return 0, fmt.Errorf("capability %q is listed twice", w)
		}
		c |= found
	}
	return c, nil
}

// Peer is one trust line: a host, one of its public keys, and what that
// host may ask.
type Peer struct {
	// Host is the peer's host id (HostPattern).
	Host string
	// Key is the peer's ed25519 public key.
	Key ed25519.PublicKey
	// Caps is what the peer may ask; CapAll when the line names none.
	Caps Capabilities
}

// String formats p as a trust line (see FormatTrustLine).
func (p Peer) String() string { return FormatTrustLine(p.Host, p.Key, p.Caps) }

// FormatTrustLine returns "HOST ed25519:BASE64KEY", with " CAPS" appended
// when caps is not CapAll — the form `fleetmgr federation key` prints and
// ParseTrustLine reads.
func FormatTrustLine(host string, key ed25519.PublicKey, caps Capabilities) string {
	s := host + " " + FormatPublicKey(key)
	if caps != CapAll {
		s += " " + caps.String()
	}
	return s
}

// ParseTrustLine parses "HOST ed25519:BASE64KEY [CAPS]": fields separated
// by spaces or tabs, HOST matching HostPattern, the key as ParsePublicKey
// takes it, CAPS as ParseCapabilities takes it (default CapAll).
func ParseTrustLine(line string) (Peer, error) {
	f := strings.Fields(line)
	switch {
	case len(f) == 0:
		return Peer{}, fmt.Errorf("empty; want \"HOST ed25519:BASE64KEY\" (what `fleetmgr federation key` prints on that host)")
	case len(f) == 1:
		return Peer{}, fmt.Errorf("%q has no key; want \"HOST ed25519:BASE64KEY\" (what `fleetmgr federation key` prints on that host)", clip(line))
	case len(f) > 3:
		return Peer{}, fmt.Errorf("%q has %d fields; want \"HOST ed25519:BASE64KEY\" and optionally a capability list such as \"read,calls\"", clip(line), len(f))
	}
	p := Peer{Host: f[0], Caps: CapAll}
	if err := CheckHost(f[0]); err != nil {
		return Peer{}, err
	}
	k, err := ParsePublicKey(f[1])
	if err != nil {
		return Peer{}, err
	}
	p.Key = k
	if len(f) == 3 {
		if p.Caps, err = ParseCapabilities(f[2]); err != nil {
			return Peer{}, err
		}
	}
	return p, nil
}

// TrustLineError is a trust list entry ParseTrust refuses.
type TrustLineError struct {
	// Index is the entry's 0-based position in the list.
	Index int
	// Entry is the entry as given (shortened when long).
	Entry string
	// Msg says what is wrong.
	Msg string
}

// Error names the entry by index and text.
func (e *TrustLineError) Error() string {
	return fmt.Sprintf("trust[%d] %q: %s", e.Index, e.Entry, e.Msg)
}

// Trust is a parsed trust list: which public key belongs to which host and
// what each may ask. A host may have several keys (during a key rotation
// both the old and the new one); a key belongs to exactly one host. It is
// read-only after ParseTrust and safe for concurrent use.
type Trust struct {
	byKey  map[[ed25519.PublicKeySize]byte]Peer
	byHost map[string][]Peer
}

// ParseTrust parses a trust list. Every bad entry is reported, each as a
// *TrustLineError (joined), naming its index: an entry that does not
// parse, a key listed twice, or one key for two hosts.
func ParseTrust(lines []string) (*Trust, error) {
	t := &Trust{byKey: map[[ed25519.PublicKeySize]byte]Peer{}, byHost: map[string][]Peer{}}
	var errs []error
	first := map[[ed25519.PublicKeySize]byte]int{}
	for i, l := range lines {
		p, err := ParseTrustLine(l)
		if err != nil {
			errs = append(errs, &TrustLineError{Index: i, Entry: clip(l), Msg: err.Error()})
			continue
		}
		k := [ed25519.PublicKeySize]byte(p.Key)
		if prev, ok := t.byKey[k]; ok {
			msg := fmt.Sprintf("the same key is already trust[%d]", first[k])
			if prev.Host != p.Host {
				msg = fmt.Sprintf("this key is already trust[%d]'s, for host %q: one key belongs to one host", first[k], prev.Host)
			}
			errs = append(errs, &TrustLineError{Index: i, Entry: clip(l), Msg: msg})
			continue
		}
		first[k] = i
		t.byKey[k] = p
		t.byHost[p.Host] = append(t.byHost[p.Host], p)
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return t, nil
}

// joinErrors is errors.Join, kept local so the message is one line per
// entry.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return multiError(errs)
}

type multiError []error

func (m multiError) Error() string {
	s := make([]string, len(m))
	for i, e := range m {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

func (m multiError) Unwrap() []error { return m }

// WithSelf returns a copy of t that also trusts host's own key with every
// capability, so a manager accepts its own messages (a request it sends
// to itself, its own presence) without listing itself. It fails when t
// already gives that key to another host.
func (t *Trust) WithSelf(host string, key ed25519.PublicKey) (*Trust, error) {
	k := [ed25519.PublicKeySize]byte(key)
	if p, ok := t.byKey[k]; ok && p.Host != host {
		return nil, fmt.Errorf("the trust list gives this host's own key to host %q; this host is %q", p.Host, host)
	}
	c := &Trust{byKey: make(map[[ed25519.PublicKeySize]byte]Peer, len(t.byKey)+1), byHost: make(map[string][]Peer, len(t.byHost)+1)}
	for kk, p := range t.byKey {
		c.byKey[kk] = p
	}
	for h, ps := range t.byHost {
		c.byHost[h] = append([]Peer(nil), ps...)
	}
	if _, ok := c.byKey[k]; !ok {
		p := Peer{Host: host, Key: key, Caps: CapAll}
		c.byKey[k] = p
		c.byHost[host] = append(c.byHost[host], p)
	}
	return c, nil
}

// ByKey returns the peer whose key is key.
func (t *Trust) ByKey(key ed25519.PublicKey) (Peer, bool) {
	if len(key) != ed25519.PublicKeySize {
		return Peer{}, false
	}
	p, ok := t.byKey[[ed25519.PublicKeySize]byte(key)]
	return p, ok
}

// Hosts returns the trusted host ids, sorted.
func (t *Trust) Hosts() []string {
	hs := make([]string, 0, len(t.byHost))
	for h := range t.byHost {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	return hs
}

// Peers returns the entries of host (one per key).
func (t *Trust) Peers(host string) []Peer { return append([]Peer(nil), t.byHost[host]...) }
