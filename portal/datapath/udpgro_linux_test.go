package datapath

import (
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A sender's GSO batch reaches a UDP_GRO socket whole on loopback; the
// read cuts it back into the same datagrams, in order (the last one of a
// run shorter), and a datagram alone stays alone.
func TestBatchReadCutsCoalescedDatagrams(t *testing.T) {
	send, recv := connectedPair(t)
	recv.SetReadBuffer(4 << 20)
	out, err := newBatchConn(send)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newBatchConn(recv)
	if err != nil {
		t.Fatal(err)
	}
	if !in.gro {
		t.Skip("kernel without UDP_GRO")
	}
	var want [][]byte
	for i := range 40 {
		want = append(want, sized(i, 1200))
	}
	want = append(want, sized(40, 700), sized(41, 1500))
	before := groReads.Load()
	if _, err := out.write(&writer{}, want, nil, nil); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	var rd reader
	recv.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < len(want) {
		if err := in.read(&rd, 0, false, func(ds []datagram) {
			for _, d := range ds {
				got = append(got, append([]byte(nil), d.b...))
			}
		}); err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(got), len(want), err)
		}
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("datagram %d: got %d bytes %.8q, want %d bytes %.8q", i, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
	if groReads.Load() == before {
		t.Error("no read returned coalesced datagrams: UDP_GRO is off or the sender's batch was cut before the socket")
	}
}

// gsoSender sends batches on c with UDP_SEGMENT and leaves its reads
// alone (no UDP_GRO): a peer that sends as QUIC stacks do.
func gsoSender(t *testing.T, c *net.UDPConn) *batchConn {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	bc := &batchConn{conn: c, rc: rc}
	bc.gsoBelow.Store(gsoMaxBytes + 1)
	return bc
}

// peerFor is addr (IPv4) as the kernel writes a sender's address.
func peerFor(addr *net.UDPAddr) *peerAddr {
	p := &peerAddr{len: unix.SizeofSockaddrInet4}
	sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&p.raw))
	sa.Family = unix.AF_INET
	sa.Port = uint16(addr.Port>>8) | uint16(addr.Port<<8)
	copy(sa.Addr[:], addr.IP.To4())
	return p
}

// Through the proxy: a client that sends with UDP_SEGMENT (as QUIC stacks
// do) has its batch read whole and sent on whole; an endpoint that
// answers the same way has its batch read whole too; each side gets
// every datagram, in order. On a wildcard listener each read also carries
// the destination address (IP_PKTINFO), beside the segment size, and the
// answers leave from the address the client sent to.
func TestUDPProxyCarriesCoalescedBatchesBothWays(t *testing.T) {
	probe, _ := connectedPair(t)
	if bc, err := newBatchConn(probe); err != nil || !bc.gro {
		t.Skip("kernel without UDP_GRO")
	}
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		t.Run(listen, func(t *testing.T) { coalescedBothWays(t, listen) })
	}
}

func coalescedBothWays(t *testing.T, listen string) {
	var want [][]byte
	for i := range 30 {
		want = append(want, sized(i, 1000))
	}
	// The endpoint reads the datagrams one by one and answers them all
	// in one GSO batch.
	backend, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	backend.SetReadBuffer(4 << 20)
	answer := gsoSender(t, backend)
	go func() {
		buf := make([]byte, MaxDatagram)
		backend.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, addr, err := backend.ReadFromUDP(buf) // the flow's first datagram
		if err != nil {
			return
		}
		backend.WriteToUDP(buf[:n], addr)
		var echoes [][]byte
		var from *net.UDPAddr
		for len(echoes) < len(want) {
			backend.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, addr, err := backend.ReadFromUDP(buf)
			if err != nil {
				return
			}
			from = addr
			echoes = append(echoes, append([]byte(nil), buf[:n]...))
		}
		answer.write(&writer{}, echoes, peerFor(from), nil)
	}()

	l, err := Open(ListenSpec{Network: "udp", Address: listen})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Serve(parkOptions(backend.LocalAddr().String()))
	port := l.udp.LocalAddr().(*net.UDPAddr).Port

	// Connected: only answers from the address it sent to reach it.
	client, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.SetReadBuffer(4 << 20)
	// A first datagram and its answer: the proxy serves, the flow is up.
	hello := sized(99, 10)
	if _, err := client.Write(hello); err != nil {
		t.Fatal(err)
	}
	receiveAll(t, client, [][]byte{hello})
	before := groReads.Load()
	if _, err := gsoSender(t, client).write(&writer{}, want, nil, nil); err != nil {
		t.Fatal(err)
	}
	receiveAll(t, client, want)
	if n := groReads.Load() - before; n < 2 {
		t.Errorf("%d coalesced reads, want at least 2: the client's batch and the endpoint's", n)
	}
}
