package cmdutil

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext is parent, cancelled by the first SIGINT (Ctrl-C) or
// SIGTERM; after that first one the signals have their default action
// again, so a second Ctrl-C ends a command stuck where it does not watch
// its context (a blocking open, a peer that does not answer) as it would
// end any program, instead of being swallowed. stop releases the signals
// and cancels the context; call it once the command returned.
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // idempotent: restores the default action
	}()
	return ctx, stop
}
