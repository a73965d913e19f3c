package datapath

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// acceptPeer accepts a connection from the nonblocking listening socket
// fd and returns its descriptor (nonblocking, close-on-exec) and the
// peer's address, decoded here: x/sys's Accept4 asks the listener's
// protocol (getsockopt SO_PROTOCOL, to tell L2TP from IP) on every
// accept, a system call per connection. accept4 on a nonblocking socket
// does not sleep, so it skips the scheduler's bookkeeping.
func acceptPeer(fd int) (int, netip.Addr, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.Addr{}, e
	}
	switch rsa.Addr.Family {
	case unix.AF_INET:
		return int(r), netip.AddrFrom4((*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa)).Addr), nil
	case unix.AF_INET6:
		return int(r), netip.AddrFrom16((*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa)).Addr).Unmap(), nil
	}
	return int(r), netip.Addr{}, nil
}
