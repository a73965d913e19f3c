package datapath

import (
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// transparentControl prepares a socket to dial from a client's address:
// IP_TRANSPARENT (IPV6_TRANSPARENT) lets it bind an address that is not
// the node's, IP_BIND_ADDRESS_NO_PORT leaves the source port to the
// connect of a TCP socket (which picks one free for that destination, so
// a busy client address does not run out of ports), and TransparentMark lets the kernel
// rules send the replies back to this socket. IP_TRANSPARENT and SO_MARK
// need CAP_NET_ADMIN.
func transparentControl(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = setTransparent(int(fd), network == "tcp6" || network == "udp6", network == "tcp4" || network == "tcp6")
	})
	if err != nil {
		return err
	}
	return serr
}

// setTransparent sets transparentControl's options on fd, an IPv6 socket
// when v6; IP_BIND_ADDRESS_NO_PORT only on a TCP one.
func setTransparent(fd int, v6, tcp bool) error {
	level, opt := unix.SOL_IP, unix.IP_TRANSPARENT
	if v6 {
		level, opt = unix.SOL_IPV6, unix.IPV6_TRANSPARENT
	}
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return fmt.Errorf("setsockopt transparent: %w", err)
	}
	if tcp {
		if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
			return fmt.Errorf("setsockopt IP_BIND_ADDRESS_NO_PORT: %w", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, TransparentMark); err != nil {
		return fmt.Errorf("setsockopt SO_MARK: %w", err)
	}
	return nil
}

// bindTransparent prepares a raw TCP socket (the event loops') as
// transparentControl does a Go one, and binds it to src, port 0.
func bindTransparent(fd int, v6 bool, src netip.Addr) error {
	if err := setTransparent(fd, v6, true); err != nil {
		return err
	}
	var sa unix.Sockaddr
	switch {
	case v6:
		sa = &unix.SockaddrInet6{Addr: src.As16()}
	case src.Unmap().Is4():
		sa = &unix.SockaddrInet4{Addr: src.Unmap().As4()}
	default:
		return fmt.Errorf("bind %s: not an IPv4 address, the endpoint's family", src)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}
