//go:build !linux

package datapath

import "syscall"

// connectEarly is nil where Go's connect is kept alone (dialearly_linux.go).
var connectEarly func(network, address string, c syscall.RawConn) error
