package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// selfInPane applies the guard's rules to this process, except the uid
// rule: its own uid passes it, so the pane rules after it always run (a
// refusal on [guard] allowed_uids would end the check before them and let
// a process in a pane through). Not Allowed means this process lives in a
// herdr pane (or that cannot be ruled out); the decision says why. Nothing
// is logged: the caller's error carries the rule and reason.
func (a *app) selfInPane(ctx context.Context, cfg *registry.Config, m *lifecycle.Manager) guard.Decision {
	g := newGuard(cfg, m, []int{os.Getuid()}, slog.New(slog.DiscardHandler))
	return g.Check(ctx, os.Getpid(), os.Getuid())
}

// refuseInPane stops a verb that changes fleets (start, stop, restart,
// vhost delete) or reads them through fleetd (status) when this fleetmgr
// process itself lives in a herdr pane, by
// the same rules the daemon's guard applies to its callers. Without it a
// member could act on every fleet through the CLI when no daemon runs, and
// `fleetmgr start` of a fleet whose command it wrote would carry that
// command out of its pane (fleetmgr starts children detached and with
// HERDR_* removed). The uid rule is not applied to ourselves: the guard
// lets our own uid through it, so the pane rules after it always run (had
// it refused on [guard] allowed_uids, the pane rules would never be
// reached and a member could act from its pane).
func (a *app) refuseInPane(ctx context.Context, cfg *registry.Config, verb string) error {
	d := a.selfInPane(ctx, cfg, a.manager(cfg, a.logger(slog.LevelError)))
	if d.Allowed {
		return nil
	}
	return &exitError{code: 3, err: fmt.Errorf("refusing to %s fleets from inside a herdr pane (rule %s: %s).\n"+
		"Fleet members must not drive fleetmgr: fleetd trusts it as primary on every fleet. Run this from the operator's own terminal", verb, d.Rule, d.Reason)}
}
