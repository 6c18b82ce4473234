package procfs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	prom "github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tcpListen is the st column of a listening socket in /proc/net/tcp*.
const tcpListen = 0x0A

// TCPPeerPID finds the process at the other end of a local TCP connection.
//
// clientAddr and serverAddr are as the server sees them (its RemoteAddr and
// LocalAddr). The client's socket is the one in /proc/net/tcp or
// /proc/net/tcp6 whose local address is clientAddr and whose remote address
// is serverAddr; its uid column gives uid. The pid is the process holding
// that socket's inode open (a scan of /proc/*/fd); when several processes
// share it (inherited across fork), the highest pid is returned. Addresses
// are compared with IPv4-mapped IPv6 addresses unmapped, so a dual-stack
// listener's "::ffff:127.0.0.1" finds an AF_INET client and vice versa.
//
// The client must be in this network namespace and alive. Errors wrap
// ErrNotFound when no socket or no holder matches; processes whose fds
// cannot be read (other users', without privilege) are skipped.
func TCPPeerPID(clientAddr, serverAddr netip.AddrPort) (pid int, uid int, err error) {
	pids, uid, err := TCPPeerPIDs(clientAddr, serverAddr)
	if err != nil {
		return 0, uid, err
	}
	return pids[len(pids)-1], uid, nil
}

// TCPPeerPIDs is TCPPeerPID returning every process that holds the client's
// socket, in ascending pid order (a socket inherited across fork, or passed
// with SCM_RIGHTS, has several): a guard must judge them all.
func TCPPeerPIDs(clientAddr, serverAddr netip.AddrPort) (pids []int, uid int, err error) {
	want := tcpPair{local: unmapAP(clientAddr), remote: unmapAP(serverAddr)}
	// Ask the kernel for exactly this socket (sock_diag over netlink): tens
	// of microseconds, where formatting all of /proc/net/tcp costs
	// milliseconds on a busy host. /proc/net/tcp{,6} remains the fallback
	// (no netlink, or an AF_INET6 socket using mapped addresses).
	if sk, err := netlink.SocketGet(
		&net.TCPAddr{IP: want.local.Addr().AsSlice(), Port: int(want.local.Port())},
		&net.TCPAddr{IP: want.remote.Addr().AsSlice(), Port: int(want.remote.Port())},
	); err == nil && sk.INode != 0 && sk.State != tcpListen {
		pids, err = socketHolders(uint64(sk.INode))
		if err != nil {
			return nil, int(sk.UID), fmt.Errorf("procfs: tcp peer %s→%s: %w", clientAddr, serverAddr, err)
		}
		return pids, int(sk.UID), nil
	}
	var inode uint64
	found := false
	var errs []error
	for _, name := range []string{"tcp", "tcp6"} {
		path := procRoot + "/net/" + name
		data, rerr := os.ReadFile(path)
		if rerr != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", path, rerr))
			continue
		}
		ino, u, ok, perr := findTCPSocket(data, want)
		if perr != nil {
			errs = append(errs, fmt.Errorf("parse %s: %w", path, perr))
			continue
		}
		if ok {
			inode, uid, found = ino, u, true
			break
		}
	}
	if !found {
		if len(errs) == 2 {
			return nil, 0, fmt.Errorf("procfs: tcp peer %s→%s: %w", clientAddr, serverAddr, errors.Join(errs...))
		}
		return nil, 0, fmt.Errorf("procfs: tcp peer %s→%s: no socket in /proc/net/tcp{,6}: %w", clientAddr, serverAddr, ErrNotFound)
	}
	pids, err = socketHolders(inode)
	if err != nil {
		return nil, uid, fmt.Errorf("procfs: tcp peer %s→%s: %w", clientAddr, serverAddr, err)
	}
	return pids, uid, nil
}

type tcpPair struct{ local, remote netip.AddrPort }

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// tcpRow is one socket line of /proc/net/tcp or tcp6.
type tcpRow struct {
	local, remote netip.AddrPort // as printed (IPv4-mapped addresses not unmapped)
	state         uint64         // st: 0x0A is LISTEN
	uid           int
	inode         uint64 // 0 for TIME_WAIT and orphans (no owner)
}

