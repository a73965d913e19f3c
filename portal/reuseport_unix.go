//go:build unix

package portal

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// reusePort sets SO_REUSEPORT on a portal socket before it binds, so the
// next kproxy process can bind the same addresses while this one still
// serves (a rolling update with overlap): the kernel spreads new
// connections over both until this one closes its sockets, and with
// net.ipv4.tcp_migrate_req the connections queued on a closing socket
// move to the successor's instead of being reset. Only a process of the
// same user can join the group, so an unprivileged process cannot share
// root's proxy ports.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}

// socketOptions are a portal socket's options before it binds:
// SO_REUSEPORT, and SO_MARK when mark is not 0.
func socketOptions(mark int) func(network, address string, c syscall.RawConn) error {
	if mark == 0 {
		return reusePort
	}
	return func(network, address string, c syscall.RawConn) error {
		if err := reusePort(network, address, c); err != nil {
			return err
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set SO_MARK: %w", serr)
		}
		return nil
	}
}

// probeShared binds (without listening, so no connection can land on it)
// a socket with SO_REUSEPORT to host:port: it succeeds on a free port and
// on one the previous kproxy process still holds, and fails on a port
// anyone else holds.
func probeShared(network, host string, port int) error {
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("probe %s: not an IP address", host)
	}
	typ := unix.SOCK_STREAM
	if network == "udp" {
		typ = unix.SOCK_DGRAM
	}
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := ip.To4(); ip4 != nil {
		sa = &unix.SockaddrInet4{Port: port, Addr: [4]byte(ip4)}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: port, Addr: [16]byte(ip.To16())}
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe %s/%d: %w", network, port, err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return fmt.Errorf("probe %s/%d: %w", network, port, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("probe %s/%d: %w", network, port, err)
	}
	return nil
}
