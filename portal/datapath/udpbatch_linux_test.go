package datapath

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connectedPair is a socket connected to a receiver on loopback, and that
// receiver.
func connectedPair(t *testing.T) (send, recv *net.UDPConn) {
	t.Helper()
	recv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Close() })
	send, err = net.DialUDP("udp", nil, recv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { send.Close() })
	return send, recv
}

// receiveAll reads len(want) datagrams and checks each, in order.
func receiveAll(t *testing.T, recv *net.UDPConn, want [][]byte) {
	t.Helper()
	buf := make([]byte, MaxDatagram)
	for i, w := range want {
		recv.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := recv.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(want), err)
		}
		if !bytes.Equal(buf[:n], w) {
			t.Fatalf("datagram %d: got %d bytes %.12q, want %d bytes %.12q", i, n, buf[:n], len(w), w)
		}
	}
}

// sized is datagram i of n bytes, its index first so reordering shows.
func sized(i, n int) []byte {
	b := bytes.Repeat([]byte{byte('a' + i%26)}, n)
	copy(b, fmt.Sprintf("%03d", i))
	return b[:n]
}

// Runs of equal sizes go as GSO sends, cut back into the same datagrams,
// in order, whatever the sizes around them (a shorter datagram ends a run,
// a longer one starts the next; empty and 60 KiB ones go alone).
func TestBatchWriteMixedSizesInOrder(t *testing.T) {
	send, recv := connectedPair(t)
	recv.SetReadBuffer(4 << 20)
	bc, err := newBatchConn(send)
	if err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	for i, n := range []int{64, 64, 64, 10, 64, 64, 1000, 1000, 1000, 999, 1000, 0, 60 << 10, 60 << 10, 64} {
		bufs = append(bufs, sized(i, n))
	}
	for i := range 70 { // a run longer than a GSO send may be
		bufs = append(bufs, sized(100+i, 100))
	}
	before := gsoSends.Load()
	if _, err := bc.write(&writer{}, bufs, nil, nil); err != nil {
		t.Fatal(err)
	}
	receiveAll(t, recv, bufs)
	if gsoSends.Load() == before {
		t.Error("no GSO send made on loopback, which offers UDP_SEGMENT")
	}
	if b := bc.gsoBelow.Load(); b <= 60<<10 {
		t.Errorf("loopback refused GSO: only below %d bytes now", b)
	}
}

// A socket that refuses UDP_SEGMENT (here: checksums off, which GSO needs;
// the kernel says EINVAL, as for a segment above the MTU) gets its
// datagrams one by one, none lost, and no more GSO sends of that size.
func TestBatchWriteGSORefusedFallsBack(t *testing.T) {
	send, recv := connectedPair(t)
	rc, err := send.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	if err != nil {
		t.Fatal(err)
	}
	bc, err := newBatchConn(send)
	if err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	for i := range 20 {
		bufs = append(bufs, sized(i, 64))
	}
	calls, err := bc.write(&writer{}, bufs, nil, nil)
	if err != nil {
		t.Fatalf("write: %v (the refused GSO send should have been sent again without)", err)
	}
	receiveAll(t, recv, bufs)
	if b := bc.gsoBelow.Load(); b > 64 {
		t.Errorf("the socket refused GSO of 64-byte datagrams, yet GSO stays allowed below %d bytes", b)
	}
	t.Logf("%d system calls that sent", calls)
	failed := gsoFailures.Load()
	if _, err := bc.write(&writer{}, bufs, nil, nil); err != nil {
		t.Fatalf("second write: %v", err)
	}
	receiveAll(t, recv, bufs)
	if gsoFailures.Load() != failed {
		t.Error("a GSO send of the refused size was tried again")
	}
}

// A kept flow's client comes back as text; peerOfAddrPort must give the
// sockaddr the kernel gave, which addrPort read: the family decides
// whether a reply reaches an IPv4 client of an IPv4 socket or a
// v4-mapped one of a dual-stack socket.
func TestPeerOfAddrPortInvertsAddrPort(t *testing.T) {
	for _, s := range []string{"192.0.2.7:53", "[2001:db8::7]:40001", "[::ffff:192.0.2.7]:1", "[fe80::1%3]:65535"} {
		ap := netip.MustParseAddrPort(s)
		p := peerOfAddrPort(ap)
		if got := addrPort(&p.raw); got != ap {
			t.Errorf("addrPort(peerOfAddrPort(%s)) = %s", ap, got)
		}
		want := uint32(unix.SizeofSockaddrInet6)
		if ap.Addr().Is4() {
			want = unix.SizeofSockaddrInet4
		}
		if p.len != want {
			t.Errorf("peerOfAddrPort(%s): length %d, want %d", ap, p.len, want)
		}
	}
}
