package setup

import (
	"encoding/json"
	"fmt"

	"github.com/fleetmgr/fleetmgr/registry"
)

// What the verbs' results say, for the CLI to print: Lines in words, and
// MarshalJSON for --json (the objects README and `fleetmgr VERB --help`
// describe).

// fleetJSON is a fleet as init and add print it in --json.
func fleetJSON(f *registry.Fleet) any {
	if f == nil {
		return nil
	}
	return map[string]any{"name": f.Name, "project": f.Project, "command": f.Command, "port": f.Port, "lead": f.Lead}
}

// Lines are `fleetmgr init`'s output.
func (r *InitResult) Lines() []string {
	out := []string{"wrote " + r.Config.Path}
	if r.Fleet != nil {
		out = append(out, fmt.Sprintf("fleet %s: project %s", r.Fleet.Name, r.Fleet.Project))
	}
	if r.Shadowed != "" {
		out = append(out, fmt.Sprintf("note: %s in this directory is read first by fleetmgr run from here", r.Shadowed))
	}
	return append(out, "next: fleetmgr add NAME --project DIR; fleetmgr check; fleetmgr service install")
}

// MarshalJSON is `fleetmgr init --json`: {"config", "fleet" (null
// without one), "shadowed_by"}.
func (r *InitResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"config": r.Config.Path, "fleet": fleetJSON(r.Fleet), "shadowed_by": r.Shadowed})
}

// Lines are `fleetmgr add`'s output.
func (r *AddResult) Lines() []string {
	out := []string{fmt.Sprintf("added fleet %s to %s (project %s, port %d)", r.Fleet.Name, r.Config.Path, r.Fleet.Project, r.Fleet.Port)}
	if r.Reload != "" {
		out = append(out, r.Reload)
	}
	return append(out, "start it: fleetmgr start "+r.Fleet.Name)
}

// MarshalJSON is `fleetmgr add --json`: {"config", "fleet", "reload"}.
func (r *AddResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"config": r.Config.Path, "fleet": fleetJSON(r.Fleet), "reload": r.Reload})
}

// Lines are `fleetmgr remove`'s output.
func (r *RemoveResult) Lines() []string {
	out := []string{fmt.Sprintf("removed fleet %s from %s", r.Name, r.Config.Path)}
	if r.NotInConfig {
		out[0] = fmt.Sprintf("fleet %s was no longer in %s (file unchanged)", r.Name, r.Config.Path)
	}
	if r.Purged != "" {
		out = append(out, "deleted "+r.Purged)
	}
	if r.Vhost != "" {
		out = append(out, fmt.Sprintf("deleted vhost %s (existed: %v) and broker user %s", r.Vhost, r.VhostExisted, r.BrokerUser))
	}
	for _, k := range r.Kept {
		out = append(out, "kept: "+k)
	}
	if r.Reload != "" {
		out = append(out, r.Reload)
	}
	return out
}

// MarshalJSON is `fleetmgr remove --json`: {"config", "removed",
// "purged", "vhost_deleted", "broker_user_deleted", "kept", "reload"}.
func (r *RemoveResult) MarshalJSON() ([]byte, error) {
	kept := r.Kept
	if kept == nil {
		kept = []string{} // a list for scripts, never null
	}
	return json.Marshal(map[string]any{"config": r.Config.Path, "removed": r.Name, "purged": r.Purged,
		"vhost_deleted": r.Vhost, "broker_user_deleted": r.BrokerUser, "kept": kept, "reload": r.Reload})
}
