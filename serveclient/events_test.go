package serveclient

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// TestEventsWithoutJournal: with no serve running, `events` on a config
// whose [manager] journal = false says so instead of printing nothing;
// with the journal on and no file yet, it is simply empty.
func TestEventsWithoutJournal(t *testing.T) {
	for _, on := range []bool{false, true} {
		dir := t.TempDir()
		body := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n"
		if !on {
			body += "journal = false\n"
		}
		body += "[fleets.kb]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\nport = 8770\n"
		path := filepath.Join(dir, "fleets.toml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := registry.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := NewClient(cfg, nil, "test").Events(context.Background(), serveapi.EventsArgs{})
		switch {
		case !on && (err == nil || !strings.Contains(err.Error(), "[manager] journal = false in "+path)):
			t.Errorf("journal off: %v, %v", ev, err)
		case on && (err != nil || len(ev) != 0):
			t.Errorf("journal on, no file yet: %v, %v", ev, err)
		}
	}
}

// TestAwaitedBounds: what a verb waits for after each step, and which
// bound applies: fleetd's exit (stop_grace) first in a stop or restart,
// the lead's agent (lead_ready_timeout) after the lead was launched.
func TestAwaitedBounds(t *testing.T) {
	for _, tc := range []struct {
		verb       serveapi.Verb
		last, want string
		exit, lead bool
	}{
		{serveapi.Stop, "", "kb: fleetd to exit (SIGTERM, then SIGKILL after stop_grace)", true, false},
		{serveapi.Restart, "", "kb: fleetd to exit (SIGTERM, then SIGKILL after stop_grace)", true, false},
		{serveapi.Start, "", "kb: its herdr session to answer", false, false},
		{serveapi.Start, "fleetd", "kb: the lead and the last checks", false, false},
		{serveapi.Start, "lead", "kb: its lead's agent to show in herdr (lead_ready_timeout)", false, true},
		{serveapi.Restart, "record", "kb: its lead's agent to show in herdr (lead_ready_timeout)", false, true},
		{serveapi.Stop, "fleetd", "kb: its herdr session and pane processes to end", false, false},
	} {
		if got := Awaited(tc.verb, "kb", tc.last); got != tc.want || AwaitsExit(tc.verb, tc.last) != tc.exit || AwaitsLead(tc.verb, tc.last) != tc.lead {
			t.Errorf("%s after %q: %q exit=%v lead=%v; want %q exit=%v lead=%v", tc.verb, tc.last, got,
				AwaitsExit(tc.verb, tc.last), AwaitsLead(tc.verb, tc.last), tc.want, tc.exit, tc.lead)
		}
	}
}
