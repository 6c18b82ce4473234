package broker

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// QuickAck returns c with TCP_QUICKACK set again after every read that
// returned data, so this side acknowledges what the broker sent at once
// instead of after Linux's delayed-ACK timer (40 ms at least; tcp(7)).
// Why: a broker whose sockets keep Nagle's algorithm on — LavinMQ 1.0 by
// default ([main] tcp_nodelay = false in lavinmq.ini) — holds a second
// small frame until the first is acknowledged, so each request/reply
// exchange over it (a delivery, then a publisher confirm, then the next
// delivery) waited for that timer: a federation call took 44 ms instead of
// 0.7 ms (docs/ARCHITECTURE.md "Brokers: RabbitMQ and LavinMQ"). The
// option is not sticky (the kernel leaves quick-ACK mode on its own), hence
// once per read; it costs one setsockopt. A connection that is not TCP is
// returned as it is. The result keeps *net.TCPConn's other methods
// (CloseWrite, deadlines); its WriteTo reads through Read, so a copy out
// of it re-arms the option too.
func QuickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quickAckConn{TCPConn: tc, rc: rc}
}

type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// Read reads from the connection and re-arms TCP_QUICKACK.
func (c *quickAckConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if n > 0 {
		_ = c.rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })
	}
	return n, err
}

// WriteTo copies the connection to w through Read (the embedded
// *net.TCPConn's WriteTo would read around it).
func (c *quickAckConn) WriteTo(w io.Writer) (int64, error) {
	return io.Copy(w, struct{ io.Reader }{c})
}
