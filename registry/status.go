package registry

import (
	"path/filepath"
	"strings"
	"time"
)

// Defaults of the [status] table and of [fleets.NAME] host
// (docs/ARCHITECTURE.md "Status: working or stalled").
const (
	DefaultStatusInterval = 3 * time.Second // [status] interval
	DefaultStatusTimeout  = 5 * time.Second // [status] fleet_timeout, added to interval
	DefaultMaxWatches     = 8192            // [status] max_watches, per fleet
	LocalHost             = "local"         // [fleets.NAME] host default
)

// DefaultStatusIgnore are the directory names every status walk and watch
// prunes, whatever [status] ignore adds.
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

// statusTable decodes [status] (t, nil when absent) and applies its
// defaults.
func (ld *loader) statusTable(s *Status, t map[string]any) {
	s.Interval.Duration = DefaultStatusInterval
	s.FleetTimeout.Duration = DefaultStatusTimeout
	s.MaxWatches = DefaultMaxWatches
	s.Ignore = []string{}
	ld.decodeTable([]string{"status"}, t, []field{
		{key: "interval", set: func(p []string, v any) {
			if d, ok := ld.duration(p, v); ok {
				if d.Duration < 100*time.Millisecond || d.Duration > 10*time.Minute {
					ld.fail(p, "%s is out of range: want 100ms to 10m", d.Duration)
				} else {
					s.Interval = d
				}
			}
		}},
		{key: "fleet_timeout", set: ld.setDuration(&s.FleetTimeout)},
		{key: "ignore", set: func(p []string, v any) {
			if names, ok := ld.strs(p, v); ok {
				for i, n := range names {
					if _, err := filepath.Match(n, "x"); err != nil || n == "" || strings.ContainsRune(n, '/') {
						ld.fail(appendPath(p, indexPart(i)), "%q: want a directory or file name, or a pattern on one (no '/')", n)
					}
				}
				s.Ignore = names
			}
		}},
		{key: "max_watches", set: func(p []string, v any) {
			if n, ok := ld.integer(p, v); ok {
				if n < 0 {
					ld.fail(p, "%d: want 0 (no watching) or more", n)
				} else {
					s.MaxWatches = n
				}
			}
		}},
	})
}
