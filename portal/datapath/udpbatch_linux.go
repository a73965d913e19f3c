package datapath

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpBatch is how many datagrams one recvmmsg or sendmmsg carries at most.
// Past a few dozen the system call's own cost is spread thin and the
// per-datagram work of the network stack is what is left.
const udpBatch = 32

// mmsghdr is the kernel's struct mmsghdr (the padding after Len on 64-bit
// platforms is Go's alignment too).
type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// readBatch is what one recvmmsg fills: udpBatch buffers of MaxDatagram
// (a datagram longer than its buffer would be cut, and any may be 64 KiB),
// the senders' addresses and control messages. The headers point into it
// once, when it is made.
type readBatch struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	bufs  [][]byte
	oob   [][]byte
	ds    []datagram
	// The headers are set for this reader's kind; the first dirty of
	// them were written back by the kernel and need setting again.
	from    bool
	oobSize int
	dirty   int
}

// batchBuffers are read batches, singleBuffers batches of one, for the
// reads that expect one datagram. A batch is taken only once a socket is
// readable and given back before the next wait, so a waiting socket or
// flow holds none and each pool holds about one per running reader.
//
// At most maxBatchesOut batches are out at once; a reader beyond them
// reads one datagram. Many flows each finding a reply waiting (a flood on
// a busy machine) would otherwise each take a batch of 2 MiB, and the
// pool keeps what it made until two garbage collections, which an idle
// process may not run for minutes.
var (
	batchBuffers  = sync.Pool{New: func() any { return newReadBatch(udpBatch) }}
	singleBuffers = sync.Pool{New: func() any { return newReadBatch(1) }}
	batchesOut    atomic.Int32
)

// maxBatchesOut: a batch helps only a reader that runs, and at most
// GOMAXPROCS run at once; twice that leaves room for readers preempted
// inside their handler.
var maxBatchesOut = int32(2 * runtime.GOMAXPROCS(0))

func newReadBatch(slots int) *readBatch {
	b := &readBatch{dirty: slots, hdrs: make([]mmsghdr, slots), iovs: make([]unix.Iovec, slots),
		names: make([]unix.RawSockaddrInet6, slots), bufs: make([][]byte, slots), oob: make([][]byte, slots),
		ds: make([]datagram, slots)}
	backing := make([]byte, slots*MaxDatagram)
	for i := range b.bufs {
		b.bufs[i] = backing[i*MaxDatagram : (i+1)*MaxDatagram : (i+1)*MaxDatagram]
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(MaxDatagram)
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.SetIovlen(1)
	}
	return b
}

// peerAddr is a datagram's sender as the kernel gave it, to send replies
// to it as it is (family, scope) without converting it back.
type peerAddr struct {
	raw unix.RawSockaddrInet6 // large enough for either family
	len uint32
}

// sender is where a datagram read from a listener came from, as the
// kernel wrote it; valid while the datagram is.
type sender struct {
	name    *unix.RawSockaddrInet6
	namelen uint32
}

// peerOf is the sender of d, a datagram read from a listener.
func peerOf(d *datagram) *peerAddr { return &peerAddr{raw: *d.name, len: d.namelen} }

// addrPort turns the kernel's sockaddr into the flow table's key: IPv4
// senders of an IPv4 socket as IPv4, those of a dual-stack one v4-mapped,
// as Go's ReadMsgUDPAddrPort gives them; a scope as its index.
func addrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	port := uint16(sa.Port>>8) | uint16(sa.Port<<8) // network order as stored
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, port)
	}
	return netip.AddrPort{}
}

// peerOfAddrPort is ap as the kernel gives a sender, the inverse of
// addrPort: IPv4 as AF_INET, any other (v4-mapped ones of a dual-stack
// socket too) as AF_INET6, a zone as its scope index.
func peerOfAddrPort(ap netip.AddrPort) *peerAddr {
	var p peerAddr
	port := ap.Port()
	port = port>>8 | port<<8 // network order as stored
	a := ap.Addr()
	if a.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&p.raw))
		sa4.Family, sa4.Port, sa4.Addr = unix.AF_INET, port, a.As4()
		p.len = unix.SizeofSockaddrInet4
		return &p
	}
	p.raw.Family, p.raw.Port, p.raw.Addr = unix.AF_INET6, port, a.As16()
	if z, err := strconv.ParseUint(a.Zone(), 10, 32); err == nil {
		p.raw.Scope_id = uint32(z)
	}
	p.len = unix.SizeofSockaddrInet6
	return &p
}

