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
	var info *unix.TCPInfo
	var infoErr error
	if err := rc.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || infoErr != nil {
		return 0, false
	}
	return time.Duration(info.Last_data_recv) * time.Millisecond, true
}
