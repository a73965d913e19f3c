//go:build !linux

package harness

import "encoding/binary"

// gsoBurst: UDP_SEGMENT is Linux's; elsewhere a datagram per call.
func (cl *client) gsoBurst(port, burst int) {
	for range burst {
		cl.seq++
		binary.BigEndian.PutUint64(cl.payload, cl.seq)
		if _, err := cl.udp.WriteToUDPAddrPort(cl.payload, cl.udpTo[port]); err != nil {
			return
		}
	}
}
