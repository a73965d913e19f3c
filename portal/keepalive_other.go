//go:build !linux

package portal

import (
	"net"
	"time"
)

// setListenerKeepAlive: accepted sockets do not inherit keepalive here;
// the endpoint side still gets it from the dialer.
func setListenerKeepAlive(*net.TCPListener, time.Duration) error { return nil }
