//go:build linux

package datapath

import (
	"io"
	"net"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// With a socket keeper (portal/keeper), every TCP connection has copies
// of its descriptors there from its accept on: the client's socket at
// once; once the endpoint is connected, both sockets and two pipes of the
// connection's own, through which every byte then moves (splice: from a
// socket into the pipe, from the pipe into the other socket). So every
// byte is always in a socket or in a pipe the keeper holds, and a killed
// kproxy breaks no connection: the next process adopts each, writes what
// its pipes hold, and moves on from there. A client whose endpoint was
// not connected yet is dialed anew (its bytes are read only once it is).
// A connection that cannot have its pipes is not kept: a kill ends it,
// it never loses bytes.

// keepConn gives the keeper copies of a connection's descriptors; it
// returns the ID they are kept under, "" when there is no keeper or it
// did not take them.
func (p *TCPProxy) keepConn(id string, fds ...int) string {
	if !p.keepsConns {
		return ""
	}
	return p.keeper.KeepConn("tcp", p.Listen, id, fds...)
}

// keepConnected keeps a connection whose endpoint is connected, with two
// new pipes of its own; it returns its ID and the pipes, or "" and none
// when it is not kept (then the client's entry, id, is dropped).
func (p *TCPProxy) keepConnected(id string, client, endpoint int) (string, [2]*splicePipe) {
	var kp [2]*splicePipe
	if !p.keepsConns {
		p.dropID(id) // an adopted client's, when this process keeps none
		return "", kp
	}
	for i := range kp {
		var err error
		if kp[i], err = newDedicatedPipe(); err != nil {
			if i == 1 {
				kp[0].close()
			}
			p.dropID(id)
			return "", [2]*splicePipe{}
		}
	}
	kept := p.keepConn(id, client, endpoint, kp[0].r, kp[0].w, kp[1].r, kp[1].w)
	if kept == "" {
		kp[0].close()
		kp[1].close()
		p.dropID(id)
		return "", [2]*splicePipe{}
	}
	return kept, kp
}

func (p *TCPProxy) dropID(id string) {
	if id != "" {
		p.keeper.DropConn(id)
	}
}

// unkeep ends a kept connection whose descriptors this process is about
// to close: the keeper's copies would hold both sockets open, so they are
// shut down first (the peers get their FINs now, as from a last close),
// then the keeper closes its copies.
func (p *TCPProxy) unkeep(id string, fds ...int) {
	if id == "" {
		return
	}
	for _, fd := range fds {
		unix.Shutdown(fd, unix.SHUT_RDWR)
	}
	p.keeper.DropConn(id)
}

// resetKept resets the client's socket fd, kept under id: SO_LINGER 0 is
// the socket's, so whichever close is the last, ours or the keeper's,
// sends the RST.
func (p *TCPProxy) resetKept(fd int, id string) {
	resetFD(fd)
	p.dropID(id)
}

// leftToKeeper reports whether the kept connection id is to be left
// open as it is: the process stops without a successor (its container
// restarts), and the next process takes the connection over from the
// keeper, so neither a drain's deadline nor the idle reaper shuts it.
func (p *TCPProxy) leftToKeeper(id string) bool {
	return id != "" && p.keeper.Detached()
}

// keptRef is a goroutine-served connection's place with the keeper: its
// ID once kept (set by the serving goroutine, read by a drain's Close)
// and its pipes.
type keptRef struct {
	kept atomic.Bool
	id   string
	kp   [2]*splicePipe
}

// keptRef returns the place of a connection kept under id ("": not yet),
// nil without a keeper (a nil *keptRef does nothing).
func (p *TCPProxy) keptRef(id string) *keptRef {
	if p.keeper == nil || !p.keepsConns && id == "" {
		return nil
	}
	r := &keptRef{id: id}
	r.kept.Store(id != "")
	return r
}

// pipes are the connection's own pipes (none when not kept).
func (r *keptRef) pipes() [2]*splicePipe {
	if r == nil {
		return [2]*splicePipe{}
	}
	return r.kp
}

// keep keeps the connection once its endpoint is connected; its copies
// then go through r.kp.
func (r *keptRef) keep(p *TCPProxy, client, backend *net.TCPConn) {
	if r == nil {
		return
	}
	rc, err1 := client.SyscallConn()
	rb, err2 := backend.SyscallConn()
	if err1 != nil || err2 != nil {
		return
	}
	id := ""
	rc.Control(func(c uintptr) {
		rb.Control(func(b uintptr) { id, r.kp = p.keepConnected(r.id, int(c), int(b)) })
	})
	if id == "" {
		r.kept.Store(false)
		return
	}
	r.id = id
	r.kept.Store(true)
}

// reset resets client, kept or not.
func (r *keptRef) reset(p *TCPProxy, client *net.TCPConn) {
	reset(client) // SO_LINGER 0: the last close, ours or the keeper's, resets
	if r != nil {
		r.drop(p)
	}
}

// drop makes the keeper close its copies once the sockets are closed
// here (its close is then the last, which sends what a last close
// sends), unless the connection is left to the next process; the pipes
// close here either way (the keeper's copies keep what they hold).
func (r *keptRef) drop(p *TCPProxy) {
	if r == nil {
		return
	}
	if r.kept.Load() && !p.leftToKeeper(r.id) {
		p.keeper.DropConn(r.id)
	}
	for _, kp := range r.kp {
		if kp != nil {
			kp.close()
		}
	}
	r.kp = [2]*splicePipe{}
}

// left reports whether the connection is left to the next process.
func (r *keptRef) left(p *TCPProxy) bool { return r != nil && r.kept.Load() && p.leftToKeeper(r.id) }

// keptGuard is a kept connection's socket as a drain or the idle reaper
// closes it: not at all while the connection is left to the next
// process.
type keptGuard struct {
	*net.TCPConn
	p   *TCPProxy
	ref *keptRef
}

// guard is c as the connection tracker closes it: c itself without a
// keeper.
func (p *TCPProxy) guard(c *net.TCPConn, ref *keptRef) io.Closer {
	if p.keeper == nil {
		return c
	}
	return keptGuard{c, p, ref}
}

func (c keptGuard) Close() error {
	if c.ref.left(c.p) {
		return nil
	}
	return c.TCPConn.Close()
}

// keepAccepted gives the keeper the client's socket of a connection just
// accepted on the goroutine path; the ID rides in its dial seed.
func (p *TCPProxy) keepAccepted(conn *net.TCPConn) string {
	if !p.keepsConns {
		return ""
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return ""
	}
	id := ""
	rc.Control(func(fd uintptr) { id = p.keepConn("", int(fd)) })
	return id
}

// adopt serves the connections a predecessor left with the keeper for
// this listener: those connected move their bytes on (first what their
// pipes hold, then what queued in their sockets meanwhile), the others
// are dialed as if just accepted; on the event loops where this proxy
// uses them.
func (p *TCPProxy) adopt(conns []KeptConn) {
	adopted := 0
	for _, kc := range conns {
		if !p.Limits.AcquireConn(p.Stats) {
			p.dropKept(kc)
			continue
		}
		adopted++
		if p.usesLoops() && p.adoptOnLoop(kc) {
			continue
		}
		go p.adoptOnGoroutines(kc)
	}
	if adopted > 0 {
		p.event(p.log().Info()).Int("connections", adopted).Msg("connections taken over from the socket keeper")
	}
}

// dropKept ends a kept connection this process cannot serve.
func (p *TCPProxy) dropKept(kc KeptConn) { dropKeptConns(p.keeper, []KeptConn{kc}) }

// dropKeptConns ends kept connections: shut down, closed, and dropped by
// the keeper k.
func dropKeptConns(k SocketKeeper, conns []KeptConn) {
	for _, kc := range conns {
		for i, f := range kc.files() {
			if rc, err := f.SyscallConn(); err == nil && i < 2 {
				rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
			}
			f.Close()
		}
		k.DropConn(kc.ID)
	}
}

// dupFiles duplicates the descriptors of files (the callers own the
// duplicates; the files are closed); false when one cannot be.
func dupFiles(files []*os.File) ([]int, bool) {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fd := -1
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(d uintptr) { fd, _ = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) })
		}
		if fd < 0 {
			for _, d := range fds {
				unix.Close(d)
			}
			return nil, false
		}
		fds = append(fds, fd)
	}
	return fds, true
}

