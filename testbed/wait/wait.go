// Package wait is test equipment: the one way tests wait for something to
// happen, instead of sleeping for a guessed time. For polls a condition
// until it holds (failing with what was awaited and the last state seen),
// Never checks that one stays false for a while, LogLine waits for a
// substring in a growing log, and Until is For for code that has a
// context rather than a testing.TB.
//
// Polling starts at 1 ms and doubles to a ceiling of 50 ms, so a
// condition that holds at once costs nothing and one that takes seconds
// costs a few dozen checks. Tests whose timing is entirely in process
// should use testing/synctest instead; these helpers are for waits on
// other processes, sockets and files, where only polling or an event
// source the test subscribes to can tell.
package wait

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Ceiling is the longest pause between two checks of a condition.
const Ceiling = 50 * time.Millisecond

// Cond reports whether what is awaited holds; state, when not empty,
// describes what it saw, for the failure message.
type Cond func() (ok bool, state string)

// Bool adapts a plain predicate to a Cond.
func Bool(f func() bool) Cond { return func() (bool, string) { return f(), "" } }

// For checks cond until it holds and returns how long that took; if d
// passes first, it fails the test with what and cond's last state.
func For(t testing.TB, d time.Duration, what string, cond Cond) time.Duration {
	t.Helper()
	took, last, err := poll(context.Background(), d, cond)
	if err != nil {
		if last != "" {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", d, what, last)
		}
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	return took
}

// Never checks cond for d and fails the test, with what and the state
// cond gave, the first time it holds. It takes d: use it only where the
// claim is that something does not happen within d.
func Never(t testing.TB, d time.Duration, what string, cond Cond) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for {
		if ok, state := cond(); ok {
			if state != "" {
				t.Fatalf("%s happened (after less than %s): %s", what, d, state)
			}
			t.Fatalf("%s happened (after less than %s)", what, d)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, Ceiling)
	}
}

// LogLine waits up to d for read() (a log read again each time, e.g. a
// syncbuf's String or a file) to contain substr, and returns the log at
// that point. On a timeout it fails the test with the log's last lines.
func LogLine(t testing.TB, d time.Duration, read func() string, substr string) string {
	t.Helper()
	var log string
	_, _, err := poll(context.Background(), d, func() (bool, string) {
		log = read()
		return strings.Contains(log, substr), ""
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %q in the log; it ends:\n%s", d, substr, tail(log, 20))
	}
	return log
}

// File reads path as a log for LogLine: its content, or "" while it
// cannot be read.
func File(path string) func() string {
	return func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return string(b)
	}
}

// Until checks cond until it holds, ctx ends, or d passes, whichever is
// first; the error names the cause and cond's last state.
func Until(ctx context.Context, d time.Duration, cond Cond) error {
	_, last, err := poll(ctx, d, cond)
	if err != nil && last != "" {
		return fmt.Errorf("%w; last seen: %s", err, last)
	}
	return err
}

// poll is the loop behind For, LogLine and Until.
func poll(ctx context.Context, d time.Duration, cond Cond) (took time.Duration, last string, err error) {
	start := time.Now()
	deadline := start.Add(d)
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return time.Since(start), state, nil
		}
		last = state
		left := time.Until(deadline)
		if left <= 0 {
			return time.Since(start), last, fmt.Errorf("not within %s", d)
		}
		timer := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return time.Since(start), last, ctx.Err()
		case <-timer.C:
		}
		pause = min(2*pause, Ceiling)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
