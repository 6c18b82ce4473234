package nsrelay

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkRelay measures a connection through both halves (run in this
// process, Inner on 127.0.0.2) against the same echo server dialled
// directly: ping-pong round trips of 64 bytes, and 1 MiB echoed (b.SetBytes
// gives MB/s).
func BenchmarkRelay(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	startPair(b, []int{port}, []int{port}, 0)
	for _, via := range []struct{ name, addr string }{
		{"direct", fmt.Sprintf("127.0.0.1:%d", port)},
		{"relay", fmt.Sprintf("127.0.0.2:%d", port)},
	} {
		for _, size := range []int{64, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%d", via.name, size), func(b *testing.B) {
				c, err := net.DialTimeout("tcp", via.addr, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				buf, back := make([]byte, size), make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					errc := make(chan error, 1)
					go func() { _, err := c.Write(buf); errc <- err }()
					if _, err := io.ReadFull(c, back); err != nil {
						b.Fatal(err)
					}
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
