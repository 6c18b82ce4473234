// Package runner runs a server's parts as one: started in the order they
// were added, stopped in the reverse order, so a part never outlives one
// it uses (as caddy's run and systemd's ordering dependencies do). serve
// (package daemon) is its user: its listeners are added last and so stop
// first, the journal's writer is added early and so stops late.
package runner

import (
	"context"
	"fmt"
	"log/slog"
)

// Part is one of a server's parts.
type Part struct {
	// Name names the part in the log and in errors ("http", "supervisor").
	Name string
	// Run runs the part until its context ends. A Run that returns nil
	// before then has simply finished (a part with nothing to do); one
	// that returns an error stops the whole group, in reverse order, and
	// Group.Run returns that error (wrapped with Name).
	Run func(ctx context.Context) error
	// Stop, when set, is called when it is this part's turn to stop,
	// before its context is cancelled: a graceful end that a context
	// alone does not give (http.Server.Shutdown, answering calls under
	// way). It should return within its own bound; Run is then waited
	// for.
	Stop func()
}

// Group is an ordered set of parts. Its zero value is ready to use; it
// is not safe for concurrent Add.
type Group struct {
	parts []Part
	// Log, when set, is told each part's stop and any part's error.
	Log *slog.Logger
	// Started, when set, is called once every part's goroutine has been
	// started (serve says it serves then).
	Started func()
	// Stopping, when set, is called once when the parts begin to stop.
	Stopping func()
}

// Add appends p: it starts after every part added before it and stops
// before them.
func (g *Group) Add(p Part) { g.parts = append(g.parts, p) }

// Go adds a part that runs fn until ctx ends and never fails.
func (g *Group) Go(name string, fn func(ctx context.Context)) {
	g.Add(Part{Name: name, Run: func(ctx context.Context) error { fn(ctx); return nil }})
}

// Run starts every part, each in its own goroutine with its own context
// (ctx's values, cancelled in its turn to stop), in the order added, and returns once every part has
// stopped. The parts are stopped in reverse order (Stop, then the
// context cancelled, then Run waited for) when ctx ends or when a part's
// Run fails; the error returned is the first part's failure, nil when
// ctx ended.
func (g *Group) Run(ctx context.Context) error {
	type running struct {
		Part
		cancel context.CancelFunc
		done   chan struct{}
	}
	failed := make(chan error, len(g.parts))
	rs := make([]running, 0, len(g.parts))
	// A part's context is cancelled in its turn only, never all at once
	// with ctx; it keeps ctx's values.
	base := context.WithoutCancel(ctx)
	for _, p := range g.parts {
		pctx, cancel := context.WithCancel(base)
		r := running{Part: p, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			if err := p.Run(pctx); err != nil && pctx.Err() == nil {
				failed <- fmt.Errorf("%s: %w", p.Name, err)
			}
		}()
		rs = append(rs, r)
	}
	if g.Started != nil {
		g.Started()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
		if g.Log != nil {
			g.Log.Error("part failed; stopping the others", "err", err)
		}
	}
	if g.Stopping != nil {
		g.Stopping()
	}
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		if r.Stop != nil {
			r.Stop()
		}
		r.cancel()
		<-r.done
		if g.Log != nil {
			g.Log.Debug("stopped", "part", r.Name)
		}
	}
	return err
}
