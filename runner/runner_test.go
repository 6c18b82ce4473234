package runner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// record is what the parts of a test group did, in order.
type record struct {
	mu  sync.Mutex
	log []string
}

func (r *record) add(s string)  { r.mu.Lock(); r.log = append(r.log, s); r.mu.Unlock() }
func (r *record) get() []string { r.mu.Lock(); defer r.mu.Unlock(); return slices.Clone(r.log) }

// part runs until its context ends, recording its start, its Stop and
// its end; a part whose started channel is closed once it runs.
func part(r *record, name string, started chan<- struct{}) Part {
	return Part{
		Name: name,
		Run: func(ctx context.Context) error {
			r.add("run " + name)
			started <- struct{}{}
			<-ctx.Done()
			r.add("end " + name)
			return nil
		},
		Stop: func() { r.add("stop " + name) },
	}
}

func TestStopsInReverseOrder(t *testing.T) {
	var r record
	var g Group
	started := make(chan struct{}, 3)
	for _, n := range []string{"a", "b", "c"} {
		g.Add(part(&r, n, started))
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	for range 3 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after ctx ended, want nil", err)
	}
	want := []string{"stop c", "end c", "stop b", "end b", "stop a", "end a"}
	got := r.get()
	if !slices.Equal(got[3:], want) {
		t.Errorf("stop order %q, want %q", got[3:], want)
	}
}

// A part that fails stops the others in reverse order, and Run returns
// its error named by the part; a part that finishes with nil does not.
func TestFailureStopsTheOthers(t *testing.T) {
	var r record
	var g Group
	started := make(chan struct{}, 3)
	g.Add(part(&r, "a", started))
	g.Add(Part{Name: "done", Run: func(context.Context) error { return nil }})
	g.Add(part(&r, "b", started))
	boom := errors.New("boom")
	fail := make(chan struct{})
	g.Add(Part{Name: "bad", Run: func(ctx context.Context) error { <-fail; return boom }})
	g.Add(part(&r, "c", started))
	done := make(chan error, 1)
	go func() { done <- g.Run(t.Context()) }()
	for range 3 {
		<-started
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while no part failed (one finished with nil)", err)
	case <-time.After(50 * time.Millisecond): // a return would be at once
	}
	close(fail)
	err := <-done
	if !errors.Is(err, boom) || err.Error() != "bad: boom" {
		t.Fatalf("Run = %v, want bad: boom", err)
	}
	want := []string{"stop c", "end c", "stop b", "end b", "stop a", "end a"}
	if got := r.get(); !slices.Equal(got[3:], want) {
		t.Errorf("stop order %q, want %q", got[3:], want)
	}
}
