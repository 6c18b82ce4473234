package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/status"
)

// fakeClient is a cmdutil.Client whose answers a test sets and whose
// calls it records (issue 23 item 3: the verbs are tested against a fake
// client, not a fake daemon on disk). A method a test did not expect
// fails it through the embedded nil interface's panic.
type fakeClient struct {
	cmdutil.Client
	acts    []serveclient.ActRequest
	act     func(serveclient.ActRequest) ([]serveclient.Outcome, error)
	events  []serveapi.EventsArgs
	evs     []journal.Event
	rows    []serveclient.ListRow
	supLine string
}

func (c *fakeClient) Fleets(_ serveapi.Verb, names []string, all bool) ([]string, error) {
	if all {
		return []string{"kb", "docs"}, nil
	}
	return names, nil
}

func (c *fakeClient) Act(_ context.Context, req serveclient.ActRequest) ([]serveclient.Outcome, error) {
	c.acts = append(c.acts, req)
	return c.act(req)
}

func (c *fakeClient) Events(_ context.Context, args serveapi.EventsArgs) ([]journal.Event, error) {
	c.events = append(c.events, args)
	return c.evs, nil
}

func (c *fakeClient) List() []serveclient.ListRow { return c.rows }
func (c *fakeClient) ListRemote(context.Context) ([]serveclient.ListRow, *peerview.Federation, string) {
	return nil, nil, ""
}
func (c *fakeClient) FailingSinks(context.Context) ([]status.FailingSink, bool) { return nil, false }
func (c *fakeClient) Supervision() (int, string)                                { return 4242, c.supLine }

// runFake runs fleetmgr ARGS in this process with fake as its client, on
// a fleets.toml of kb and docs (the config is read; no serve, no state).
func runFake(t *testing.T, fake *fakeClient, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fleets.toml")
	toml := "[manager]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\nport_range = [20000, 20010]\n" +
		"[fleets.kb]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\n[fleets.docs]\nproject = \"" + dir + "\"\ncommand = [\"fleetd\"]\n"
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	f := &cmdutil.Factory{IO: &iostreams.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}}
	f.NewClient = func(*registry.Config, *lifecycle.Manager) cmdutil.Client { return fake }
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"--config", cfg}, args...))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// A stop the client refuses for want of a confirmation exits 2 and says
// why; --yes sends the confirmation with the request, and --all names
// every fleet the client resolves.
func TestStopAsksTheClientToConfirm(t *testing.T) {
	fake := &fakeClient{act: func(req serveclient.ActRequest) ([]serveclient.Outcome, error) {
		if !req.Confirm {
			msg := "stopping kb ends 2 live members (m1, m2); pass --yes to stop it anyway"
			return []serveclient.Outcome{{Fleet: "kb", NeedsConfirm: true, Error: msg, Steps: []lifecycle.Step{}}}, &serveclient.ConfirmError{Msg: msg}
		}
		var outs []serveclient.Outcome
		for _, f := range req.Fleets {
			outs = append(outs, serveclient.Outcome{Fleet: f, OK: true, State: lifecycle.PhaseStopped, Steps: []lifecycle.Step{}})
		}
		return outs, nil
	}}
	_, stderr, err := runFake(t, fake, "stop", "kb")
	if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error()+stderr, "ends 2 live members (m1, m2)") {
		t.Fatalf("stop kb unconfirmed: exit %d, err %v, stderr %q", cmdutil.ExitCode(err), err, stderr)
	}
	if len(fake.acts) != 1 || fake.acts[0].Confirm || fake.acts[0].Verb != serveapi.Stop {
		t.Fatalf("requests %+v", fake.acts)
	}
	stdout, _, err := runFake(t, fake, "stop", "--all", "--yes", "--json")
	if err != nil {
		t.Fatalf("stop --all --yes: %v", err)
	}
	last := fake.acts[len(fake.acts)-1]
	if !last.Confirm || strings.Join(last.Fleets, ",") != "kb,docs" {
		t.Fatalf("stop --all --yes sent %+v", last)
	}
	var outs []serveclient.Outcome
	if err := json.Unmarshal([]byte(stdout), &outs); err != nil || len(outs) != 2 || !outs[1].OK {
		t.Fatalf("--json outcomes %v %q", err, stdout)
	}
}

// events passes its filters to the client as given, and refuses a bad
// --since (exit 2, naming it) without asking the client at all.
func TestEventsFiltersReachTheClient(t *testing.T) {
	fake := &fakeClient{evs: []journal.Event{{Fleet: "kb", Kind: "fleet.restart", Outcome: "ok"}}}
	stdout, _, err := runFake(t, fake, "events", "kb", "--kind", "fleet.restart", "--since", "1h", "-n", "5", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.events) != 1 {
		t.Fatalf("%d Events calls", len(fake.events))
	}
	a := fake.events[0]
	if strings.Join(a.Fleets, ",") != "kb" || strings.Join(a.Kinds, ",") != "fleet.restart" || a.Since != "1h" || a.Limit != 5 {
		t.Fatalf("events sent %+v", a)
	}
	var got []journal.Event
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got) != 1 || got[0].Kind != "fleet.restart" {
		t.Fatalf("events --json printed %q (%v)", stdout, err)
	}
	_, _, err = runFake(t, fake, "events", "--kind", "fleet.restrat")
	if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error(), `kind "fleet.restrat": no such event kind`) || len(fake.events) != 1 {
		t.Fatalf("unknown --kind: exit %d, %v, %d calls", cmdutil.ExitCode(err), err, len(fake.events))
	}
	_, _, err = runFake(t, fake, "events", "--since", "yesterday-ish")
	if cmdutil.ExitCode(err) != 2 || !strings.Contains(err.Error(), "yesterday-ish") || len(fake.events) != 1 {
		t.Fatalf("bad --since: exit %d, %v, %d calls", cmdutil.ExitCode(err), err, len(fake.events))
	}
}

// list prints the client's supervision line first, then its rows (by name).
func TestListPrintsTheClientsRows(t *testing.T) {
	fake := &fakeClient{supLine: "supervised by serve pid 4242", rows: []serveclient.ListRow{
		{Name: "kb", State: lifecycle.PhaseRunning, Desired: "running", Port: 20001, PID: 99},
		{Name: "docs", State: lifecycle.PhaseStopped, Desired: "stopped", Port: 20002},
	}}
	stdout, _, err := runFake(t, fake, "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(stdout, "\n")
	if lines[0] != "supervised by serve pid 4242" || !strings.Contains(stdout, "kb") || !strings.Contains(stdout, "docs") {
		t.Fatalf("list printed:\n%s", stdout)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 4 && f[0] == "kb" && (f[1] != "running" || f[4] != "99") {
			t.Fatalf("kb's row %q: want running with pid 99", l)
		}
	}
}
