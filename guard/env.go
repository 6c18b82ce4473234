package guard

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// herdrMarkers are the environment variables herdr sets for the processes it runs, all of
// which count as evidence of running inside (or having been started from) herdr (herdr
// 0.8.2: src/pane.rs, src/integration/env.rs, src/session.rs, src/app/tab_bar_status.rs,
// src/app/api/plugins/runtime.rs):
//   - in every pane: HERDR_ENV, HERDR_SOCKET_PATH, HERDR_BIN_PATH, HERDR_WORKSPACE_ID,
//     HERDR_TAB_ID, HERDR_PANE_ID;
//   - HERDR_SESSION, which `herdr --session NAME` exports into the server, whose panes
//     inherit it;
//   - tab-bar status commands and keybound commands, run by the server outside any pane
//     session: HERDR_SOCKET_PATH, HERDR_BIN_PATH and HERDR_ACTIVE_*;
//   - plugin commands: HERDR_PLUGIN_* (with HERDR_ENV and the context pane's HERDR_PANE_ID).
var herdrMarkers = []string{"HERDR_ENV", "HERDR_PANE_ID", "HERDR_TAB_ID", "HERDR_WORKSPACE_ID",
	"HERDR_SESSION", "HERDR_SOCKET_PATH", "HERDR_BIN_PATH"}

// herdrMarkerPrefixes are marker name prefixes (see herdrMarkers).
var herdrMarkerPrefixes = []string{"HERDR_ACTIVE_", "HERDR_PLUGIN_"}

// IsHerdrMarker reports whether the environment variable name is one herdr sets for the
// processes it runs (the herdr-env rule's evidence).
func IsHerdrMarker(name string) bool {
	if slices.Contains(herdrMarkers, name) {
		return true
	}
	for _, p := range herdrMarkerPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// envFinding is what the herdr-env rule found in one environment.
type envFinding struct {
	// vars are the markers found, "KEY=value", sorted by name.
	vars []string
	// names are their names, sorted.
	names []string
	// sessions are the herdr sessions the markers name: HERDR_SESSION's value, and
	// HERDR_SOCKET_PATH's session (an operator session's name when it is that socket, else
	// the non-operator session its path lays out, else the path itself).
	sessions []string
	// foreign are the named sessions that are not operator sessions.
	foreign []string
	// pane is HERDR_PANE_ID's value.
	pane string
}

// readEnv applies the herdr-env rule's reading to env ("KEY=value" entries): every marker,
// and which sessions they name. opSocks maps operator session sockets to names; opNames
// holds the operator session names.
func readEnv(env []string, opSocks map[string]string, opNames map[string]bool) envFinding {
	var f envFinding
	named := func(s string, operator bool) {
		if !slices.Contains(f.sessions, s) {
			f.sessions = append(f.sessions, s)
		}
		if !operator && !slices.Contains(f.foreign, s) {
			f.foreign = append(f.foreign, s)
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !IsHerdrMarker(k) {
			continue
		}
		f.vars = append(f.vars, kv)
		f.names = append(f.names, k)
		switch k {
		case "HERDR_PANE_ID":
			f.pane = v
		case "HERDR_SESSION":
			name := v
			if name == "" {
				name = "default"
			}
			named(name, opNames[name])
		case "HERDR_SOCKET_PATH":
			if name, ok := opSocks[filepath.Clean(v)]; ok && v != "" {
				named(name, true)
			} else if s := sessionOfSocket(v); s != "" && !opNames[s] {
				named(s, false)
			} else {
				// Not laid out as a session's socket, or laid out as an operator
				// session's somewhere else (another config dir): the path says more.
				named(v, false)
			}
		}
	}
	slices.Sort(f.vars)
	slices.Sort(f.names)
	return f
}

// allowed reports whether the markers found let the process through: every session they
// name is an operator session, and they name at least one (markers that name no session, a
// bare HERDR_PANE_ID say, cannot be tied to an operator session).
func (f envFinding) allowed() bool { return len(f.sessions) > 0 && len(f.foreign) == 0 }

// reason says why the markers refuse the process.
func (f envFinding) reason() string {
	why := "names no herdr session, so it cannot be an operator session's"
	if len(f.foreign) > 0 {
		why = fmt.Sprintf("names herdr session %s, not in [guard] operator_sessions", strings.Join(f.foreign, ", "))
	}
	return fmt.Sprintf("its environment carries herdr's markers (%s): it runs inside, or was started from, herdr, and %s",
		strings.Join(f.vars, ", "), why)
}
