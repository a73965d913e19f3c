//go:build !linux

package datapath

import (
	"net"
	"time"
)

// setListenerKeepAlive: accepted sockets do not inherit keepalive here;
// the endpoint side still gets it from the dialer.
func setListenerKeepAlive(*net.TCPListener, time.Duration) error { return nil }
