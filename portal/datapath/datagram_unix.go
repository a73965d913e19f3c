//go:build !windows && !linux

// Where UDP is read one datagram per system call (see udpbatch_other.go).

package datapath

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// datagramBuffers are shared by every flow: a flow waiting for its
// endpoint holds no buffer (else each of a flood of flows would hold
// MaxDatagram).
var datagramBuffers = sync.Pool{New: func() any {
	b := make([]byte, MaxDatagram)
	return &b
}}

// readDatagram waits, without a buffer, until conn (a connected UDP
// socket) has a datagram, then reads it into a pooled buffer and hands it
// to handle. It returns conn's error (deadline, closed), the read's, or
// handle's.
func readDatagram(conn *net.UDPConn, handle func([]byte) error) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	err = rc.Read(func(fd uintptr) bool {
		bp := datagramBuffers.Get().(*[]byte)
		defer datagramBuffers.Put(bp)
		for {
			n, err := syscall.Read(int(fd), *bp)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return false // nothing yet: wait for readability, holding no buffer
			case err != nil:
				opErr = err
			default:
				opErr = handle((*bp)[:n])
			}
			return true
		}
	})
	if err != nil {
		return err
	}
	return opErr
}
