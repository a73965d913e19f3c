package datapath

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// inqAfter is how many small chunks one direction moves before it asks
// the kernel, with TCP_INQ, how much is left after each read. A short
// connection (a greeting, a request, its answer) moves at most two each
// way and never pays the setsockopt; a connection that carries more
// saves a read per chunk from then on.
const inqAfter = 3

// inqReader reads a socket with TCP_INQ on: each read also says how many
// bytes the socket still holds, and a nonzero count once the peer's FIN
// has come (Linux 4.18, tcp_inq_hint), so a read that took everything
// need not be followed by one that fails with EAGAIN. Without it a copy
// must read again after every chunk: a read that takes the last data can
// also take the FIN behind it, which only the next read reports and no
// readiness announces again.
type inqReader struct {
	on    bool // TCP_INQ is on for the source socket
	tried bool // the setsockopt was made (on or refused)
	small int  // small chunks read so far
	msg   unix.Msghdr
	iov   unix.Iovec
	oob   [unix.SizeofCmsghdr + 8]byte // one TCP_CM_INQ message (an int, aligned)
}

// smallChunk counts a small chunk read from fd and turns TCP_INQ on once
// the direction has moved inqAfter of them.
func (r *inqReader) smallChunk(fd int) {
	if r.tried {
		return
	}
	if r.small++; r.small < inqAfter {
		return
	}
	r.tried = true
	r.on = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_INQ, 1) == nil
}

// read reads into buf (a raw system call, as readRetrying) and reports
// whether the socket may hold more: bytes, a FIN, or a count it did not
// give.
func (r *inqReader) read(fd int, buf []byte) (n int, more bool, err error) {
	if !r.on {
		n, err = readRetrying(fd, buf)
		return n, true, err
	}
	r.iov.Base = unsafe.SliceData(buf)
	r.iov.SetLen(len(buf))
	r.msg.Iov = &r.iov
	r.msg.SetIovlen(1)
	r.msg.Control = &r.oob[0]
	for {
		r.msg.SetControllen(len(r.oob))
		m, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.msg)), 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, true, e
		}
		n = int(m)
		break
	}
	more = true
	if r.msg.Controllen >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&r.oob[0]))
		if h.Level == unix.IPPROTO_TCP && h.Type == unix.TCP_CM_INQ && uint64(h.Len) >= uint64(unix.CmsgLen(4)) {
			more = *(*int32)(unsafe.Pointer(&r.oob[unix.CmsgLen(0)])) != 0
		}
	}
	return n, more, nil
}
