package datapath

import (
	"net"
	"sync"
)

var datagramBuffers = sync.Pool{New: func() any {
	b := make([]byte, MaxDatagram)
	return &b
}}

// readDatagram reads one datagram from conn into a pooled buffer and hands
// it to handle. Windows has no readiness wait without a read, so the
// buffer is held while waiting.
func readDatagram(conn *net.UDPConn, handle func([]byte) error) error {
	bp := datagramBuffers.Get().(*[]byte)
	defer datagramBuffers.Put(bp)
	n, err := conn.Read(*bp)
	if err != nil {
		return err
	}
	return handle((*bp)[:n])
}
