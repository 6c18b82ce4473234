package cmdutil

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/iostreams"
)

// ProgressEvery is how often a wait tells what it waits for (issue 24:
// every wait longer than 2 s says so at least every 2 s).
const ProgressEvery = 2 * time.Second

// Waiter tells, on stderr, what a verb waits for while it waits longer
// than ProgressEvery, every ProgressEvery: "fleetmgr: kb: waiting for
// fleetd to answer /healthz — 4s elapsed, timeout 30s". On a terminal
// it is one line rewritten in place and erased when the wait ends (or
// the verb prints, Pause); piped, it is a plain line per tick. Start
// one with Wait; its goroutine ends with Done.
type Waiter struct {
	w        io.Writer
	tty      bool
	mu       sync.Mutex
	what     string
	timeout  time.Duration
	since    time.Time
	shown    bool // a TTY line is on screen
	stop     chan struct{}
	finished chan struct{}
}

// Wait starts a Waiter on ios's stderr waiting for what (timeout 0: none
// said).
func Wait(ios *iostreams.IOStreams, what string, timeout time.Duration) *Waiter {
	w := &Waiter{w: ios.ErrOut, tty: ios.IsStderrTTY(), what: what, timeout: timeout, since: time.Now(),
		stop: make(chan struct{}), finished: make(chan struct{})}
	go w.run()
	return w
}

// Set changes what is awaited (a step ended, the next is awaited), its
// clock going on; with restart the clock starts again (a new fleet). What
// is on a terminal line is erased.
func (w *Waiter) Set(what string, timeout time.Duration, restart bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eraseLocked()
	w.what, w.timeout = what, timeout
	if restart {
		w.since = time.Now()
	}
}

// Pause erases a terminal line, for the verb to print a line of its own.
func (w *Waiter) Pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eraseLocked()
}

// Hold erases a terminal line and runs fn (a question to the operator and
// its answer) with the Waiter silent; the wait's clock starts again after
// it (the operator's time is not the wait's).
func (w *Waiter) Hold(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eraseLocked()
	fn()
	w.since = time.Now()
}

func (w *Waiter) eraseLocked() {
	if w.shown {
		fmt.Fprint(w.w, "\r\x1b[K")
		w.shown = false
	}
}

// Done stops the Waiter and erases its terminal line.
func (w *Waiter) Done() {
	close(w.stop)
	<-w.finished
	w.Pause()
}

func (w *Waiter) run() {
	defer close(w.finished)
	t := time.NewTicker(ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		el := time.Since(w.since)
		if el >= ProgressEvery-100*time.Millisecond {
			line := fmt.Sprintf("fleetmgr: waiting for %s — %s elapsed", w.what, el.Round(time.Second))
			if w.timeout > 0 {
				line += fmt.Sprintf(", timeout %s", w.timeout)
			}
			if w.tty {
				fmt.Fprint(w.w, "\r\x1b[K"+line)
				w.shown = true
			} else {
				fmt.Fprintln(w.w, line)
			}
		}
		w.mu.Unlock()
	}
}
