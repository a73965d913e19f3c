//go:build !linux

package datapath

import (
	"net"
	"net/netip"
)

// Elsewhere there is no recvmmsg or sendmmsg: a datagram per system call.
const udpBatch = 1

const batched = false

// sender needs nothing beyond the datagram's from here.
type sender struct{}

// peerAddr is a client as replies are sent to it.
type peerAddr struct{ addr *net.UDPAddr }

func peerOf(d *datagram) *peerAddr { return &peerAddr{net.UDPAddrFromAddrPort(d.from)} }

type batchConn struct {
	conn *net.UDPConn
	ds   [1]datagram
	oob  []byte
}

func newBatchConn(conn *net.UDPConn) (*batchConn, error) { return &batchConn{conn: conn}, nil }

// read reads one datagram and hands it to handle. A connected socket
// waits without a buffer where the platform allows (readDatagram); a
// listener holds a pooled one while it waits for a sender's datagram.
type reader struct{}

func (c *batchConn) read(_ *reader, oobSize int, from bool, handle func([]datagram)) error {
	if !from {
		return readDatagram(c.conn, func(b []byte) error {
			c.ds[0] = datagram{b: b}
			handle(c.ds[:])
			return nil
		})
	}
	bp := datagramBuffers.Get().(*[]byte)
	defer datagramBuffers.Put(bp)
	if len(c.oob) < oobSize {
		c.oob = make([]byte, oobSize)
	}
	n, oobn, _, client, err := c.conn.ReadMsgUDPAddrPort(*bp, c.oob[:oobSize])
	if err != nil {
		return err
	}
	c.ds[0] = datagram{b: (*bp)[:n], oob: c.oob[:oobn], from: client}
	handle(c.ds[:])
	return nil
}

type writer struct{}

// write sends bufs one datagram per call; a refused one is skipped and
// the first error returned.
func (c *batchConn) write(_ *writer, bufs [][]byte, to *peerAddr, oob []byte) (calls int, firstErr error) {
	var addr *net.UDPAddr
	if to != nil {
		addr = to.addr
	}
	for _, b := range bufs {
		var err error
		if addr == nil && oob == nil {
			_, err = c.conn.Write(b)
		} else {
			_, _, err = c.conn.WriteMsgUDP(b, oob, addr)
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		calls++
	}
	return calls, firstErr
}

// peerOfAddrPort is ap as replies are sent to it.
func peerOfAddrPort(ap netip.AddrPort) *peerAddr { return &peerAddr{net.UDPAddrFromAddrPort(ap)} }
