package datapath

import (
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// enablePktinfo asks the kernel to report each datagram's destination
// address on a wildcard UDP socket. Replies must leave from that address:
// traffic redirected by kernel portal rules is only un-NATed when the reply
// comes from the address the redirect chose, which on a multi-address
// interface is not necessarily the one routing would pick.
func enablePktinfo(c *net.UDPConn) bool {
	ua, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || !ua.IP.IsUnspecified() {
		return false // bound to one address: replies leave from it anyway
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	raw.Control(func(fd uintptr) {
		if ua.IP.To4() != nil && len(ua.IP) == net.IPv4len {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
			return
		}
		// A dual-stack socket reports IPv4 destinations v4-mapped here too.
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		if serr == nil {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		}
	})
	return serr == nil
}

// pktinfoOOBSize is enough control-message space for one pktinfo.
var pktinfoOOBSize = unix.CmsgSpace(unix.SizeofInet6Pktinfo) + unix.CmsgSpace(unix.SizeofInet4Pktinfo)

// replyOOB turns a received pktinfo into the control message that sends a
// reply from the same address (nil when there is none).
func replyOOB(oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			b := make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
			h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
			h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
			h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
			copy(b[unix.CmsgLen(0):], m.Data[:16]) // the address; interface 0: routing picks
			return b
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			var in unix.Inet4Pktinfo
			copy((*[unix.SizeofInet4Pktinfo]byte)(unsafe.Pointer(&in))[:], m.Data)
			out := unix.Inet4Pktinfo{Spec_dst: in.Addr}
			b := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
			h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
			h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
			h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
			copy(b[unix.CmsgLen(0):], (*[unix.SizeofInet4Pktinfo]byte)(unsafe.Pointer(&out))[:])
			return b
		}
	}
	return nil
}
