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

// spliceCopy copies src to dst through a pipe with splice(2), like Go's
// io.Copy between TCP connections, with one difference: it waits for src
// to have data before it takes a pipe, and gives the pipe back once the
// data is through. io.Copy holds its pipe (two fds) for the whole life of
// the connection, so every idle proxied connection cost six fds; here it
// costs its two sockets.
func spliceCopy(dst, src *net.TCPConn) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		var p *splicePipe
		var n int64
		var buf *[]byte // set when no pipe could be had (fd exhaustion)
		var opErr error
		err := srcRC.Read(func(fd uintptr) bool {
			p, opErr = getPipe()
			if opErr != nil {
				// No fd for a pipe: move this chunk through memory, so
				// connections already proxied keep working.
				buf = copyBuffers.Get().(*[]byte)
				m, err := readRetrying(int(fd), *buf)
				if errors.Is(err, unix.EAGAIN) {
					copyBuffers.Put(buf)
					buf = nil
					return false
				}
				n, opErr = int64(m), err
				return true
			}
			for {
				n, opErr = unix.Splice(int(fd), nil, p.w, nil, maxSpliceSize, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if !errors.Is(opErr, unix.EINTR) {
					break
				}
			}
			if errors.Is(opErr, unix.EAGAIN) {
				putPipe(p) // still empty: wait without it
				p = nil
				return false
			}
			return true
		})
		if err == nil {
			err = opErr
		}
		if err != nil || n <= 0 { // n == 0: end of stream
			if p != nil {
				putPipe(p) // empty: nothing was moved into it
			}
			if buf != nil {
				copyBuffers.Put(buf)
			}
			return total, err
		}
		if buf != nil {
			m, err := dst.Write((*buf)[:n])
			copyBuffers.Put(buf)
			total += int64(m)
			if err != nil {
				return total, err
			}
			continue
		}
		left := n
		err = dstRC.Write(func(fd uintptr) bool {
			for left > 0 {
				m, err := unix.Splice(p.r, nil, int(fd), nil, int(left), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				switch {
				case errors.Is(err, unix.EINTR):
				case errors.Is(err, unix.EAGAIN):
					return false // dst is full: wait until it can take more
				case err != nil:
					opErr = err
					return true
				default:
					left -= m
				}
			}
			return true
		})
		if err == nil {
			err = opErr
		}
		total += n - left
		if err != nil {
			p.close() // bytes may be left in it: never reuse
			return total, err
		}
		putPipe(p)
	}
}

// copyBuffers serve the fallback copy when no pipe can be had.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
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
