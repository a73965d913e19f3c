//go:build !linux

package datapath

import (
	"fmt"
	"net"
)

// originalDst: only Linux's conntrack tells a redirected connection's
// original destination.
func originalDst(c *net.TCPConn, ipv4 bool) (*net.TCPAddr, error) {
	return nil, fmt.Errorf("original destination of a redirected connection: not supported on this OS")
}
