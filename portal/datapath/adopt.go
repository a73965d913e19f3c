//go:build linux

package datapath

import (
	"net"
	"os"
	"syscall"
)

// keepConn gives the keeper copies of an established connection's
// sockets (client, endpoint); it returns the ID they are kept under, ""
// when there is no keeper or it did not take them.
func (p *TCPProxy) keepConn(client, endpoint int) string {
	if p.keeper == nil {
		return ""
	}
	return p.keeper.KeepConn("tcp", p.Listen, client, endpoint)
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
		syscall.Shutdown(fd, syscall.SHUT_RDWR)
	}
	p.keeper.DropConn(id)
}

// leftToKeeper reports whether the kept connection id is to be left
// open as it is: the process stops without a successor (its container
// restarts), and the next process takes the connection over from the
// keeper, so neither a drain's deadline nor the idle reaper shuts it.
func (p *TCPProxy) leftToKeeper(id string) bool {
	return id != "" && p.keeper.Detached()
}

// adopt serves the connections a predecessor left with the keeper for
// this listener, as if just accepted and connected: their bytes move on
// (what the keeper held queued in their sockets), on the event loops
// where this proxy uses them.
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
		p.event(p.log().Info()).Int("connections", adopted).Msg("established connections taken over from the socket keeper")
	}
}

// dropKept ends a kept connection this process cannot serve.
func (p *TCPProxy) dropKept(kc KeptConn) { dropKeptConns(p.keeper, []KeptConn{kc}) }

// dropKeptConns ends kept connections: shut down, closed, and dropped by
// the keeper k.
func dropKeptConns(k SocketKeeper, conns []KeptConn) {
	for _, kc := range conns {
		for _, f := range []*os.File{kc.Client, kc.Endpoint} {
			if rc, err := f.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
			}
		}
		kc.Client.Close()
		kc.Endpoint.Close()
		k.DropConn(kc.ID)
	}
}

// adoptOnGoroutines serves a kept connection the goroutine way.
func (p *TCPProxy) adoptOnGoroutines(kc KeptConn) {
	defer p.Limits.ReleaseConn(p.Stats)
	defer func() {
		if r := recover(); r != nil {
			p.event(p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
		}
	}()
	defer func() {
		// The last close: shut down (the keeper's copies hold the
		// sockets) unless they are left to the next process.
		if !p.leftToKeeper(kc.ID) {
			p.dropKept(kc)
			return
		}
		kc.Client.Close()
		kc.Endpoint.Close()
	}()
	cc, err := net.FileConn(kc.Client) // duplicates, in Go's poller
	if err != nil {
		return
	}
	bc, err := net.FileConn(kc.Endpoint)
	if err != nil {
		cc.Close()
		return
	}
	client, ok1 := cc.(*net.TCPConn)
	backend, ok2 := bc.(*net.TCPConn)
	if !ok1 || !ok2 {
		cc.Close()
		bc.Close()
		return
	}
	defer p.Conns.Track(connLeftToKeeper{client, p, kc.ID}).Release()
	defer p.Conns.Track(connLeftToKeeper{backend, p, kc.ID}).Release()
	pr := p.Reaper.Track(client, backend, p.lazyKeepAlive())
	pr.proxy = p
	defer p.Reaper.Untrack(pr)
	toBackend, toClient, _ := splicePair(pr)
	p.Stats.copied(toBackend, toClient)
}

// connLeftToKeeper is a kept connection's socket as a drain closes it:
// not at all while the connection is left to the next process.
type connLeftToKeeper struct {
	*net.TCPConn
	p  *TCPProxy
	id string
}

func (c connLeftToKeeper) Close() error {
	if c.p.leftToKeeper(c.id) {
		return nil
	}
	return c.TCPConn.Close()
}
