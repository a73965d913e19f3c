package datapath

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h),
// which x/sys/unix does not name.
const ip6tSoOriginalDst = 80

// originalDst is the destination a connection had before kernel rules
// redirected it to the proxy port (conntrack's SO_ORIGINAL_DST). ipv4 is
// the connection's family: an IPv4 client on a dual-stack socket is asked
// at the IPv4 level.
func originalDst(c *net.TCPConn, ipv4 bool) (*net.TCPAddr, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var addr *net.TCPAddr
	var serr error
	err = rc.Control(func(fd uintptr) {
		if ipv4 {
			// struct sockaddr_in (16 bytes) fits IPv6Mreq (20 bytes).
			m, e := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if e != nil {
				serr = e
				return
			}
			b := m.Multiaddr[:]
			addr = &net.TCPAddr{IP: net.IP(append([]byte(nil), b[4:8]...)), Port: int(binary.BigEndian.Uint16(b[2:4]))}
			return
		}
		// struct sockaddr_in6 (28 bytes) fits IPv6MTUInfo (32 bytes).
		m, e := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSoOriginalDst)
		if e != nil {
			serr = e
			return
		}
		// The port is in network order, as the kernel wrote it.
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&m.Addr.Port))[:])
		addr = &net.TCPAddr{IP: net.IP(append([]byte(nil), m.Addr.Addr[:]...)), Port: int(port)}
	})
	if err != nil {
		return nil, err
	}
	return addr, serr
}