// batchConn reads and writes a UDP socket many datagrams per system call
// (recvmmsg, sendmmsg, UDP_SEGMENT), inside the socket's own RawConn
// callbacks: there the descriptor cannot be closed under the call, and
// the wait for readiness is Go's poller's, done without buffers.
type batchConn struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	// gsoBelow bounds the datagram sizes sent with UDP_SEGMENT: lowered
	// to the size of a run the socket refused because of its size (a
	// segment above the path's MTU), to 0 when it refused GSO itself.
	gsoBelow atomic.Int64
	// gro: UDP_GRO is on, reads may return datagrams coalesced.
	gro bool
}

func newBatchConn(conn *net.UDPConn) (*batchConn, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp batch: %w", err)
	}
	c := &batchConn{conn: conn, rc: rc, gro: enableGRO(rc)}
	c.gsoBelow.Store(gsoMaxBytes + 1)
	return c, nil
}

// reader is what one socket's reader keeps between reads; its own, apart
// from the batchConn that writers share. Its callback is bound once, so a
// read allocates nothing.
type reader struct {
	// hot is set while reads find datagrams waiting without a wait for
	// readiness, or found more than one: only then is a batch asked for. A datagram that comes
	// alone (a request and its answer) is read with recvmsg: recvmmsg
	// tries one more datagram than it gets and, as sendmmsg, offers to
	// reschedule after each, which made such traffic cost a fifth more.
	hot bool

	// one read's arguments and outcome
	fn      func(uintptr) bool
	oobSize int
	from    bool
	handle  func([]datagram)
	waited  bool
	err     error
}

// read waits until the socket is readable, then reads up to udpBatch
// datagrams with one recvmmsg and hands them to handle before the batch's
// buffers go back. oobSize is the control-message space per datagram;
// from says whether senders' addresses are wanted (a connected socket's
// are its peer). It returns the socket's error (deadline, closed) or the
// read's.
func (c *batchConn) read(rd *reader, oobSize int, from bool, handle func([]datagram)) error {
	if rd.fn == nil {
		rd.fn = rd.attempt
	}
	if c.gro {
		oobSize += groOOBSize
	}
	rd.oobSize, rd.from, rd.handle, rd.waited, rd.err = oobSize, from, handle, false, nil
	err := c.rc.Read(rd.fn)
	rd.handle = nil
	if err != nil {
		return err
	}
	return rd.err
}

// attempt is one try of a read, inside the socket's RawConn.Read: false
// to wait for readability.
func (rd *reader) attempt(fd uintptr) bool {
	oobSize, from := rd.oobSize, rd.from
	pool := &singleBuffers
	if rd.hot {
		if batchesOut.Add(1) <= maxBatchesOut {
			pool = &batchBuffers
		}
		defer batchesOut.Add(-1)
	}
	b := pool.Get().(*readBatch)
	defer pool.Put(b)
	vlen := len(b.hdrs)
	reset := b.dirty
	if b.from != from || b.oobSize != oobSize {
		reset, b.from, b.oobSize = vlen, from, oobSize
	}
	b.dirty = 0
	for i := range reset {
		h := &b.hdrs[i].Hdr
		h.Name, h.Namelen = nil, 0
		if from {
			h.Name, h.Namelen = (*byte)(unsafe.Pointer(&b.names[i])), unix.SizeofSockaddrInet6
		}
		h.Control = nil
		h.SetControllen(0)
		if oobSize > 0 {
			if len(b.oob[i]) < oobSize {
				b.oob[i] = make([]byte, oobSize)
			}
			h.Control = &b.oob[i][0]
			h.SetControllen(oobSize)
		}
		h.Flags = 0
	}
	for {
		var r uintptr
		var e syscall.Errno
		if vlen == 1 {
			r, _, e = unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0].Hdr)), unix.MSG_DONTWAIT)
			b.hdrs[0].Len, r = uint32(r), 1
		} else {
			r, _, e = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(vlen), unix.MSG_DONTWAIT, 0, 0)
		}
		switch e {
		case 0:
			rd.hot = !rd.waited || r > 1
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			rd.waited = true
			return false // nothing yet (the kernel wrote nothing back): wait for readability, holding no batch
		default:
			rd.err = fmt.Errorf("recvmmsg: %w", e)
			b.dirty = vlen
			return true
		}
		n := int(r)
		b.dirty = n
		ds := b.ds[:0]
		for i := range n {
			h := &b.hdrs[i]
			d := datagram{b: b.bufs[i][:h.Len]}
			if oobSize > 0 {
				d.oob = b.oob[i][:h.Hdr.Controllen]
			}
			if from {
				d.name, d.namelen = &b.names[i], h.Hdr.Namelen
				d.from = addrPort(&b.names[i])
			}
			if seg := groSegment(d.oob); seg > 0 && len(d.b) > seg {
				groReads.Add(1)
				ds = appendSegments(ds, d, seg)
			} else {
				ds = append(ds, d)
			}
		}
		rd.handle(ds)
		clear(ds)
		b.ds = ds // grown by coalesced reads: kept for the next
		runtime.KeepAlive(b)
		return true
	}
}