// pipesOf makes the connection's own pipes of their descriptors.
func pipesOf(fds []int) [2]*splicePipe {
	if len(fds) != 4 {
		return [2]*splicePipe{}
	}
	kp := [2]*splicePipe{{r: fds[0], w: fds[1], dedicated: true}, {r: fds[2], w: fds[3], dedicated: true}}
	for _, p := range kp {
		p.size = dedicatedPipeSize
		if n, err := unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0); err == nil {
			p.size = int64(n)
		}
	}
	return kp
}

// adoptOnGoroutines serves a kept connection the goroutine way.
func (p *TCPProxy) adoptOnGoroutines(kc KeptConn) {
	fds, ok := dupFiles(kc.files())
	if !ok || kc.Endpoint != nil && len(fds) != 6 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		p.Limits.ReleaseConn(p.Stats)
		p.dropID(kc.ID)
		return
	}
	client, err := fdConn(fds[0])
	if err != nil {
		for _, fd := range fds[1:] {
			unix.Close(fd)
		}
		p.Limits.ReleaseConn(p.Stats)
		p.dropID(kc.ID)
		return
	}
	if kc.Endpoint == nil {
		p.Conns.DialStart()
		p.handle(client, dialSeed{kept: kc.ID})
		return
	}
	defer p.Limits.ReleaseConn(p.Stats)
	ref := p.keptRef(kc.ID)
	ref.kp = pipesOf(fds[2:])
	defer func() {
		if r := recover(); r != nil {
			p.event(p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
		}
		ref.drop(p) // both sockets are closed here: the keeper's close is the last
	}()
	backend, err := fdConn(fds[1])
	if err != nil {
		client.Close()
		return
	}
	defer p.Conns.Track(p.guard(client, ref)).Release()
	defer p.Conns.Track(p.guard(backend, ref)).Release()
	pr := p.Reaper.Track(client, backend, p.lazyKeepAlive())
	pr.proxy, pr.kp = p, ref.kp
	defer p.Reaper.Untrack(pr)
	toBackend, toClient, _ := splicePair(pr)
	p.Stats.copied(toBackend, toClient)
}

// fdConn makes a TCPConn of a socket descriptor, which it takes.
func fdConn(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, os.ErrInvalid
	}
	return tc, nil
}
