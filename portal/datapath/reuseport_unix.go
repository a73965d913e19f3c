//go:build unix

package datapath

import (
	"fmt"
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
		if err := c.Control(func(fd uintptr) { serr = setMark(int(fd), mark) }); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set SO_MARK: %w", serr)
		}
		return nil
	}
}

// breakSocket shuts a listening socket down under its serving goroutine,
// as a socket broken by the kernel or a stray close would be: accept
// fails with EINVAL, and the Portal is restarted and opens it again.
func breakSocket(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_RDWR) }); err != nil {
		return err
	}
	return serr
}