// gsoMaxBytes bounds one UDP_SEGMENT send: an IP packet's 64 KiB less the
// IPv6 and UDP headers. The kernel's UDP_MAX_SEGMENTS (64 before Linux
// 6.10) is above udpBatch, the most a send here carries.
const gsoMaxBytes = 65535 - 40 - 8

// writer is the scratch a writer keeps to send batches without
// allocating: the headers and, per message, the datagrams it carries (a
// range of the caller's), whether it is one GSO send and its control
// message.
type writer struct {
	hdrs     [udpBatch]mmsghdr
	iovs     [udpBatch]unix.Iovec
	from, to [udpBatch]int
	gso      [udpBatch]bool
	oob      [udpBatch][]byte

	// one send's progress, for its callback, bound once
	fn      func(uintptr) bool
	k, sent int
	calls   int
	err     error
	retry   [udpBatch]bool // GSO sends refused: their datagrams go again one by one
	below   int            // gsoBelow as the refusals of this send leave it
	size    [udpBatch]int  // a GSO send's segment size
}

// pack fills w.hdrs from bufs: runs of equal-sized datagrams (the last of
// a run may be shorter) become one UDP_SEGMENT send when shorter than gsoBelow, the
// kernel cutting them into datagrams after a single pass through the
// stack; the rest go one datagram per message. It returns the messages
// and how many datagrams they carry.
func (w *writer) pack(bufs [][]byte, to *peerAddr, oob []byte, gsoBelow int) (msgs, used int) {
	i := 0
	for i < len(bufs) && i < udpBatch {
		j := i + 1
		size := len(bufs[i])
		if size > 0 && size < gsoBelow {
			total := size
			for j < len(bufs) && j < udpBatch && len(bufs[j]) == size && total+size <= gsoMaxBytes {
				total += size
				j++
			}
			if j < len(bufs) && j < udpBatch && len(bufs[j]) > 0 && len(bufs[j]) < size && total+len(bufs[j]) <= gsoMaxBytes {
				j++ // a shorter last segment ends a run
			}
		}
		for k := i; k < j; k++ {
			w.iovs[k].Base = nil
			if len(bufs[k]) > 0 {
				w.iovs[k].Base = &bufs[k][0]
			}
			w.iovs[k].SetLen(len(bufs[k]))
		}
		h := &w.hdrs[msgs]
		*h = mmsghdr{}
		h.Hdr.Iov = &w.iovs[i]
		h.Hdr.SetIovlen(j - i)
		if to != nil {
			h.Hdr.Name, h.Hdr.Namelen = (*byte)(unsafe.Pointer(&to.raw)), to.len
		}
		w.from[msgs], w.to[msgs], w.gso[msgs], w.size[msgs] = i, j, j-i > 1, size
		control := oob
		if w.gso[msgs] {
			w.oob[msgs] = appendSegmentCmsg(append(w.oob[msgs][:0], oob...), size)
			control = w.oob[msgs]
		}
		if len(control) > 0 {
			h.Hdr.Control = &control[0]
			h.Hdr.SetControllen(len(control))
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

// attempt sends what is left of w's messages, inside the socket's
// RawConn.Write: false to wait for room.
func (w *writer) attempt(fd uintptr) bool {
	for w.sent < w.k {
		var r uintptr
		var e syscall.Errno
		if w.k-w.sent == 1 { // sendmmsg would add a reschedule point per message
			_, _, e = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.sent].Hdr)), unix.MSG_DONTWAIT)
			r = 1
		} else {
			r, _, e = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.sent])), uintptr(w.k-w.sent), unix.MSG_DONTWAIT, 0, 0)
		}
		switch {
		case e == unix.EINTR:
		case e == unix.EAGAIN:
			return false // the send buffer is full: wait for room
		case e != 0 && w.gso[w.sent]:
			w.below = min(w.below, gsoLimitAfter(e, w.size[w.sent]))
			gsoFailures.Add(1)
			w.retry[w.sent] = true
			w.sent++
		case e != 0:
			if w.err == nil {
				w.err = fmt.Errorf("sendmmsg: %w", e)
			}
			w.sent++ // that datagram is lost; the rest go on
		default:
			for m := w.sent; m < w.sent+int(r); m++ {
				if w.gso[m] {
					gsoSends.Add(1)
				}
			}
			w.sent += int(r)
			w.calls++
		}
	}
	return true
}

