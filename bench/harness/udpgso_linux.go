package harness

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpMaxSegments is the most datagrams one UDP_SEGMENT send carries
// (the kernel's UDP_MAX_SEGMENTS before Linux 6.10), gsoMaxBytes the most
// bytes (an IP packet's 64 KiB less the IPv6 and UDP headers).
const (
	udpMaxSegments = 64
	gsoMaxBytes    = 65535 - 40 - 8
)

// gsoBurst sends burst numbered datagrams to port in UDP_SEGMENT sends of
// up to udpMaxSegments each; a send the kernel refuses leaves its
// datagrams missing, counted as such by the burst.
func (cl *client) gsoBurst(port, burst int) {
	size := len(cl.payload)
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = uint16(size)
	perSend := max(1, min(udpMaxSegments, gsoMaxBytes/size))
	if cap(cl.gsoBuf) < perSend*size {
		cl.gsoBuf = make([]byte, perSend*size)
	}
	for sent := 0; sent < burst; {
		n := min(burst-sent, perSend)
		buf := cl.gsoBuf[:n*size]
		for i := range n {
			cl.seq++
			d := buf[i*size : (i+1)*size]
			copy(d, cl.payload)
			binary.BigEndian.PutUint64(d, cl.seq)
		}
		if _, _, err := cl.udp.WriteMsgUDPAddrPort(buf, oob, cl.udpTo[port]); err != nil {
			return // the rest of the burst: missing
		}
		sent += n
	}
}
