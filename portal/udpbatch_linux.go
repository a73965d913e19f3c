package portal

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// udpBatch is how many datagrams one recvmmsg or sendmmsg carries at most.
// Past a few dozen the system call's own cost is spread thin and the
// per-datagram work of the network stack is what is left.
const udpBatch = 32

// batchBuffers are read batches: udpBatch buffers of MaxDatagram (a
// datagram longer than its buffer would be cut, and any may be 64 KiB).
// A batch is taken only once a socket is readable and given back before
// the next wait, so a waiting socket or flow holds none and the pool
// holds about one per running reader.
var batchBuffers = sync.Pool{New: func() any {
	b := &readBatch{}
	backing := make([]byte, udpBatch*MaxDatagram)
	for i := range b.bufs {
		b.bufs[i] = backing[i*MaxDatagram : (i+1)*MaxDatagram : (i+1)*MaxDatagram]
		b.msgs[i].Buffers = b.bufs[i : i+1]
	}
	return b
}}

type readBatch struct {
	bufs [udpBatch][]byte
	oob  [udpBatch][]byte
	msgs [udpBatch]ipv4.Message
	ds   [udpBatch]datagram
}

// batchConn reads and writes a UDP socket many datagrams per system call
// (recvmmsg, sendmmsg through golang.org/x/net's batch API).
type batchConn struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	// pc is x/net's batch API over the socket's descriptor, used only
	// inside rc's callbacks: there the descriptor cannot be closed, and
	// the wait for readiness is rc's, done without buffers.
	pc *ipv4.PacketConn
	// noGSO is set once the socket refused a UDP_SEGMENT send.
	noGSO atomic.Bool
}

func newBatchConn(conn *net.UDPConn) (*batchConn, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp batch: %w", err)
	}
	var fd uintptr
	if err := rc.Control(func(s uintptr) { fd = s }); err != nil {
		return nil, fmt.Errorf("udp batch: %w", err)
	}
	return &batchConn{conn: conn, rc: rc, pc: ipv4.NewPacketConn(&inCallback{UDPConn: conn, fd: fd})}, nil
}

// inCallback hands x/net the descriptor as-is: its reads and writes run
// once, with MSG_DONTWAIT, inside a callback of the socket's own RawConn.
type inCallback struct {
	*net.UDPConn
	fd uintptr
}

func (c *inCallback) SyscallConn() (syscall.RawConn, error) { return onceRaw(c.fd), nil }

type onceRaw uintptr

func (r onceRaw) Control(f func(uintptr)) error    { f(uintptr(r)); return nil }
func (r onceRaw) Read(f func(uintptr) bool) error  { f(uintptr(r)); return nil }
func (r onceRaw) Write(f func(uintptr) bool) error { f(uintptr(r)); return nil }

// read waits until the socket is readable, then reads up to udpBatch
// datagrams with one recvmmsg and hands them to handle before the batch's
// buffers go back. oobSize is the control-message space per datagram;
// from says whether senders' addresses are wanted (a connected socket's
// are its peer). It returns the socket's error (deadline, closed) or the
// read's.
func (c *batchConn) read(oobSize int, from bool, handle func([]datagram)) error {
	var opErr error
	err := c.rc.Read(func(uintptr) bool {
		b := batchBuffers.Get().(*readBatch)
		defer batchBuffers.Put(b)
		for i := range b.msgs {
			m := &b.msgs[i]
			if len(b.oob[i]) < oobSize {
				b.oob[i] = make([]byte, oobSize)
			}
			m.OOB = b.oob[i][:oobSize]
			m.Addr, m.N, m.NN, m.Flags = nil, 0, 0, 0
		}
		for {
			n, err := c.pc.ReadBatch(b.msgs[:], unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN):
				return false // nothing yet: wait for readability, holding no batch
			case err != nil:
				opErr = err
				return true
			}
			ds := b.ds[:0]
			for i := range n {
				m := &b.msgs[i]
				d := datagram{b: b.bufs[i][:m.N], oob: m.OOB[:m.NN]}
				if from {
					if ua, ok := m.Addr.(*net.UDPAddr); ok {
						d.from = ua.AddrPort()
					}
				}
				ds = append(ds, d)
			}
			handle(ds)
			return true
		}
	})
	if err != nil {
		return err
	}
	return opErr
}

// gsoMaxSegments and gsoMaxBytes bound one UDP_SEGMENT send: the
// kernel's UDP_MAX_SEGMENTS (64 before Linux 6.10, 128 since), and an IP
// packet's 64 KiB less the IPv6 and UDP headers.
const (
	gsoMaxSegments = 64
	gsoMaxBytes    = 65535 - 40 - 8
)

// writer is the scratch a writer keeps to send batches without
// allocating per datagram.
type writer struct {
	msgs [udpBatch]ipv4.Message
	// per message: the datagrams it carries (a range of the caller's),
	// whether it is one GSO send, its control message
	from, to [udpBatch]int
	gso      [udpBatch]bool
	oob      [udpBatch][]byte
}

