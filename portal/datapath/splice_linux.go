package datapath

import (
	"net"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxSpliceSize is one pipe's capacity and the most one splice moves (as
// Go's own splice).
const maxSpliceSize = 1 << 20

// smallCopySize is the buffer a direction reads into while its chunks are
// small (HAProxy's default buffer size). A read that fills it marks the
// direction as bulk: the next chunks go through a splice pipe.
const smallCopySize = 16 << 10

// spliceCopy copies src to dst. Small chunks (requests, replies, a
// server's greeting) are read into a pooled 16 KiB buffer and written:
// for them two splices through a pipe cost more CPU than a read and a
// write. Once a read fills the buffer the direction is bulk and moves
// through a pipe with splice(2), bytes never crossing into user space,
// until a chunk is small again.
//
// Like Go's io.Copy between TCP connections, but it waits for src to have
// data before it takes a buffer or a pipe, and gives either back once the
// data is through: io.Copy holds its pipe (two fds) for the whole life of
// the connection, so every idle proxied connection costs six fds; here it
// costs its two sockets and no memory. When no fd is left for a pipe it
// copies through the buffer, so connections already proxied keep working
// under fd exhaustion.
//
// via, when set, is the connection's own pipe (the socket keeper holds
// it too: adopt.go), and every chunk goes through it, so that no byte is
// ever only in this process; bytes already in it are written first.
func spliceCopy(dst, src *net.TCPConn, via *splicePipe) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	c := copier{dst: dst, dstRC: dstRC, via: via}
	if via != nil {
		if err := c.flushVia(); err != nil {
			return c.total, err
		}
	}
	// One RawConn.Read for the whole copy: its callback moves chunks until
	// src would block, and returns false to wait for src's readiness.
	err = srcRC.Read(c.run)
	if err == nil {
		err = c.err
	}
	return c.total, err
}

// copier is one direction's copy, run inside src's RawConn.Read.
type copier struct {
	dst      *net.TCPConn
	dstRC    syscall.RawConn
	write    func(fd uintptr) bool // splices the pipe's chunk
	writeBuf func(fd uintptr) bool // writes buf's chunk
	buf      []byte                // the chunk read, still to be written (small chunks)
	inq      inqReader             // reads small chunks
	bulk     bool                  // the last chunk was large: splice the next
	pipe     *splicePipe           // holds the chunk read (spliced)
	via      *splicePipe           // the connection's own pipe, for every chunk (nil: none)
	n        int64                 // the chunk's size
	left     int64                 // what of it is still to be written
	total    int64
	err      error // what ended the copy (nil: end of stream)
	opErr    error
}

// run moves chunks from src (fd) to dst. It returns true when the copy
// is over (end of stream or an error, in c.err), false to wait until src
// is readable. After every chunk it reads again at once, even when the
// last read drained the socket: a read that takes data can also consume
// the FIN behind it, which the next read reports (0) but no readiness
// would announce again (TestDataAndCloseTogetherReachTheClient); unless
// the read said, with TCP_INQ, that nothing and no FIN is left
// (inqReader).
func (c *copier) run(fd uintptr) bool {
	for {
		wait, done := c.chunk(int(fd))
		if done {
			return true
		}
		if wait {
			return false
		}
	}
}

// chunk reads one chunk from src and writes it to dst: into a buffer, or
// into a pipe when the direction is bulk and a pipe can be had. wait:
// src had nothing.
func (c *copier) chunk(fd int) (wait, done bool) {
	if c.via != nil {
		wait, done = c.spliceChunk(fd, c.via)
		c.via.grow(c.n)
		return wait, done
	}
	if c.bulk {
		p, err := getPipe()
		if err == nil {
			return c.spliceChunk(fd, p)
		}
		// No fd for a pipe: this chunk goes through memory.
	}
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	m, more, err := c.inq.read(fd, *buf)
	switch {
	case err == unix.EAGAIN:
		return true, false
	case err != nil:
		c.err = err
		return false, true
	case m == 0:
		return false, true // end of stream
	}
	c.buf, c.opErr = (*buf)[:m], nil
	if c.writeBuf == nil {
		c.writeBuf = c.writeBufFunc()
	}
	err = c.dstRC.Write(c.writeBuf)
	if err == nil {
		err = c.opErr
	}
	c.total += int64(m - len(c.buf))
	c.buf = nil
	if err != nil {
		c.err = err
		return false, true
	}
	c.bulk = m == len(*buf)
	if !c.bulk {
		c.inq.smallChunk(fd)
	}
	// Nothing left and no FIN behind it (TCP_INQ): wait for readiness
	// rather than read again.
	return !more, false
}

// writeBufFunc writes c.buf to dst, waiting while dst is full. A raw
// system call: the socket is non-blocking, so the call never sleeps, and
// the scheduler's bookkeeping around a blocking call (entersyscall, and
// waking its monitor thread) would be a noticeable cost of small writes.
func (c *copier) writeBufFunc() func(fd uintptr) bool {
	return func(fd uintptr) bool {
		for len(c.buf) > 0 {
			m, err := rawWrite(int(fd), c.buf)
			switch {
			case err == unix.EINTR:
			case err == unix.EAGAIN:
				return false // dst is full: wait until it can take more
			case err != nil:
				c.opErr = err
				return true
			default:
				c.buf = c.buf[m:]
			}
		}
		return true
	}
}

