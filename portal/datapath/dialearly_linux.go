package datapath

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// connectEarly is the endpoint dialers' Control: it starts the connect
// itself, so that Go's own connect, which follows, finds it done. On a
// node a connect to a local endpoint (loopback, a veth) completes before
// the system call returns: the SYN and the SYN-ACK are handled on the
// way. Go's dial still sees EINPROGRESS and waits for the poller to
// report the socket writable, which parks the goroutine, arms a timer and
// a context callback for the dial timeout and costs a wakeup, on every
// proxied connection. The second connect returns 0 for a connection
// already made, the pending error (ECONNREFUSED) for one refused
// meanwhile, and EALREADY for one still in progress, which Go then waits
// for with its timeout as before.
func connectEarly(network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr().Zone() != "" {
		return nil // Go's connect alone
	}
	var sa unix.Sockaddr
	switch {
	case network == "tcp4" && ap.Addr().Unmap().Is4():
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	case network == "tcp6":
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	default:
		return nil
	}
	// Errors are left to Go's connect, which gets them again (a refusal
	// pending on the socket) or makes its own attempt.
	c.Control(func(fd uintptr) { unix.Connect(int(fd), sa) })
	return nil
}