// pack fills w.msgs from bufs: runs of equal-sized datagrams (the last of
// a run may be shorter) become one UDP_SEGMENT send when gso allows, the
// kernel cutting them into datagrams after a single pass through the
// stack; the rest go one datagram per message. It returns the messages
// and how many datagrams they carry.
func (w *writer) pack(bufs [][]byte, to net.Addr, oob []byte, gso bool) (msgs, used int) {
	i := 0
	for i < len(bufs) && msgs < udpBatch {
		j := i + 1
		size := len(bufs[i])
		if gso && size > 0 {
			total := size
			for j < len(bufs) && j-i < gsoMaxSegments && len(bufs[j]) == size && total+size <= gsoMaxBytes {
				total += size
				j++
			}
			if j < len(bufs) && j-i < gsoMaxSegments && len(bufs[j]) > 0 && len(bufs[j]) < size && total+len(bufs[j]) <= gsoMaxBytes {
				j++ // a shorter last segment ends a run
			}
		}
		m := &w.msgs[msgs]
		*m = ipv4.Message{Buffers: bufs[i:j], OOB: oob, Addr: to}
		w.from[msgs], w.to[msgs], w.gso[msgs] = i, j, j-i > 1
		if w.gso[msgs] {
			w.oob[msgs] = appendSegmentCmsg(append(w.oob[msgs][:0], oob...), size)
			m.OOB = w.oob[msgs]
		}
		msgs++
		i = j
	}
	return msgs, i
}

// appendSegmentCmsg appends the UDP_SEGMENT control message: the size of
// each datagram a GSO send is cut into.
func appendSegmentCmsg(b []byte, size int) []byte {
	n := len(b)
	b = append(b, make([]byte, unix.CmsgSpace(2))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[n]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[n+unix.CmsgLen(0)])) = uint16(size)
	return b
}

// gsoSends counts the GSO sends made, for tests.
var gsoSends atomic.Int64

// gsoRefused reports an error by which the kernel or the route says no to
// UDP_SEGMENT on this socket (no support, no checksum offload, a segment
// above the MTU): its datagrams are sent one by one from then on.
func gsoRefused(err error) bool {
	for _, e := range []syscall.Errno{unix.EIO, unix.EINVAL, unix.EMSGSIZE, unix.ENOPROTOOPT, unix.EOPNOTSUPP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// write sends bufs in order, up to udpBatch messages per sendmmsg, to
// addr (nil on a connected socket) with control message oob; runs of
// equal-sized datagrams go as one GSO send each, where the socket takes
// them. A datagram the kernel refuses is skipped, as a lone write's error
// would lose only it; the first such error is returned. calls counts the
// system calls that sent.
func (c *batchConn) write(w *writer, bufs [][]byte, addr *net.UDPAddr, oob []byte) (calls int, firstErr error) {
	var to net.Addr
	if addr != nil {
		to = addr
	}
	for len(bufs) > 0 {
		k, used := w.pack(bufs, to, oob, !c.noGSO.Load())
		ms := w.msgs[:k]
		var retry [udpBatch]bool // GSO sends refused: their datagrams go again one by one
		sent := 0
		err := c.rc.Write(func(uintptr) bool {
			for sent < k {
				n, err := c.pc.WriteBatch(ms[sent:], unix.MSG_DONTWAIT)
				switch {
				case errors.Is(err, syscall.EINTR):
				case errors.Is(err, syscall.EAGAIN):
					return false // the send buffer is full: wait for room
				case err != nil && w.gso[sent]:
					if gsoRefused(err) {
						c.noGSO.Store(true)
					}
					retry[sent] = true
					sent++
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
					sent++ // that datagram is lost; the rest go on
				default:
					for m := sent; m < sent+n; m++ {
						if w.gso[m] {
							gsoSends.Add(1)
						}
					}
					sent += n
					calls++
				}
			}
			return true
		})
		for i := range ms {
			ms[i] = ipv4.Message{} // hold no caller's buffer
		}
		if err != nil {
			return calls, err // the socket is closed or broke: the rest are lost
		}
		for m := range k {
			if retry[m] {
				more, err := c.writeEach(bufs[w.from[m]:w.to[m]], to, oob)
				calls += more
				if firstErr == nil {
					firstErr = err
				}
			}
		}
		bufs = bufs[used:]
	}
	return calls, firstErr
}

// writeEach sends bufs one datagram per message, for a GSO send the
// kernel refused (rare: its own scratch).
func (c *batchConn) writeEach(bufs [][]byte, to net.Addr, oob []byte) (calls int, firstErr error) {
	var ms [udpBatch]ipv4.Message
	for len(bufs) > 0 {
		k := min(len(bufs), udpBatch)
		for i := range k {
			ms[i] = ipv4.Message{Buffers: bufs[i : i+1], OOB: oob, Addr: to}
		}
		sent := 0
		err := c.rc.Write(func(uintptr) bool {
			for sent < k {
				n, err := c.pc.WriteBatch(ms[sent:k], unix.MSG_DONTWAIT)
				switch {
				case errors.Is(err, syscall.EINTR):
				case errors.Is(err, syscall.EAGAIN):
					return false
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
					sent++
				default:
					sent += n
					calls++
				}
			}
			return true
		})
		if err != nil {
			return calls, err
		}
		bufs = bufs[k:]
	}
	return calls, firstErr
}

// batched reports that reads and writes carry many datagrams per call.
const batched = true
