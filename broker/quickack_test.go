//go:build linux

package broker

import (
	"bytes"
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQuickAck: a TCP connection wrapped by QuickAck reads as before, is
// in quick-ACK mode after each read (TCP_QUICKACK reads back 1), keeps
// CloseWrite, and a copy out of it (WriteTo) goes through its Read; a
// connection that is not TCP is returned as it is.
func TestQuickAck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := QuickAck(raw)
	defer c.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	quick := func() int {
		var v int
		rc, err := raw.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		_ = rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK) })
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Make the kernel leave quick-ACK mode first: an exchange both ways
	// puts the connection in interactive ("pingpong") mode.
	for i := 0; i < 3; i++ {
		if _, err := srv.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			t.Fatalf("read %q %v", b, err)
		}
		if got := quick(); got != 1 {
			t.Fatalf("TCP_QUICKACK after a read = %d, want 1", got)
		}
		if _, err := c.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(srv, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.(interface{ CloseWrite() error }); !ok {
		t.Fatal("the wrapped connection lost CloseWrite")
	}
	// A copy out of it (io.Copy uses WriterTo) still reads through Read.
	payload := bytes.Repeat([]byte("0123456789"), 100_000)
	go func() {
		_, _ = srv.Write(payload)
		_ = srv.(*net.TCPConn).CloseWrite()
	}()
	var out bytes.Buffer
	if _, err := io.Copy(&out, c); err != nil || !bytes.Equal(out.Bytes(), payload) {
		t.Fatalf("copied %d bytes (%v), want %d intact", out.Len(), err, len(payload))
	}
	if got := quick(); got != 1 {
		t.Fatalf("TCP_QUICKACK after a copy = %d, want 1", got)
	}

	u1, u2 := net.Pipe()
	defer u1.Close()
	defer u2.Close()
	if QuickAck(u1) != u1 {
		t.Fatal("a connection that is not TCP was wrapped")
	}
}
