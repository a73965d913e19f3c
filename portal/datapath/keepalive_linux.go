package datapath

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setListenerKeepAlive turns on TCP keepalive on a listening socket: Linux
// copies it to every accepted socket, so accepting costs no extra
// syscalls (Go's per-connection KeepAlive would make four).
func setListenerKeepAlive(ln *net.TCPListener, idle time.Duration) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var sockErr error
	if err := rc.Control(func(fd uintptr) { sockErr = setKeepAliveFD(int(fd), idle) }); err != nil {
		return err
	}
	return sockErr
}

// setKeepAliveFD turns on keepalive probes on a socket after idle.
func setKeepAliveFD(fd int, idle time.Duration) error {
	interval, count := keepAliveProbes(idle)
	for _, o := range []struct{ level, opt, v int }{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(max(idle/time.Second, 1))},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(max(interval/time.Second, 1))},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, count},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			return err
		}
	}
	return nil
}
