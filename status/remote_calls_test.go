package status

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
)

// TestAddRemoteCalls: a peer this manager called carries its calls and
// their round trips in the report ("calls", valid against
// docs/status-schema.json) and on its table line; a peer never called has
// neither.
func TestAddRemoteCalls(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	view := peerview.Snapshot{Self: "alpha", Connected: true, Hosts: []peerview.HostView{
		{Host: "beta", State: peerview.HostOnline, Online: true, LastSeen: now.Add(-time.Second), Heartbeat: 2 * time.Second},
		{Host: "gamma", State: peerview.HostOnline, Online: true, LastSeen: now.Add(-time.Second), Heartbeat: 2 * time.Second},
	}, Calls: map[string]peerview.Calls{
		"beta": {Calls: 12, Answered: 10, RTTLastMS: 1.9, RTTP50MS: 1.84, RTTP99MS: 23.5, RTTSamples: 10, LastCall: now.Add(-3 * time.Second)},
	}}
	rep := &Report{SchemaVersion: SchemaVersion, GeneratedAt: now, Host: "alpha", Via: "daemon", Fleets: []Fleet{}}
	AddRemote(rep, view, nil, now)
	hosts := rep.Federation.Hosts
	if len(hosts) != 2 || hosts[0].Calls == nil || hosts[0].Calls.RTTP50MS != 1.84 || hosts[1].Calls != nil {
		t.Fatalf("hosts %+v", hosts)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"calls":{"calls":12,"answered":10,"rtt_last_ms":1.9,"rtt_p50_ms":1.84,"rtt_p99_ms":23.5,"rtt_samples":10,`) {
		t.Errorf("JSON: %s", js)
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
	if !strings.Contains(out.String(), "  beta: online, 0 fleet(s), last beat 1s ago, 12 call(s), round trip p50 1.84ms p99 24ms (last 10), 2 unanswered\n") ||
		!strings.Contains(out.String(), "  gamma: online, 0 fleet(s), last beat 1s ago\n") {
		t.Errorf("table:\n%s", out.String())
	}
}
