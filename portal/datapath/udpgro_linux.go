package datapath

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"
)

// UDP_GRO: a socket with it on takes what the kernel coalesced as it is,
// many datagrams of one flow in one buffer, the segment size in a control
// message, where otherwise the kernel cuts it up and queues each datagram
// on its own. Coalesced datagrams come from a sender that sends with
// UDP_SEGMENT (QUIC stacks do; on loopback and veth the batch stays whole
// up to the socket) and from a NIC's GRO, which coalesces UDP only for
// sockets that asked for it. Read whole, they go on with UDP_SEGMENT
// (writer.pack): the kernel walks its stack once per batch both ways.

// groOOBSize is the control-message space for the segment size.
var groOOBSize = unix.CmsgSpace(4)

// enableGRO turns UDP_GRO on; false where the kernel lacks it (before
// Linux 5.0), which changes nothing else.
func enableGRO(rc syscall.RawConn) bool {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	}); cerr != nil {
		return false
	}
	return err == nil
}

// groSegment is the segment size a read's control messages give, 0 when
// the datagram came alone. ParseOneSocketControlMessage walks them in
// place: a read with GRO on allocates nothing for them.
func groSegment(oob []byte) int {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4 {
			return int(int32(binary.NativeEndian.Uint32(data)))
		}
		oob = rest
	}
	return 0
}

// appendSegments appends d, cut into datagrams of seg bytes (the last may
// be shorter), to ds.
func appendSegments(ds []datagram, d datagram, seg int) []datagram {
	b := d.b
	for len(b) > 0 {
		n := min(seg, len(b))
		d.b = b[:n:n]
		ds = append(ds, d)
		b = b[n:]
	}
	return ds
}
