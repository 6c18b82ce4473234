package wait

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of ending the test, so the failure paths can be checked.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = strings.TrimSpace(strings.ReplaceAll(format, "%", "")) // format is enough to tell which path
	panic(f)
}

func catch(f *fakeT, fn func()) (failed bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != f {
				panic(r)
			}
			failed = true
		}
	}()
	fn()
	return false
}

func TestFor(t *testing.T) {
	var n atomic.Int32
	took := For(t, 5*time.Second, "the third check", Bool(func() bool { return n.Add(1) >= 3 }))
	if n.Load() != 3 || took > time.Second {
		t.Fatalf("checks %d, took %s", n.Load(), took)
	}
	f := &fakeT{TB: t}
	if !catch(f, func() { For(f, 20*time.Millisecond, "nothing", func() (bool, string) { return false, "still no" }) }) {
		t.Fatal("For of a condition that never holds did not fail")
	}
	if !strings.Contains(f.msg, "last seen") {
		t.Errorf("failure message %q does not give the last state", f.msg)
	}
}

func TestNever(t *testing.T) {
	Never(t, 20*time.Millisecond, "nothing", Bool(func() bool { return false }))
	f := &fakeT{TB: t}
	var n atomic.Int32
	if !catch(f, func() { Never(f, 5*time.Second, "the second check", Bool(func() bool { return n.Add(1) >= 2 })) }) {
		t.Fatal("Never of a condition that comes to hold did not fail")
	}
}

func TestLogLine(t *testing.T) {
	var log atomic.Value
	log.Store("a\n")
	firstRead := make(chan struct{})
	var reads atomic.Int32
	go func() { // the log grows only after LogLine has read it once without the line
		<-firstRead
		log.Store("a\nready on 127.0.0.1\n")
	}()
	got := LogLine(t, 5*time.Second, func() string {
		if reads.Add(1) == 1 {
			defer close(firstRead)
		}
		return log.Load().(string)
	}, "ready on")
	if !strings.Contains(got, "ready on 127.0.0.1") {
		t.Fatalf("LogLine returned %q", got)
	}
	f := &fakeT{TB: t}
	if !catch(f, func() { LogLine(f, 10*time.Millisecond, func() string { return "x" }, "never") }) {
		t.Fatal("LogLine of an absent line did not fail")
	}
}

func TestUntil(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, time.Minute, Bool(func() bool { return false })); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until with a cancelled context: %v", err)
	}
	if err := Until(context.Background(), 10*time.Millisecond, func() (bool, string) { return false, "x=1" }); err == nil || !strings.Contains(err.Error(), "x=1") {
		t.Fatalf("Until past its time: %v", err)
	}
	if err := Until(context.Background(), time.Second, Bool(func() bool { return true })); err != nil {
		t.Fatal(err)
	}
}
