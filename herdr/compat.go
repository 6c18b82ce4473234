package herdr

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Release is a herdr release and the wire protocol its ping reports.
type Release struct {
	Version  string
	Protocol int
}

// Releases are the herdr releases this client knows, with their protocol:
// 0.8.0 speaks 19; protocol 20 came with commit 10974c82 and was released
// as 0.8.1 and 0.8.2 (herdr's src/protocol/wire.rs PROTOCOL_VERSION); the
// 0.9.x releases speak 22 (from their release notes and third-party
// compatibility reports up to 0.9.3; herdr issue #3747).
var Releases = []Release{
	{"0.8.0", 19}, {"0.8.1", 20}, {"0.8.2", 20},
	{"0.9.0", 22}, {"0.9.1", 22}, {"0.9.2", 22}, {"0.9.3", 22},
}

// TestedProtocols are the protocols fleetmgr's tests run against (the
// herdr stand-in set to each: testbed/herdrd Config.Protocol). A server
// speaking another is warned about: the methods fleetmgr uses (ping,
// workspace.create, tab.create, tab.list, tab.close, pane.list, pane.get,
// pane.process_info, pane.read, pane.send_input, server.stop) kept their
// shape across these, which a later protocol need not.
var TestedProtocols = []int{19, 20, 22}

// Compat is fleetmgr's verdict on one herdr server's version and protocol.
type Compat struct {
	// Version and Protocol are what the server reported ("" and 0 when
	// unknown).
	Version  string `json:"version,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
	// Tested is true when Protocol is one of TestedProtocols.
	Tested bool `json:"tested"`
	// Note says what is known of this version, and on an untested
	// protocol what to expect; "" when nothing needs saying.
	Note string `json:"note,omitempty"`
	// Push is true when Protocol is known to serve events.subscribe and
	// the other push methods (HasPush): `fleetmgr serve` then follows the
	// session from its events instead of sampling it.
	Push bool `json:"push"`
}

// CheckCompat judges a server that reported version and protocol (from
// ping or session.snapshot). A protocol 0 means unknown (only a version
// was read, e.g. from `herdr --version`): the protocol is then taken from
// Releases when the version is listed there.
func CheckCompat(version string, protocol int) Compat {
	c := Compat{Version: version, Protocol: protocol}
	base := releaseOf(version)
	known := -1
	for _, r := range Releases {
		if r.Version == base {
			known = r.Protocol
		}
	}
	if c.Protocol == 0 && known > 0 {
		c.Protocol = known
	}
	c.Tested = slices.Contains(TestedProtocols, c.Protocol)
	c.Push = c.Protocol > 0 && HasPush(c.Protocol)
	switch {
	case c.Protocol == 0:
		c.Note = fmt.Sprintf("herdr %s is not a release fleetmgr knows; its protocol is unknown until a session runs (ping)", orUnknown(version))
	case !c.Tested:
		c.Note = fmt.Sprintf("herdr %s speaks protocol %d; fleetmgr is tested with protocols %s (herdr %s): methods may have changed shape, so check fleet starts, status and the guard's pane tables",
			orUnknown(version), c.Protocol, joinInts(TestedProtocols, ", "), testedReleases())
	case known > 0 && known != c.Protocol:
		// A build between releases (herdr's own master, say): the
		// protocol decides.
		c.Note = fmt.Sprintf("herdr %s reports protocol %d (the %s release speaks %d): a build between releases", version, c.Protocol, base, known)
	case known < 0 && version != "":
		c.Note = fmt.Sprintf("herdr %s is not a release fleetmgr knows, but its protocol %d is tested", version, c.Protocol)
	}
	return c
}

// versionRE finds a release number: the version herdr's ping reports
// (e.g. "0.8.2", or "0.9.0-preview.123" for a preview build), or the line
// `herdr --version` prints ("herdr 0.8.2").
var versionRE = regexp.MustCompile(`\b(\d+\.\d+\.\d+)`)

// releaseOf returns the X.Y.Z of a version string, "" when it has none.
func releaseOf(version string) string {
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return ""
	}
	return m[1]
}

// ParseVersionOutput returns the version `herdr --version` printed
// ("herdr 0.8.2" → "0.8.2", a suffix such as "-preview.7" kept), "" when
// out is not that line.
func ParseVersionOutput(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "herdr ")
	if !ok || releaseOf(v) == "" || strings.ContainsAny(v, " \t") {
		return ""
	}
	return v
}

func orUnknown(v string) string {
	if v == "" {
		return "(version unknown)"
	}
	return v
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

// testedReleases lists the Releases whose protocol is tested, e.g.
// "0.8.0, 0.8.1, 0.8.2, 0.9.0, …".
func testedReleases() string {
	var vs []string
	for _, r := range Releases {
		if slices.Contains(TestedProtocols, r.Protocol) {
			vs = append(vs, r.Version)
		}
	}
	return strings.Join(vs, ", ")
}
