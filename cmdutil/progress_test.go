package cmdutil

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetmgr/fleetmgr/iostreams"
)

// TestWaiterTellsEveryTwoSeconds: piped, a wait says what it waits for,
// the time elapsed and the timeout once per ProgressEvery, nothing before
// the first; Set with restart starts the clock again; after Done nothing
// more is said. Its timing is all in process, so it runs in a synctest
// bubble: the sleeps below advance the bubble's fake clock and take no
// real time.
func TestWaiterTellsEveryTwoSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ios, _, errOut := iostreams.Test()
		w := Wait(ios, "fleetd to answer /healthz", 30*time.Second)
		done := false
		defer func() {
			if !done { // a failed check: the Waiter's goroutine must end before the bubble does
				w.Done()
			}
		}()
		said := func() string {
			synctest.Wait() // the Waiter's goroutine is blocked on its ticker again
			w.mu.Lock()
			defer w.mu.Unlock()
			return errOut.String()
		}

		time.Sleep(ProgressEvery - time.Millisecond) // fake clock
		if got := said(); got != "" {
			t.Fatalf("said %q before %s", got, ProgressEvery)
		}
		time.Sleep(ProgressEvery + 2*time.Millisecond) // fake clock: 4 s on
		want := "fleetmgr: waiting for fleetd to answer /healthz — 2s elapsed, timeout 30s\n" +
			"fleetmgr: waiting for fleetd to answer /healthz — 4s elapsed, timeout 30s\n"
		if got := said(); got != want {
			t.Fatalf("after 4 s said:\n%s\nwant:\n%s", got, want)
		}

		errOut.Reset()
		w.Set("the herdr session", 0, true)
		time.Sleep(ProgressEvery) // fake clock: one tick after the restart
		if got, want := said(), "fleetmgr: waiting for the herdr session — 2s elapsed\n"; got != want {
			t.Fatalf("after Set with restart said %q, want %q", got, want)
		}

		errOut.Reset()
		w.Done()
		done = true
		time.Sleep(3 * ProgressEvery) // fake clock
		if got := said(); got != "" {
			t.Fatalf("said %q after Done", got)
		}
		if strings.Contains(errOut.String(), "\x1b[") {
			t.Fatal("escape codes on a pipe")
		}
	})
}
