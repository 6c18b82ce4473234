package procfs

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
)

// ErrNoHolder reports a socket that exists but whose holding process
// cannot be found (its fds are unreadable: another user's).
var ErrNoHolder = errors.New("no readable holder")

// TCPListenerPIDs returns, in ascending order, every process holding a
// listening TCP socket (st 0A in /proc/net/tcp{,6}, remote 0.0.0.0:0 or
// [::]:0) that accepts connections to 127.0.0.1:port: one bound to
// 127.0.0.1, to the IPv4 wildcard, or to the IPv6 wildcard or
// ::ffff:127.0.0.1. A listener inherited across fork has several holders.
// The error wraps ErrNotFound when no such listener exists, and
// ErrNoHolder when one exists but no process holding it could be read
// (another user's, without privilege): those are skipped.
func TCPListenerPIDs(port int) ([]int, error) {
	var inodes []uint64
	for _, name := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(procRoot + "/net/" + name)
		if err != nil {
			continue
		}
		inodes = append(inodes, findListeners(data, port)...)
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("procfs: no listener for 127.0.0.1:%d: %w", port, ErrNotFound)
	}
	seen := map[int]bool{}
	var out []int
	for _, ino := range inodes {
		pids, err := socketHolders(ino)
		if err != nil {
			continue
		}
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("procfs: listener for 127.0.0.1:%d: %w", port, ErrNoHolder)
	}
	sort.Ints(out)
	return out, nil
}

// findListeners scans /proc/net/tcp or tcp6 text for listening sockets that
// accept 127.0.0.1:port and returns their inodes. Malformed lines are
// skipped; it never panics.
func findListeners(data []byte, port int) []uint64 {
	loop := netip.MustParseAddr("127.0.0.1")
	var out []uint64
	_ = tcpRows(data, func(r tcpRow) bool {
		if int(r.local.Port()) != port || r.remote.Port() != 0 || !r.remote.Addr().IsUnspecified() || r.state != tcpListen || r.inode == 0 {
			return true
		}
		if a := r.local.Addr().Unmap(); a != loop && !a.IsUnspecified() {
			return true
		}
		out = append(out, r.inode)
		return true
	})
	return out
}
