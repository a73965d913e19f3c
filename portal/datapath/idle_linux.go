package datapath

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// sinceLastReceive is how long ago c's socket last received data.
func sinceLastReceive(c *net.TCPConn) (time.Duration, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var d time.Duration
	ok := false
	if err := rc.Control(func(fd uintptr) { d, ok = sinceLastReceiveFD(int(fd)) }); err != nil {
		return 0, false
	}
	return d, ok
}

// sinceLastReceiveFD is sinceLastReceive for a raw socket.
func sinceLastReceiveFD(fd int) (time.Duration, bool) {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, false
	}
	return time.Duration(info.Last_data_recv) * time.Millisecond, true
}
