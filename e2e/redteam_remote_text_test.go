package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// hostile is text a peer host (or a fleet) sends to be printed on the
// operator's terminal: OSC 52 (sets the clipboard, in terminals that allow
// it: the next paste runs what the peer chose), a screen clear, a carriage
// return that overwrites the line, a C1 CSI and a bidi override (Trojan
// Source).
const hostile = "\x1b]52;c;ZWNobyBwd25lZAo=\x07\x1b[2J\rall good\u009b31m\u202egnp.exe"

// terminalSafe fails when out holds a character a terminal acts on:
// anything below 0x20 but tab and newline, DEL, C1 controls, the bidi
// formatting characters.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f ||
			r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("%s printed %U at byte %d to the operator's terminal:\n%q", what, r, i, out)
		}
	}
}

// TestRemoteTextEscapedOnTerminal: a trusted peer (a compromised host, or
// one whose fleets' members choose their own names) answers this host's
// CLI with terminal control sequences: in a verb's error, in the member
// rows of a status, in log lines. Before, `fleetmgr stop|status|logs
// NAME@HOST` printed them as they came, so a peer trusted for nothing
// more than answering could set the operator's clipboard or redraw the
// screen. Now every fleet- or peer-supplied text the CLI prints is
// escaped (\x1b, \u009b …): visible, inert. JSON output is unchanged
// (encoding/json escapes control characters).
func TestRemoteTextEscapedOnTerminal(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		tag := brokertest.Unique("rtx")
		suffix := tag[len(tag)-6:]
		vhost := tag + "-fed"
		alpha := newRemoteHostEnv(t, b, nil, "alpha-"+suffix, tag+"a", "", nil)
		betaID := "beta-" + suffix
		b.Cleanup(t, []string{vhost}, []string{federation.BrokerUser(alpha.host), federation.BrokerUser(betaID)})

		// beta: an in-process manager whose every answer is hostile.
		betaDir := t.TempDir()
		key, _, err := identity.LoadOrCreateKey(filepath.Join(betaDir, "federation.key"))
		if err != nil {
			t.Fatal(err)
		}
		pw, err := federation.HostPassword(betaDir)
		if err != nil {
			t.Fatal(err)
		}
		alpha.federate(t, vhost, "500ms", []string{identity.FormatTrustLine(betaID, identity.PublicKey(key), identity.CapAll)})
		alpha.startServe()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := federation.Provision(ctx, b.Admin(t), federation.ProvisionOptions{Vhost: vhost, Host: betaID, Password: pw, Key: identity.PublicKey(key)}); err != nil {
			t.Fatal(err)
		}
		uri, err := broker.VhostURI(b.AMQPURL, federation.BrokerUser(betaID), pw, vhost)
		if err != nil {
			t.Fatal(err)
		}
		trust, err := identity.ParseTrust([]string{identity.FormatTrustLine(alpha.host, identity.PublicKey(alpha.key), identity.CapAll)})
		if err != nil {
			t.Fatal(err)
		}
		exec := federation.ExecutorFunc(func(_ context.Context, _, verb, fleet string, _ json.RawMessage) (json.RawMessage, error) {
			switch verb {
			case wire.VerbStatus:
				return json.Marshal(map[string]any{"name": fleet, "state": "running" + hostile, "verdict": "WORKING", "restarts": 0,
					"error": hostile, "last_error": hostile, "member_count": 1,
					"members": []map[string]any{{"id": "m1" + hostile, "state": "ready" + hostile, "verdict": "UNKNOWN",
						"reason": hostile, "live_status": hostile, "pane_id": hostile}}})
			case wire.VerbLogs:
				return json.Marshal(map[string]any{"fleet": fleet, "log": "fleetd", "path": hostile, "lines": []string{"line one", hostile}})
			}
			return nil, errors.New("fleet " + fleet + " stopped" + hostile)
		})
		src := federation.SourceFunc(func(context.Context) []wire.FleetSummary {
			return []wire.FleetSummary{{Name: "kb", State: "running", UptimeS: 5}}
		})
		beta, err := federation.New(federation.Config{Host: betaID, Key: key, Trust: trust, URI: uri, StateDir: betaDir,
			Heartbeat: 500 * time.Millisecond, Source: src, Executor: exec})
		if err != nil {
			t.Fatal(err)
		}
		if err := beta.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = beta.Stop(context.Background()) })

		kb := "kb@" + betaID
		wait.For(t, 20*time.Second, "alpha to list "+kb, func() (bool, string) {
			out := alpha.Run("list").Stdout
			return strings.Contains(out, kb), out
		})

		r := alpha.Run("stop", kb)
		if r.Code == 0 || !strings.Contains(r.Stderr, `stopped\x1b]52;c;ZWNobyBwd25lZAo=\x07`) {
			t.Fatalf("stop %s: exit %d, want the peer's error shown escaped\nstdout: %q\nstderr: %q", kb, r.Code, r.Stdout, r.Stderr)
		}
		terminalSafe(t, "stop", r.Stdout+r.Stderr)

		r = alpha.Run("status", kb)
		if !strings.Contains(r.Stdout, `m1\x1b]52`) {
			t.Fatalf("status %s: want the member shown escaped\nstdout: %q\nstderr: %q", kb, r.Stdout, r.Stderr)
		}
		terminalSafe(t, "status", r.Stdout+r.Stderr)

		r = alpha.Run("logs", kb)
		if r.Code != 0 || !strings.Contains(r.Stdout, "line one\n") || !strings.Contains(r.Stdout, `\x1b[2J`) {
			t.Fatalf("logs %s: exit %d\nstdout: %q\nstderr: %q", kb, r.Code, r.Stdout, r.Stderr)
		}
		terminalSafe(t, "logs", r.Stdout+r.Stderr)

		// JSON carries the text as sent, escaped by JSON itself.
		r = alpha.Run("status", kb, "--json")
		terminalSafe(t, "status --json", r.Stdout+r.Stderr)
		if !strings.Contains(r.Stdout, `m1\u001b]52`) {
			t.Fatalf("status --json lost the member's id:\n%s", r.Stdout)
		}
	})
}
