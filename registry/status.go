package registry

import (
	"path/filepath"
	"strings"
	"time"
)

// Defaults of the [status] table and of [fleets.NAME] host (issue #7).
const (
	DefaultStatusInterval = 3 * time.Second // [status] interval
	DefaultStatusTimeout  = 5 * time.Second // [status] fleet_timeout, added to interval
	DefaultMaxWatches     = 8192            // [status] max_watches, per fleet
	LocalHost             = "local"         // [fleets.NAME] host default
)

// DefaultStatusIgnore are the directory names every status walk and watch
// prunes, whatever [status] ignore adds (issue #7).
var DefaultStatusIgnore = []string{".git", "node_modules", "target", "vendor"}

// Status is the [status] table: how `fleetmgr status` samples members.
type Status struct {
	// Interval is the time between the two evidence samples of a member
	// that claims to be busy. Default DefaultStatusInterval.
	Interval Duration
	// FleetTimeout is how long past Interval one fleet may take before it
	// is reported as UNKNOWN: timeout. Default DefaultStatusTimeout.
	FleetTimeout Duration
	// Ignore are extra names (or filepath.Match patterns on a base name)
	// pruned from worktree walks and watches, on top of
	// DefaultStatusIgnore. Never nil.
	Ignore []string
	// MaxWatches bounds the inotify watches `fleetmgr serve` places per
	// fleet; directories beyond it are walked instead. Default
	// DefaultMaxWatches; 0 disables watching (every status walks).
	MaxWatches int
}

// statusTable decodes [status] and applies its defaults.
func (ld *loader) statusTable(s *Status, t map[string]any) {
	p := func(k string) []string { return []string{"status", k} }
	ld.known([]string{"status"}, t, "interval", "fleet_timeout", "ignore", "max_watches")
	s.Interval.Duration = DefaultStatusInterval
	s.FleetTimeout.Duration = DefaultStatusTimeout
	s.MaxWatches = DefaultMaxWatches
	s.Ignore = []string{}
	if v, ok := t["interval"]; ok {
		if d, ok := ld.duration(p("interval"), v); ok {
			if d.Duration < 100*time.Millisecond || d.Duration > 10*time.Minute {
				ld.fail(p("interval"), "%s is out of range: want 100ms to 10m", d.Duration)
			} else {
				s.Interval = d
			}
		}
	}
	if v, ok := t["fleet_timeout"]; ok {
		if d, ok := ld.duration(p("fleet_timeout"), v); ok {
			if d.Duration <= 0 {
				ld.fail(p("fleet_timeout"), "must be positive")
			} else {
				s.FleetTimeout = d
			}
		}
	}
	if v, ok := t["ignore"]; ok {
		if names, ok := ld.strs(p("ignore"), v); ok {
			for i, n := range names {
				if _, err := filepath.Match(n, "x"); err != nil || n == "" || strings.ContainsRune(n, '/') {
					ld.fail(appendPath(p("ignore"), indexPart(i)), "%q: want a directory or file name, or a pattern on one (no '/')", n)
				}
			}
			s.Ignore = names
		}
	}
	if v, ok := t["max_watches"]; ok {
		if n, ok := ld.integer(p("max_watches"), v); ok {
			if n < 0 {
				ld.fail(p("max_watches"), "%d: want 0 (no watching) or more", n)
			} else {
				s.MaxWatches = n
			}
		}
	}
}

// fleetHost decodes [fleets.NAME] host: where the fleet runs. "local" (the
// default) or this host's name means here; any other value makes the fleet
// REMOTE in status, never probed.
func (ld *loader) fleetHost(f *Fleet, t map[string]any) {
	f.Host = LocalHost
	if v, ok := t["host"]; ok {
		if s, ok := ld.nonEmpty([]string{"fleets", f.Name, "host"}, v); ok {
			f.Host = s
		}
	}
}
