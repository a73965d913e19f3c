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
	interval, count := keepAliveProbes(idle)
	var sockErr error
	if err := rc.Control(func(fd uintptr) {
		for _, o := range []struct{ level, opt, v int }{
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(max(idle/time.Second, 1))},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(max(interval/time.Second, 1))},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, count},
		} {
			if sockErr = unix.SetsockoptInt(int(fd), o.level, o.opt, o.v); sockErr != nil {
				return
			}
		}
	}); err != nil {
		return err
	}
	return sockErr
}
