package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/runner"
	"github.com/fleetmgr/fleetmgr/status"
)

// statusWatcher builds the serve daemon's file evidence for fleetmgr_status:
// an inotify Watcher over every running local fleet's worktree root, bounded
// by [status] max_watches per fleet (0: no watcher, every status walks). The
// returned start function runs the watcher and the loop that keeps its
// roots in step with the fleets (on each changes signal, a state file
// written; nil: every 2 s), both added to serve's parts.
func statusWatcher(cfg *registry.Config, m *lifecycle.Manager, changes <-chan struct{}, log *slog.Logger) (*status.Options, func(*runner.Group)) {
	prune := status.NewPruner(cfg.Status.Ignore)
	opt := &status.Options{Files: &status.Walker{Prune: prune}}
	if cfg.Status.MaxWatches == 0 {
		return opt, func(*runner.Group) {}
	}
	w, err := status.NewWatcher(status.WatcherOptions{MaxWatches: cfg.Status.MaxWatches, Prune: prune, Log: log})
	if err != nil {
		log.Warn("status: no inotify watcher; every status will walk worktrees", "err", err)
		return opt, func(*runner.Group) {}
	}
	opt.Files = w
	return opt, func(run *runner.Group) {
		run.Go("status watcher", w.Run)
		every := 2 * time.Second
		if changes != nil {
			every = stateBackstop
		}
		run.Go("status roots", func(ctx context.Context) { status.KeepRoots(ctx, w, m, changes, every) })
	}
}

// stateBackstop is how often serve's readers of the fleets' states that
// are told of every change (stateWatch) read them anyway: a safety net for
// a signal lost, and for what no state file write announces (a worktree
// root made after its fleet started).
const stateBackstop = 10 * time.Second
