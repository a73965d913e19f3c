package datapath

import "golang.org/x/sys/unix"

// setNoDelay sets TCP_NODELAY on fd: on a listening socket the event
// loops accept from, which the connections accepted inherit. Go's Accept
// sets it on each connection; the loops' accept4 does not, and a client
// socket left to Nagle's algorithm holds an endpoint's second small write
// until the client acknowledges the first: a delayed ACK, 40 ms, for a
// server that writes its headers and its body apart.
func setNoDelay(fd int) {
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}
