package datapath

import "golang.org/x/sys/unix"

// setMark sets SO_MARK, which the kernel portal's rules match on.
func setMark(fd, mark int) error {
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, mark)
}
