//go:build !linux

package datapath

import (
	"net"
	"time"
)

// sinceLastReceive: unknown here, so idle connections are not reaped.
func sinceLastReceive(*net.TCPConn) (time.Duration, bool) { return 0, false }
