package registry

import (
	"strings"
	"testing"
	"time"
)

func TestStatusTable(t *testing.T) {
	c, err, _ := loadBody(t, "[status]\ninterval = \"2s\"\nfleet_timeout = \"1s\"\nignore = [\"dist\", \"*.tmp\"]\nmax_watches = 0\n"+
		fleetA+"host = \"build2\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Interval.Duration != 2*time.Second || c.Status.FleetTimeout.Duration != time.Second ||
		strings.Join(c.Status.Ignore, ",") != "dist,*.tmp" || c.Status.MaxWatches != 0 {
		t.Errorf("status = %+v", c.Status)
	}
	if c.Fleets["a"].Host != "build2" {
		t.Errorf("host = %q", c.Fleets["a"].Host)
	}
	for body, want := range map[string]string{
		"[status]\ninterval = \"10ms\"\n":     "status.interval: 10ms is out of range",
		"[status]\nignore = [\"a/b\"]\n":      "status.ignore[0]",
		"[status]\nmax_watches = -1\n":        "status.max_watches",
		"[status]\nwatches = 1\n":             "status.watches",
		"[status]\nfleet_timeout = \"-1s\"\n": "status.fleet_timeout: must be positive",
	} {
		if _, err, _ := loadBody(t, body+fleetA); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", body, err, want)
		}
	}
	if _, err, _ := loadBody(t, fleetA+"host = \"\"\n"); err == nil || !strings.Contains(err.Error(), "fleets.a.host") {
		t.Errorf("empty host: %v", err)
	}
}
