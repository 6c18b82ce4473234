package serveclient

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// TestJoinFleetErrors: failures of several fleets are said once per
// distinct message, naming the fleets (one failure too, unless it names
// its fleet already); the errors stay reachable (an exit status survives:
// fleetmgr exits 3 on a *Refusal).
func TestJoinFleetErrors(t *testing.T) {
	refused := errors.New("fleetmgr serve refused")
	coded := &serveapi.Refusal{Err: errors.New("refusing to stop fleets from inside a herdr pane")}
	cases := []struct {
		name string
		errs []fleetError
		want string // "" means nil
	}{
		{"none", nil, ""},
		{"one is labelled", []fleetError{{"a", refused}}, "a: fleetmgr serve refused"},
		{"one naming its fleet is left as it is", []fleetError{{"a", errors.New("fleet a is not configured")}}, "fleet a is not configured"},
		{"shared", []fleetError{{"a", refused}, {"b", refused}, {"c", refused}}, "a, b, c: fleetmgr serve refused"},
		{"distinct", []fleetError{{"a", refused}, {"b", errors.New("mkdir /s/b: not a directory")}, {"c", refused}},
			"a, c: fleetmgr serve refused\nb: mkdir /s/b: not a directory"},
		{"names its fleet already", []fleetError{{"a", errors.New("fleet a: processes survived SIGKILL: [7]")}, {"b", refused}},
			"fleet a: processes survived SIGKILL: [7]\nb: fleetmgr serve refused"},
		{"exit status kept", []fleetError{{"a", coded}, {"b", coded}}, "a, b: refusing to stop fleets from inside a herdr pane"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := joinFleetErrors(tc.errs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %q, want %q", err, tc.want)
			}
			for _, e := range tc.errs {
				if !errors.Is(err, e.err) {
					t.Errorf("%v does not wrap %v", err, e.err)
				}
			}
		})
	}
	var r *serveapi.Refusal
	if err := joinFleetErrors([]fleetError{{"a", coded}, {"b", refused}}); !errors.As(err, &r) || r != coded {
		t.Fatalf("exit status lost: %v", err)
	}
}

// TestFleetsOnceEach: a fleet named twice (or ten thousand times) is
// acted on once, in the order first named.
func TestFleetsOnceEach(t *testing.T) {
	c := fakeServe(t, []string{"kb", "docs"}, func(*mcp.Server) {})
	names := []string{"docs", "kb", "docs"}
	for range 10000 {
		names = append(names, "kb")
	}
	got, err := c.Fleets(serveapi.Stop, names, false)
	if err != nil || !slices.Equal(got, []string{"docs", "kb"}) {
		t.Fatalf("Fleets: %v %v", got, err)
	}
}

// TestActRequestPrintTo: a line per step and one per fleet that ended
// well; a failed fleet prints nothing (Act's error says it); fleet text
// is escaped.
func TestActRequestPrintTo(t *testing.T) {
	var out bytes.Buffer
	var req ActRequest
	req.PrintTo(&out)
	req.Progress(lifecycle.Step{Fleet: "kb", Name: "fleetd", Detail: "healthy on 127.0.0.1:8770 (pid 42)", Elapsed: 1250 * time.Millisecond})
	req.Progress(lifecycle.Step{Fleet: "kb", Name: "lead", Detail: "tab \x1b[2Jlead"})
	req.Done(Outcome{Fleet: "kb", OK: true, State: lifecycle.PhaseRunning})
	req.Done(Outcome{Fleet: "docs", OK: false, State: lifecycle.PhaseFailed, Error: "boom"})
	want := "kb: fleetd         healthy on 127.0.0.1:8770 (pid 42) (1.2s)\n" +
		"kb: lead           tab \\x1b[2Jlead (0.0s)\n" +
		"kb: running\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
