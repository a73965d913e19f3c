//go:build !linux

package datapath

import (
	"io"
	"net"
)

// spliceCopy is io.Copy where the kernel has no splice.
func spliceCopy(dst, src *net.TCPConn) (int64, error) { return io.Copy(dst, src) }
