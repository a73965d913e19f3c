//go:build unix

package datapath

import (
	"net"

	"golang.org/x/sys/unix"
)

// clientGone reports whether the client closed or reset its connection,
// without taking any of the bytes it sent: a connection still dialing
// its endpoint stops when nobody waits for it any more.
func clientGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Control(func(fd uintptr) { gone = clientGoneFD(int(fd)) })
	return gone
}

// clientGoneFD is clientGone for a raw socket.
func clientGoneFD(fd int) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n == 0 && err == nil || err != nil && err != unix.EAGAIN && err != unix.EINTR
}
