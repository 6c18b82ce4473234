package main

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
)

// TestStopAllSaysASharedErrorOnce: `fleetmgr stop --all` against a daemon
// that refuses this caller (its guard closes the connection) said the
// refusal once per fleet (three times, with differing tails: EOF, broken
// pipe); it is now said once, naming the fleets, and the fleets after the
// first are not tried against that daemon.
func TestStopAllSaysASharedErrorOnce(t *testing.T) {
	// A "daemon" on this process's pid whose socket accepts and hangs up.
	cfgPath, sock := fakeDaemon(t, []string{"a", "b", "c"}, func(c net.Conn) { c.Close() })

	stdout, stderr, err := runCLI(cfgPath, "stop", "--all")
	if err == nil {
		t.Fatalf("stop --all against a refusing daemon succeeded\nstdout:\n%s", stdout)
	}
	all := err.Error() + "\n" + stdout + stderr
	refusal := "fleetmgr serve on " + sock + " refused or failed"
	if n := strings.Count(all, refusal); n != 1 {
		t.Fatalf("the refusal is said %d times, want once:\nerror:\n%v\nstdout:\n%s\nstderr:\n%s", n, err, stdout, stderr)
	}
	if !strings.HasPrefix(err.Error(), "a, b, c: "+refusal) {
		t.Fatalf("error does not name the fleets it is about: %v", err)
	}

	// --json: one outcome per fleet, each failed with that error.
	stdout, _, err = runCLI(cfgPath, "stop", "--all", "--json")
	if err == nil || strings.Count(err.Error(), refusal) != 1 {
		t.Fatalf("stop --all --json: %v", err)
	}
	var outs []actionOutcome
	if err := json.Unmarshal([]byte(stdout), &outs); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(outs) != 3 {
		t.Fatalf("%d outcomes, want 3: %+v", len(outs), outs)
	}
	for i, o := range outs {
		if o.Fleet != []string{"a", "b", "c"}[i] || o.OK || !strings.HasPrefix(o.Error, refusal) || o.Port != 20001+i {
			t.Errorf("outcome %d: %+v", i, o)
		}
	}
}

// TestJoinFleetErrors: failures of several fleets are said once per
// distinct message, naming the fleets (one failure too, unless it names
// its fleet already); the errors stay reachable (an exit status survives).
func TestJoinFleetErrors(t *testing.T) {
	refused := errors.New("fleetmgr serve refused")
	coded := &exitError{code: 3, err: errors.New("refusing to stop fleets from inside a herdr pane")}
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
	var ee *exitError
	if err := joinFleetErrors([]fleetError{{"a", coded}, {"b", refused}}); !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("exit status lost: %v", err)
	}
}
