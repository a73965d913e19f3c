package portal

import (
	"errors"
	"net"
	"runtime"
	"sync"

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
// write (the profile of a connection per request and of 64-byte echoes
// put most of kproxy's CPU in splice). Once a read fills the buffer the
// direction is bulk and moves through a pipe with splice(2), bytes never
// crossing into user space, until a chunk is small again.
//
// Like Go's io.Copy between TCP connections, but it waits for src to have
// data before it takes a buffer or a pipe, and gives either back once the
// data is through: io.Copy holds its pipe (two fds) for the whole life of
// the connection, so every idle proxied connection cost six fds; here it
// costs its two sockets and no memory. When no fd is left for a pipe it
// copies through the buffer, so connections already proxied keep working
// under fd exhaustion.
func spliceCopy(dst, src *net.TCPConn) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	c := copier{dst: dst, bulk: false}
	// The callbacks are made once per direction, not per chunk.
	read, write := c.readFunc(), c.writeFunc()
	var total int64
	for {
		c.pipe, c.buf, c.n, c.opErr = nil, nil, 0, nil
		err := srcRC.Read(read)
		if err == nil {
			err = c.opErr
		}
		if err != nil || c.n <= 0 { // n == 0: end of stream
			c.release()
			return total, err
		}
		if c.buf != nil {
			m, err := dst.Write((*c.buf)[:c.n])
			c.bulk = c.n == int64(len(*c.buf))
			c.release()
			total += int64(m)
			if err != nil {
				return total, err
			}
			continue
		}
		c.left = c.n
		err = dstRC.Write(write)
		if err == nil {
			err = c.opErr
		}
		total += c.n - c.left
		if err != nil {
			c.pipe.close() // bytes may be left in it: never reuse
			return total, err
		}
		c.bulk = c.n >= smallCopySize
		c.release()
	}
}

// copier is one direction's state between its read and write callbacks.
type copier struct {
	dst   *net.TCPConn
	bulk  bool        // the last chunk was large: splice the next
	pipe  *splicePipe // holds the chunk read (spliced)
	buf   *[]byte     // holds the chunk read (copied)
	n     int64       // the chunk's size
	left  int64       // what of it is still to be written
	opErr error
}

// readFunc reads the next chunk once src is readable: into a buffer, or
// into a pipe when the direction is bulk and a pipe can be had.
func (c *copier) readFunc() func(fd uintptr) bool {
	return func(fd uintptr) bool {
		if c.bulk {
			p, err := getPipe()
			if err == nil {
				for {
					c.n, c.opErr = unix.Splice(int(fd), nil, p.w, nil, maxSpliceSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
					if c.opErr != unix.EINTR {
						break
					}
				}
				if c.opErr == unix.EAGAIN {
					putPipe(p) // still empty: wait without it
					return false
				}
				c.pipe = p
				return true
			}
			// No fd for a pipe: this chunk goes through memory.
		}
		buf := copyBuffers.Get().(*[]byte)
		m, err := readRetrying(int(fd), *buf)
		if err == unix.EAGAIN {
			copyBuffers.Put(buf)
			return false
		}
		c.buf, c.n, c.opErr = buf, int64(max(m, 0)), err
		return true
	}
}

// writeFunc splices the pipe's chunk into dst, waiting while dst is full.
func (c *copier) writeFunc() func(fd uintptr) bool {
	return func(fd uintptr) bool {
		for c.left > 0 {
			m, err := unix.Splice(c.pipe.r, nil, int(fd), nil, int(c.left), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
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

// release gives back the chunk's pipe or buffer (empty by now).
func (c *copier) release() {
	if c.pipe != nil {
		putPipe(c.pipe)
		c.pipe = nil
	}
	if c.buf != nil {
		copyBuffers.Put(c.buf)
		c.buf = nil
	}
}

// copyBuffers hold small chunks, and any chunk when no pipe can be had.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, smallCopySize)
	return &b
}}

func readRetrying(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

type splicePipe struct{ r, w int }

var pipes sync.Pool

func getPipe() (*splicePipe, error) {
	if p, ok := pipes.Get().(*splicePipe); ok {
		return p, nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSpliceSize) // a smaller pipe works too
	p := &splicePipe{r: fds[0], w: fds[1]}
	// A pool drops what it holds at GC: close the fds then.
	runtime.SetFinalizer(p, (*splicePipe).close)
	return p, nil
}

func putPipe(p *splicePipe) { pipes.Put(p) }

func (p *splicePipe) close() {
	runtime.SetFinalizer(p, nil)
	unix.Close(p.r)
	unix.Close(p.w)
}