// tcpRows calls fn for each well-formed socket line of the text of
// /proc/net/tcp or tcp6 (header and malformed lines skipped, never a
// panic) until fn returns false, and returns the scanner's error.
func tcpRows(data []byte, fn func(r tcpRow) bool) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
		if len(f) < 10 {
			continue
		}
		local, err1 := parseHexAddrPort(f[1])
		remote, err2 := parseHexAddrPort(f[2])
		st, err3 := strconv.ParseUint(f[3], 16, 8)
		uid, err4 := strconv.Atoi(f[7])
		ino, err5 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
			continue
		}
		if !fn(tcpRow{local: local, remote: remote, state: st, uid: uid, inode: ino}) {
			break
		}
	}
	return sc.Err()
}

// findTCPSocket scans the text of /proc/net/tcp or tcp6 for a non-listening
// socket with the wanted endpoints and a non-zero inode. Malformed lines are
// skipped; it never panics.
func findTCPSocket(data []byte, want tcpPair) (inode uint64, uid int, ok bool, err error) {
	err = tcpRows(data, func(r tcpRow) bool {
		if unmapAP(r.local) != want.local || unmapAP(r.remote) != want.remote || r.state == tcpListen || r.inode == 0 {
			return true
		}
		inode, uid, ok = r.inode, r.uid, true
		return false
	})
	if ok {
		err = nil
	}
	return inode, uid, ok, err
}

// parseHexAddrPort parses "0100007F:1F90" (IPv4) or a 32-hex-digit IPv6
// address and port as the kernel prints them: the address as 32-bit words
// in host byte order, the port as a big-endian number.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no ':' in %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port in %q: %w", s, err)
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address in %q: %w", s, err)
	}
	if len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("address in %q has %d bytes", s, len(raw))
	}
	// Each 32-bit word was printed as a host-order integer: convert back to
	// network byte order.
	for i := 0; i+4 <= len(raw); i += 4 {
		w := binary.BigEndian.Uint32(raw[i:]) // the value as printed
		binary.NativeEndian.PutUint32(raw[i:], w)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// socketHolders returns every pid with an fd open on socket inode ino, in
// ascending order (a full scan of /proc/*/fd through prometheus/procfs's
// AllProcs and Proc.FileDescriptorTargets; processes whose fds cannot be
// read are skipped).
func socketHolders(ino uint64) ([]int, error) {
	pfs, err := prom.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	all, err := pfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", procRoot, err)
	}
	sort.Sort(all)
	target := "socket:[" + strconv.FormatUint(ino, 10) + "]"
	var out []int
	for _, p := range all {
		links, err := p.FileDescriptorTargets()
		if err != nil {
			continue // gone, or not ours to read
		}
		if slices.Contains(links, target) {
			out = append(out, p.PID)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no process holds socket inode %d: %w", ino, ErrNotFound)
	}
	return out, nil
}

// UnixPeerCred returns the pid and uid of the process at the other end of a
// connected unix socket, as the kernel recorded them at connect(2) or
// socketpair(2) time (SO_PEERCRED). The pid is the connecting process even
// if it has since passed the socket on.
func UnixPeerCred(conn *net.UnixConn) (pid, uid int, err error) {
	if conn == nil {
		return 0, 0, errors.New("procfs: unix peer cred: nil conn")
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("procfs: unix peer cred: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if cerr := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); cerr != nil {
		return 0, 0, fmt.Errorf("procfs: unix peer cred: %w", cerr)
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("procfs: unix peer cred: getsockopt SO_PEERCRED: %w", serr)
	}
	if cred.Pid <= 0 {
		return 0, int(cred.Uid), fmt.Errorf("procfs: unix peer cred: peer pid unknown (%d): %w", cred.Pid, ErrNotFound)
	}
	return int(cred.Pid), int(cred.Uid), nil
}