// spliceChunk moves one chunk through pipe p.
func (c *copier) spliceChunk(fd int, p *splicePipe) (wait, done bool) {
	var n int64
	var err error
	for {
		n, err = splice64(unix.Splice(fd, nil, p.w, nil, maxSpliceSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == unix.EAGAIN:
		putPipe(p) // still empty: wait without it
		return true, false
	case err != nil:
		putPipe(p)
		c.err = err
		return false, true
	case n == 0:
		putPipe(p)
		return false, true // end of stream
	}
	c.pipe, c.n, c.left, c.opErr = p, n, n, nil
	if c.write == nil { // made for the first bulk chunk: most directions never have one
		c.write = c.writeFunc()
	}
	err = c.dstRC.Write(c.write)
	if err == nil {
		err = c.opErr
	}
	c.total += n - c.left
	c.pipe = nil
	if err != nil {
		if !p.dedicated {
			p.close() // bytes may be left in it: never reuse
		}
		c.err = err
		return false, true
	}
	putPipe(p)
	c.bulk = n >= smallCopySize
	return false, false
}

// writeFunc splices the pipe's chunk into dst, waiting while dst is full.
func (c *copier) writeFunc() func(fd uintptr) bool {
	return func(fd uintptr) bool {
		for c.left > 0 {
			m, err := splice64(unix.Splice(c.pipe.r, nil, int(fd), nil, int(c.left), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
			switch {
			case err == unix.EINTR:
			case err == unix.EAGAIN:
				return false // dst is full: wait until it can take more
			case err != nil:
				c.opErr = err
				return true
			default:
				c.left -= m
			}
		}
		return true
	}
}

// copyBuffers hold small chunks, and any chunk when no pipe can be had.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, smallCopySize)
	return &b
}}

// readRetrying reads a non-blocking socket with a raw system call (see
// writeBufFunc).
func readRetrying(fd int, buf []byte) (int, error) {
	for {
		r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)))
		if e == 0 {
			return int(r), nil
		}
		if e != unix.EINTR {
			return 0, e
		}
	}
}

// rawWrite writes a non-blocking socket with a raw system call.
func rawWrite(fd int, buf []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// splicePipe is a pipe: pooled, or dedicated to one kept connection
// (never pooled, not counted against the bound: the connection owns it).
type splicePipe struct {
	r, w      int
	dedicated bool
	size      int64 // a dedicated pipe's capacity
}

// dedicatedPipeSize is a dedicated pipe's capacity at first: the kernel's
// default, 16 pages. One that a chunk fills grows to maxSpliceSize (grow):
// most connections never move a bulk chunk, and a pipe's ring costs
// kernel memory by its size.
const dedicatedPipeSize = 64 << 10

var pipes sync.Pool

func getPipe() (*splicePipe, error) {
	if p, ok := pipes.Get().(*splicePipe); ok {
		return p, nil
	}
	if !takePipe() {
		pipeMisses.Add(1)
		return nil, errPipeBound
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		livePipes.Add(-1)
		pipeMisses.Add(1)
		return nil, err
	}
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSpliceSize) // a smaller pipe works too
	p := &splicePipe{r: fds[0], w: fds[1]}
	// A pool drops what it holds at GC: close the fds then.
	runtime.SetFinalizer(p, (*splicePipe).close)
	return p, nil
}

func putPipe(p *splicePipe) {
	if !p.dedicated {
		pipes.Put(p)
	}
}

func (p *splicePipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
	if !p.dedicated {
		runtime.SetFinalizer(p, nil)
		livePipes.Add(-1)
	}
}

// newDedicatedPipe opens a pipe of a kept connection's own.
func newDedicatedPipe() (*splicePipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	return &splicePipe{r: fds[0], w: fds[1], dedicated: true, size: dedicatedPipeSize}, nil
}

// grow makes a dedicated pipe that a chunk of n bytes filled as large as
// a pooled one, once (a pipe that cannot grow stays as it is).
func (p *splicePipe) grow(n int64) {
	if !p.dedicated || n < p.size || p.size >= maxSpliceSize {
		return
	}
	if got, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, maxSpliceSize); err == nil {
		p.size = int64(got)
	} else {
		p.size = maxSpliceSize // do not try again
	}
}

// held is how many bytes the pipe holds.
func (p *splicePipe) held() int64 {
	n, err := unix.IoctlGetInt(p.r, unix.TIOCINQ) // FIONREAD
	if err != nil {
		return 0
	}
	return int64(n)
}

// flushVia writes what the connection's own pipe holds (bytes a killed
// predecessor had read and not yet written).
func (c *copier) flushVia() error {
	n := c.via.held()
	if n == 0 {
		return nil
	}
	c.pipe, c.left = c.via, n
	c.write = c.writeFunc()
	err := c.dstRC.Write(c.write)
	if err == nil {
		err = c.opErr
	}
	c.total += n - c.left
	c.pipe = nil
	return err
}

// splice64 is splice(2)'s count as an int64, whichever type x/sys gives
// it on this architecture (int on 32-bit ones).
func splice64[N int | int64](n N, err error) (int64, error) { return int64(n), err }