// gsoSends and gsoFailures count the GSO sends made and failed, and
// groReads the reads that returned datagrams coalesced, for tests.
var gsoSends, gsoFailures, groReads atomic.Int64

// gsoLimitAfter is the bound on GSO segment sizes after a GSO send of
// segments of size failed with e: none after the kernel or the device
// refused GSO itself (a kernel before 4.18, no checksum offload, checksums
// off on the socket); below size after a refusal that may be the size's
// (a segment above the path's MTU); unchanged after any other error.
func gsoLimitAfter(e syscall.Errno, size int) int {
	switch e {
	case unix.EIO, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
		return 0
	case unix.EINVAL, unix.EMSGSIZE:
		return size
	}
	return gsoMaxBytes + 1
}

// write sends bufs in order, up to udpBatch messages per sendmmsg, to
// addr (nil on a connected socket) with control message oob; runs of
// equal-sized datagrams go as one GSO send each, where the socket takes
// them. A datagram the kernel refuses is skipped, as a lone write's error
// would lose only it; the first such error is returned. calls counts the
// system calls that sent.
func (c *batchConn) write(w *writer, bufs [][]byte, to *peerAddr, oob []byte) (calls int, firstErr error) {
	return c.send(w, bufs, to, oob, int(c.gsoBelow.Load()))
}

// send is write, with GSO only for datagrams shorter than gsoBelow.
func (c *batchConn) send(w *writer, bufs [][]byte, to *peerAddr, oob []byte, gsoBelow int) (calls int, firstErr error) {
	for len(bufs) > 0 {
		k, used := w.pack(bufs, to, oob, gsoBelow)
		w.k, w.sent, w.calls, w.err, w.below = k, 0, 0, nil, gsoBelow
		clear(w.retry[:k])
		if w.fn == nil {
			w.fn = w.attempt
		}
		err := c.rc.Write(w.fn)
		calls += w.calls
		if firstErr == nil {
			firstErr = w.err
		}
		for cur := c.gsoBelow.Load(); int64(w.below) < cur && !c.gsoBelow.CompareAndSwap(cur, int64(w.below)); {
			cur = c.gsoBelow.Load()
		}
		runtime.KeepAlive(bufs)
		runtime.KeepAlive(to)
		clear(w.iovs[:used]) // hold none of the caller's buffers
		clear(w.hdrs[:k])
		if err != nil {
			return calls, err // the socket is closed or broke: the rest are lost
		}
		for m := range k {
			if w.retry[m] {
				// its own scratch: w's ranges are still being read (rare)
				more, err := c.send(&writer{}, bufs[w.from[m]:w.to[m]], to, oob, 0)
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

// batched reports that reads and writes carry many datagrams per call.
const batched = true
