package main

import "testing"

// TestServeStoppedLine: what `fleetmgr serve stop` says of the fleets it
// leaves unsupervised; with none it said "…until the next serve: 0".
func TestServeStoppedLine(t *testing.T) {
	for _, tc := range []struct {
		fleets []string
		want   string
	}{
		{nil, "fleetmgr serve (pid 42) stopped; no fleet runs, so none is left unsupervised"},
		{[]string{"kb"}, "fleetmgr serve (pid 42) stopped; 1 fleet keeps running, unsupervised until the next serve: kb"},
		{[]string{"docs", "kb"}, "fleetmgr serve (pid 42) stopped; 2 fleets keep running, unsupervised until the next serve: docs, kb"},
	} {
		if got := serveStoppedLine(42, tc.fleets); got != tc.want {
			t.Errorf("%v:\n got %q\nwant %q", tc.fleets, got, tc.want)
		}
	}
}
