//go:build !linux

package datapath

import (
	"io"
	"net"
)

// spliceCopy is io.Copy where the kernel has no splice.
func spliceCopy(dst, src *net.TCPConn, _ *splicePipe) (int64, error) { return io.Copy(dst, src) }

// splicePipe exists on Linux only.
type splicePipe struct{}
