package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestFleetHostileSchemas: the fleetd stand-in adds a tool whose schema
// closes the arguments inside allOf (additionalProperties false there) and
// one with its own "fleet" property. Through fleetmgr, with the official
// Go SDK client over HTTP and over `fleetmgr mcp`:
//   - the first is listed with a schema a real validator finds satisfied
//     by a call with fleet, and still refusing an unknown argument;
//     the call reaches the fleet (which validates against its own schema)
//     without fleet, and its answer comes back;
//   - the second is not listed, and serve's log, fleetmgr_status,
//     `fleetmgr status --json` (valid against docs/status-schema.json), the
//     status table (through the daemon and --local, from the cached
//     catalogue) and `fleetmgr check` name it with its fleet and why.
func TestFleetHostileSchemas(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	e.MustRun("start", "kb")
	serve := e.StartServe()
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"kb"}, false, 15*time.Second)

	strict := map[string]any{"type": "object", "required": []any{"id"},
		"allOf": []any{map[string]any{
			"properties":           map[string]any{"id": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"}},
			"additionalProperties": false,
		}}}
	own := map[string]any{"type": "object", "properties": map[string]any{"fleet": map[string]any{"type": "string"}}}
	w.drain()
	for name, schema := range map[string]any{"strict_allof": strict, "own_fleet": own} {
		if res := call(t, w.cs, "fleet_add_tool", map[string]any{"fleet": "kb", "name": name, "input_schema": schema}); res.IsError {
			t.Fatalf("fleet_add_tool %s: %s", name, textOf(res))
		}
	}
	w.waitTool(t, "strict_allof", []string{"kb"}, true, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lt, err := w.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "own_fleet" }) {
		t.Fatal("own_fleet is listed, though its own fleet argument cannot be told from fleetmgr's")
	}
	i := slices.IndexFunc(lt.Tools, func(tl *mcp.Tool) bool { return tl.Name == "strict_allof" })
	sch := compileToolSchema(t, lt.Tools[i])
	good := map[string]any{"fleet": "kb", "id": "m1", "n": 2}
	if err := sch.Validate(roundTrip(t, good)); err != nil {
		t.Fatalf("the listed schema refuses a call the fleet accepts: %v", err)
	}
	bad := map[string]any{"fleet": "kb", "id": "m1", "zz": 1}
	if sch.Validate(roundTrip(t, bad)) == nil {
		t.Fatal("the listed schema accepts an argument the fleet's schema forbids")
	}

	// The call, over the HTTP mount and over `fleetmgr mcp`.
	cmd := exec.Command(bins.Fleetmgr, "--config", e.ConfigPath, "mcp", "--no-start")
	cmd.Env = e.Environ
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stdio.Close()
	for mount, cs := range map[string]*mcp.ClientSession{"http": w.cs, "stdio": stdio} {
		res := call(t, cs, "strict_allof", good)
		var echo struct {
			Fleet, Tool string
			Args        map[string]any
		}
		if err := json.Unmarshal([]byte(textOf(res)), &echo); res.IsError || err != nil {
			t.Fatalf("%s: strict_allof: %s", mount, textOf(res))
		}
		if echo.Fleet != "kb" || len(echo.Args) != 2 || echo.Args["id"] != "m1" || echo.Args["n"] != float64(2) {
			t.Fatalf("%s: the fleet received %+v, want id and n without fleet", mount, echo)
		}
		// A call the listed schema refuses is refused by the fleet too.
		if res := call(t, cs, "strict_allof", bad); !res.IsError || !strings.Contains(textOf(res), "validating") {
			t.Fatalf("%s: a call breaking the fleet's schema: %s", mount, textOf(res))
		}
	}

	// The tool left out is named, with its fleet and why.
	why := `already has a "fleet" property`
	if log := serve.Log(); !strings.Contains(log, "tool not exposed") || !strings.Contains(log, "fleet=kb tool=own_fleet why=") || !strings.Contains(log, "property, so fleetmgr cannot add its own") {
		t.Errorf("serve's log does not name own_fleet:\n%s", log)
	}
	res := call(t, w.cs, "fleetmgr_status", map[string]any{"interval_ms": 100})
	var sr struct {
		Fleets []struct {
			Name          string
			ExcludedTools []struct{ Tool, Reason string } `json:"excluded_tools"`
		}
	}
	if err := json.Unmarshal([]byte(textOf(res)), &sr); err != nil || res.IsError {
		t.Fatalf("fleetmgr_status: %v %s", err, textOf(res))
	}
	if len(sr.Fleets) != 1 || len(sr.Fleets[0].ExcludedTools) != 1 || sr.Fleets[0].ExcludedTools[0].Tool != "own_fleet" ||
		!strings.Contains(sr.Fleets[0].ExcludedTools[0].Reason, why) {
		t.Errorf("fleetmgr_status excluded_tools: %+v", sr.Fleets)
	}
	rep := statusJSON(t, e, statusSchema(t), "--interval", "100ms")
	if row := fleetRow(t, rep, "kb"); len(row.ExcludedTools) != 1 || row.ExcludedTools[0].Tool != "own_fleet" {
		t.Errorf("status --json excluded_tools: %+v", row.ExcludedTools)
	}
	for _, args := range [][]string{{"status", "--interval", "100ms"}, {"status", "--local", "--interval", "100ms"}} {
		if out := e.MustRun(args...).Stdout; !strings.Contains(out, "tools not exposed: own_fleet") {
			t.Errorf("%v: the table does not name own_fleet:\n%s", args, out)
		}
	}
	r := e.Run("check", "--json")
	var cr struct {
		Findings []struct{ Check, Severity, Subject, Message string }
	}
	if err := json.Unmarshal([]byte(r.Stdout), &cr); err != nil {
		t.Fatalf("check --json: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if !slices.ContainsFunc(cr.Findings, func(f struct{ Check, Severity, Subject, Message string }) bool {
		return f.Check == "catalogue" && f.Severity == "warning" && f.Subject == "tool own_fleet" &&
			strings.Contains(f.Message, "fleet kb") && strings.Contains(f.Message, why)
	}) {
		t.Errorf("check does not name own_fleet: %+v", cr.Findings)
	}
}

// compileToolSchema compiles a listed tool's input schema with
// santhosh-tekuri/jsonschema, loading nothing from outside.
func compileToolSchema(t *testing.T, tl *mcp.Tool) *jsonschema.Schema {
	t.Helper()
	b, err := json.Marshal(tl.InputSchema)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("urn:e2e:"+tl.Name, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("urn:e2e:" + tl.Name)
	if err != nil {
		t.Fatalf("%s's listed schema does not compile: %v\n%s", tl.Name, err, b)
	}
	return sch
}

// roundTrip turns v into what jsonschema.UnmarshalJSON would give.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, _ := json.Marshal(v)
	out, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
