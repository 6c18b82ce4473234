package registry

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Defaults and bounds of the journal keys of [manager] (package journal,
// docs/ARCHITECTURE.md "Journal").
const (
	DefaultJournalMaxMB  = 64                  // [manager] journal_max_mb
	DefaultJournalMaxAge = 30 * 24 * time.Hour // [manager] journal_max_age
)

// NotifyKinds are the event kinds a [[notify]] rule may name in on
// (package notify says when each begins and ends).
var NotifyKinds = []string{"member.blocked", "member.stalled", "member.done", "fleet.failed", "fleet.down", "host.offline"}

// NotifySinkTypes are the sink types of [[notify.sinks]].
var NotifySinkTypes = []string{"webhook", "command", "herdr", "mcp"}

// NotifyPresets are the webhook body shapes of [[notify.sinks]] preset.
var NotifyPresets = []string{"json", "slack", "discord", "ntfy"}

// DefaultNotifyHold is [[notify]] hold's default.
const DefaultNotifyHold = 10 * time.Second

// Notify is one [[notify]] rule: which episodes (On, Fleets) notify whom
// (Sinks) once they have held for Hold.
type Notify struct {
	// Name names the rule in the journal, `notify test RULE` and check.
	// Default "notify[N]" (N from 0, in file order).
	Name string
	// On are the event kinds (NotifyKinds); required, not empty.
	On []string
	// Fleets are the fleets (NAME or NAME@HOST) the rule watches; empty:
	// all. A local NAME must be configured.
	Fleets []string
	// Hold is how long a state must last before it notifies (0 to 24h).
	// Default DefaultNotifyHold.
	Hold Duration
	// Sinks are where the notification goes; required, not empty.
	Sinks []NotifySink
	// Line is the line of the rule's [[notify]] header.
	Line int
}

// NotifySink is one [[notify.sinks]] entry.
type NotifySink struct {
	// Type is one of NotifySinkTypes.
	Type string
	// URLEnv names the environment variable that holds a webhook's URL;
	// URLFile is a file (mode 0600, owner-only) holding it. A webhook
	// has exactly one; the URL itself is never written in fleets.toml.
	URLEnv, URLFile string
	// Preset is a webhook's body shape (NotifyPresets). Default "json".
	Preset string
	// Command is a command sink's argv (the event is on its stdin as
	// JSON and in FLEETMGR_EVENT_* variables).
	Command []string
	// Line is the line of the sink's table.
	Line int
}

// notifyTable decodes the [[notify]] array (v at path) into c.Notify.
func (ld *loader) notifyTable(c *Config, path []string, v any) {
	rules, ok := v.([]map[string]any)
	if !ok {
		if arr, isArr := v.([]any); isArr {
			for _, x := range arr {
				if t, isT := x.(map[string]any); isT {
					rules = append(rules, t)
				} else {
					ld.fail(path, "expected [[notify]] tables, got a %s", typeName(x))
					return
				}
			}
		} else {
			ld.fail(path, "expected [[notify]] tables, got a %s", typeName(v))
			return
		}
	}
	if ld.secrets == nil {
		ld.secrets = secretEnvNames(nil)
	}
	sinkBase := 0 // [[notify.sinks]] headers are counted across rules by the locator
	for i, t := range rules {
		p := appendPath(path, indexPart(i))
		if sv, ok := t["sinks"].([]map[string]any); ok {
			ld.loc.alias(appendPath(path, "sinks"), sinkBase, appendPath(p, "sinks"), len(sv))
			sinkBase += len(sv)
		}
		r := Notify{Name: fmt.Sprintf("notify[%d]", i), Hold: Duration{DefaultNotifyHold}, Fleets: []string{}, Line: ld.loc.line(p)}
		ld.decodeTable(p, t, []field{
			{key: "name", set: func(p []string, v any) {
				if s, ok := ld.nonEmpty(p, v); ok {
					r.Name = s
				}
			}},
			{key: "on", set: func(p []string, v any) {
				if kinds, ok := ld.strs(p, v); ok {
					for j, k := range kinds {
						if !slices.Contains(NotifyKinds, k) {
							ld.fail(appendPath(p, indexPart(j)), "unknown event kind %q (known: %s)", k, strings.Join(NotifyKinds, ", "))
						}
					}
					r.On = kinds
				}
			}, unset: func(p []string) {
				ld.fail(p, "missing: which event kinds notify (%s)", strings.Join(NotifyKinds, ", "))
			}},
			{key: "fleets", set: func(p []string, v any) {
				if names, ok := ld.strs(p, v); ok {
					r.Fleets = names
				}
			}},
			{key: "hold", set: func(p []string, v any) {
				if s, ok := v.(string); ok && (s == "0" || s == "0s") {
					r.Hold = Duration{} // notify at once
					return
				}
				if d, ok := ld.duration(p, v); ok {
					if d.Duration < 0 || d.Duration > 24*time.Hour {
						ld.fail(p, "%s is out of range: want 0s to 24h", d.Duration)
					} else {
						r.Hold = d
					}
				}
			}},
			{key: "sinks", set: func(p []string, v any) {
				r.Sinks = ld.notifySinks(p, v)
			}, unset: func(p []string) {
				ld.fail(p, "missing: a rule needs at least one [[notify.sinks]] (type = %s)", strings.Join(NotifySinkTypes, " | "))
			}},
		})
		c.Notify = append(c.Notify, r)
	}
}

func (ld *loader) notifySinks(path []string, v any) []NotifySink {
	tables, ok := v.([]map[string]any)
	if !ok {
		ld.fail(path, "expected [[notify.sinks]] tables, got a %s", typeName(v))
		return nil
	}
	var out []NotifySink
	for i, t := range tables {
		p := appendPath(path, indexPart(i))
		s := NotifySink{Preset: "json", Line: ld.loc.line(p)}
		ld.decodeTable(p, t, []field{
			{key: "type", set: func(p []string, v any) {
				if x, ok := ld.nonEmpty(p, v); ok {
					if !slices.Contains(NotifySinkTypes, x) {
						ld.fail(p, "unknown sink type %q (known: %s)", x, strings.Join(NotifySinkTypes, ", "))
					}
					s.Type = x
				}
			}, unset: func(p []string) {
				ld.fail(p, "missing: the sink's type (%s)", strings.Join(NotifySinkTypes, ", "))
			}},
			{key: "url_env", set: func(p []string, v any) {
				x, ok := v.(string)
				if !ok || !envVarNameLike(x) {
					ld.fail(p, "this does not look like an environment variable NAME (e.g. \"FLEETMGR_NOTIFY_URL\"); if it is the URL itself, remove it from the file (it carries a token), export it and name the variable here")
					return
				}
				s.URLEnv = x
				if _, taken := ld.secrets[x]; !taken {
					ld.secrets[x] = "a notification sink's URL ([[notify.sinks]] url_env)"
				}
			}},
			{key: "url_file", set: func(p []string, v any) {
				if x, ok := ld.expand(p, fmt.Sprint(v)); ok {
					s.URLFile = x
					if fi, err := os.Stat(x); err == nil && fi.Mode().Perm()&0o077 != 0 {
						ld.fail(p, "%s has mode %04o: a file holding a webhook URL (a token) must be readable by its owner only (chmod 600 %s)", x, fi.Mode().Perm(), x)
					}
				}
			}},
			{key: "url", shared: true, set: func(p []string, _ any) {
				ld.fail(p, "a webhook URL carries its token and never goes in fleets.toml: export it and name the variable in url_env, or write it in a 0600 file named in url_file")
			}},
			{key: "preset", set: func(p []string, v any) {
				if x, ok := ld.nonEmpty(p, v); ok {
					if !slices.Contains(NotifyPresets, x) {
						ld.fail(p, "unknown preset %q (known: %s)", x, strings.Join(NotifyPresets, ", "))
					}
					s.Preset = x
				}
			}},
			{key: "command", set: func(p []string, v any) {
				if argv, ok := ld.strs(p, v); ok {
					if len(argv) == 0 || argv[0] == "" {
						ld.fail(p, "must name a program (a non-empty list)")
					}
					s.Command = argv
				}
			}},
		})
		switch s.Type {
		case "webhook":
			if (s.URLEnv == "") == (s.URLFile == "") {
				ld.fail(p, "a webhook sink needs exactly one of url_env or url_file")
			}
		case "command":
			if len(s.Command) == 0 {
				ld.fail(appendPath(p, "command"), "missing: a command sink runs a program (command = [\"notify-send\", \"fleetmgr\"])")
			}
		}
		out = append(out, s)
	}
	return out
}

// alias records the lines of the n array elements from[base…] (and
// their keys) under to[0…]: the locator counts a nested [[a.b]] header
// across every [[a]], while the decoder names it by its parent's index.
func (l *locator) alias(from []string, base int, to []string, n int) {
	for i := range n {
		src := join(appendPath(from, indexPart(base+i)))
		dst := join(appendPath(to, indexPart(i)))
		for k, ln := range l.lines {
			if k == src || strings.HasPrefix(k, src+pathSep) {
				if _, ok := l.lines[dst+k[len(src):]]; !ok {
					l.lines[dst+k[len(src):]] = ln
				}
			}
		}
	}
}

// validateNotify checks the rules' fleets against the fleets configured.
func (ld *loader) validateNotify(c *Config) {
	for i, r := range c.Notify {
		for j, f := range r.Fleets {
			p := []string{"notify", indexPart(i), "fleets", indexPart(j)}
			name, host, remote := strings.Cut(f, "@")
			if remote {
				if !validFleetName(name) || host == "" {
					ld.fail(p, "%q is not NAME@HOST", f)
				}
				continue
			}
			if _, ok := c.Fleets[name]; !ok {
				ld.fail(p, "unknown fleet %q (configured: %s)", f, strings.Join(c.Names(), ", "))
			}
		}
	}
}

// journalFields are the [manager] keys of the journal.
func (ld *loader) journalFields(m *Manager) []field {
	return []field{
		{key: "journal", set: func(p []string, v any) {
			if b, ok := ld.boolean(p, v); ok {
				m.Journal = b
			}
		}},
		{key: "journal_max_mb", set: func(p []string, v any) {
			if x, ok := ld.integer(p, v); ok {
				if x < 1 || x > 1<<20 {
					ld.fail(p, "must be 1 to 1048576 (megabytes), got %d", x)
				} else {
					m.JournalMaxMB = x
				}
			}
		}},
		{key: "journal_max_age", set: func(p []string, v any) {
			if d, ok := ld.duration(p, v); ok {
				if d.Duration < time.Minute {
					ld.fail(p, "%s is too short: want at least 1m", d.Duration)
				} else {
					m.JournalMaxAge = d
				}
			}
		}},
		{key: "journal_call_arguments", set: func(p []string, v any) {
			if b, ok := ld.boolean(p, v); ok {
				m.JournalCallArguments = b
			}
		}},
	}
}
