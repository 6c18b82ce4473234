package procfs

import (
	"net"
	"os"
	"slices"
	"testing"
)

// TestTCPListenerPIDs: the holder of a loopback listener is found, and a
// port nobody listens on is ErrNotFound.
func TestTCPListenerPIDs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	pids, err := TCPListenerPIDs(port)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("holders of 127.0.0.1:%d = %v, want to include %d", port, pids, os.Getpid())
	}
	l.Close()
	if pids, err := TCPListenerPIDs(port); err == nil {
		t.Fatalf("closed listener still has holders %v", pids)
	}
}
