package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestReadKeys: the key reader quits on q, ignores other keys, and returns
// when its context ends though no key comes (the view ended some other
// way): it never outlives runTop.
func TestReadKeys(t *testing.T) {
	run := func(ctx context.Context, in *os.File) (chan error, chan struct{}) {
		errc, quit := make(chan error, 1), make(chan struct{})
		go func() { errc <- readKeys(ctx, int(in.Fd()), func() { close(quit) }) }()
		return errc, quit
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()

	errc, quit := run(context.Background(), r)
	if _, err := w.Write([]byte("xz")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-quit:
		t.Fatal("quit on a key that is not q")
	case err := <-errc:
		t.Fatalf("returned on a key that is not q: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := w.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end the reader")
	}
	select {
	case <-quit:
	default:
		t.Fatal("q ended the reader without quitting")
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc, quit = run(ctx, r)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader outlived its context")
	}
	select {
	case <-quit:
		t.Fatal("a cancelled reader called quit")
	default:
	}

	// The terminal going away ends it with an error.
	errc, _ = run(context.Background(), r)
	_ = w.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("end of input gave no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader outlived its input")
	}
}
