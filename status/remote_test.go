package status

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// TestAddRemote: peers' fleets become NAME@HOST rows with the state,
// counts and beat age their presence gave; an expired or offline host's
// fleets are kept, UNKNOWN, with when it was last seen; a fleet declared
// locally with host = a federated peer is filled from that peer's
// presence under its own name (not listed twice); a name filter keeps only
// the rows asked for; the JSON follows docs/status-schema.json and the
// table says each host's state.
func TestAddRemote(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	age := int64(7)
	view := peerview.Snapshot{Self: "alpha", Connected: true, Hosts: []peerview.HostView{
		{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: now.Add(-400 * time.Millisecond), Heartbeat: 2 * time.Second,
			Fleets: []wire.FleetSummary{
				{Name: "kb", State: "running", UptimeS: 100, Restarts: 2, Members: 3, Verdicts: map[string]int{"WORKING": 2, "STALLED": 1}, VerdictsAgeS: &age, Catalogue: strings.Repeat("a", 64)},
				{Name: "web", State: "hibernating", Members: 0},
				{Name: "wiki", State: "running", Members: 0}, // never judged: counts say nothing
			}},
		{Host: "gamma", State: peerview.HostExpired, LastSeen: now.Add(-9 * time.Second), Heartbeat: 2 * time.Second,
			Fleets: []wire.FleetSummary{{Name: "ops", State: "running", Members: 1, Verdicts: map[string]int{"IDLE": 1}, VerdictsAgeS: &age}}},
		{Host: "delta", State: peerview.HostNeverSeen, Fleets: []wire.FleetSummary{}},
	}}
	base := func() *Report {
		return &Report{SchemaVersion: SchemaVersion, GeneratedAt: now, Host: "alpha", Via: "daemon", Fleets: []Fleet{
			{Name: "docs", Host: "local", State: "stopped", Members: []Member{}, Summary: map[Verdict]int{}},
			{Name: "kb", Host: "beta", Verdict: Remote, State: "remote", MemberCount: -1, Error: "on host beta: not probed", Members: []Member{}, Summary: map[Verdict]int{}},
			{Name: "far", Host: "omega", Verdict: Remote, State: "remote", MemberCount: -1, Error: "on host omega: not probed", Members: []Member{}, Summary: map[Verdict]int{}},
		}}
	}
	rep := base()
	AddRemote(rep, view, nil, now)
	rows := map[string]Fleet{}
	var names []string
	for _, f := range rep.Fleets {
		rows[f.Name] = f
		names = append(names, f.Name)
	}
	if got := strings.Join(names, " "); got != "docs far kb ops@gamma web@beta wiki@beta" {
		t.Fatalf("rows %q", got)
	}
	kb := rows["kb"]
	if kb.Verdict != "" || kb.State != "running" || kb.Host != "beta" || kb.MemberCount != 3 || kb.Summary[Working] != 2 || kb.Summary[Stalled] != 1 ||
		kb.Restarts != 2 || kb.UptimeS != 100 || kb.Remote == nil || *kb.Remote.BeatAgeS != 0.4 || *kb.Remote.VerdictsAgeS != 7 {
		t.Errorf("kb (declared on beta) from beta's presence: %+v %+v", kb, kb.Remote)
	}
	if f := rows["far"]; f.Verdict != Remote || f.Remote != nil {
		t.Errorf("far (declared on a host outside the federation) changed: %+v", f)
	}
	if f := rows["web@beta"]; f.State != "unknown" || f.Remote.ReportedState != "hibernating" || f.Verdict != "" || f.MemberCount != -1 {
		t.Errorf("a state this manager does not know: %+v %+v", f, f.Remote)
	}
	if f := rows["wiki@beta"]; f.MemberCount != -1 || len(f.Summary) != 0 {
		t.Errorf("counts without an age say nothing: %+v", f)
	}
	ops := rows["ops@gamma"]
	if ops.Verdict != Unknown || ops.State != "unknown" || ops.Remote.HostState != "expired" || ops.Remote.ReportedState != "running" ||
		!strings.Contains(ops.Error, "expired: no beat for 9s") || len(ops.Summary) != 0 {
		t.Errorf("an expired host's fleet: %+v %+v", ops, ops.Remote)
	}
	if rep.Federation == nil || rep.Federation.Host != "alpha" || len(rep.Federation.Hosts) != 3 || rep.Federation.Hosts[2].BeatAgeS != nil {
		t.Fatalf("federation %+v", rep.Federation)
	}

	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join("..", "docs", "status-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("report violates docs/status-schema.json: %v\n%s", err, js)
	}

	var out bytes.Buffer
	if err := Render(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ops@gamma", "host gamma expired: no beat for 9s (last seen ", "federation: this host is alpha, connected; 3 peer(s)",
		"  beta: online, 3 fleet(s), last beat 400ms ago", "  delta: never-seen, 0 fleet(s)", "on beta: last beat 400ms ago, verdicts 7s old", "2 WORKING"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// A status of some fleets: only those rows.
	rep = base()
	AddRemote(rep, view, []string{"ops@gamma"}, now)
	if len(rep.Fleets) != 4 || rep.Fleets[3].Name != "ops@gamma" {
		t.Errorf("filtered: %+v", rep.Fleets)
	}
}

// TestRemoteClockShown (issue 27 item 3): a peer's measured clock skew
// is in the report (clock_skew_ms, clock) and on its line of the table.
func TestRemoteClockShown(t *testing.T) {
	now := time.Now()
	words := federation.SkewWords("beta", 10*time.Minute, federation.DefaultClockSkew)
	view := peerview.Snapshot{Self: "alpha", Connected: true, Hosts: []peerview.HostView{
		{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: now, Heartbeat: 2 * time.Second, Fleets: []wire.FleetSummary{},
			Skew: 10 * time.Minute, SkewRefused: true, ClockNote: words},
		{Host: "gamma", State: peerview.HostOnline, Online: true, LastSeen: now, Heartbeat: 2 * time.Second, Fleets: []wire.FleetSummary{}, Skew: 3 * time.Millisecond},
	}}
	rep := &Report{SchemaVersion: SchemaVersion, GeneratedAt: now, Fleets: []Fleet{}}
	AddRemote(rep, view, nil, now)
	b := rep.Federation.Hosts[0]
	if b.ClockSkewMS != 600000 || b.Clock != words || rep.Federation.Hosts[1].Clock != "" || rep.Federation.Hosts[1].ClockSkewMS != 0 {
		t.Fatalf("hosts %+v", rep.Federation.Hosts)
	}
	var sb strings.Builder
	renderFederation(&sb, rep.Federation)
	if !strings.Contains(sb.String(), "beta: online, 0 fleet(s), last beat 0s ago, beta's clock is 10m0s ahead: its requests are refused") {
		t.Fatalf("table:\n%s", sb.String())
	}
}
