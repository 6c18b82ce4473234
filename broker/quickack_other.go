//go:build !linux

package broker

import "net"

// QuickAck returns c: TCP_QUICKACK is Linux's (see quickack_linux.go);
// elsewhere the connection is used as it is.
func QuickAck(c net.Conn) net.Conn { return c }
