package datapath

// The event loops' dial: a nonblocking connect, finished by a loop when
// it is still in progress, handed back to the goroutine data path when
// it takes longer or fails after all.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dialForLoopRecovering is dialForLoop on a worker: a panic costs this
// connection only.
func (p *TCPProxy) dialForLoopRecovering(cfd int, client netip.Addr, kept string) {
	settled := false
	defer func() {
		if r := recover(); r != nil && !settled {
			p.event(p.log().Error()).Interface("panic", r).Msg("tcp connection handler panicked")
			p.refuse(cfd, kept)
		}
	}()
	p.dialForLoop(cfd, client, kept)
	settled = true
}

// dialForLoop picks endpoints until one connects or is connecting, as
// dial does for refusals; a connect in progress finishes on a loop. The
// keeper holds the client's socket under kept ("": not kept).
func (p *TCPProxy) dialForLoop(cfd int, client netip.Addr, kept string) {
	d := dialSeed{kept: kept}
	clientIP := ipText(client)
	for {
		pick, err := d.pick(p, clientIP)
		if err != nil {
			p.event(p.log().Debug()).Err(err).Str("client", clientIP).Msg("no endpoint reachable, resetting connection")
			p.refuse(cfd, kept)
			return
		}
		ap, perr := netip.ParseAddrPort(pick.Endpoint)
		if perr != nil || ap.Addr().Zone() != "" {
			// Not a plain address: Go's dialer knows what to do with it.
			p.handBack(cfd, d)
			return
		}
		src, _ := transparentSource(p.Transparent, p.PodClients, client, pick)
		bfd, connected, err := p.connectRaw(ap, src)
		if err == nil {
			c := &loopConn{fd: [2]int32{int32(cfd), int32(bfd)}, p: p, clientIP: clientIP, endpoint: pick.Endpoint,
				report: pick.Report, seed: d, keptID: kept}
			if connected {
				if pick.Report {
					p.Picker.Dialed(pick.Endpoint, nil)
				}
				c.keptID, c.kp = p.keepConnected(kept, cfd, bfd)
				c.established()
			} else {
				c.startConnecting()
			}
			return
		}
		if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
			// The node's trouble, not the endpoint's.
			p.event(p.log().Warn()).Err(err).Str("client", clientIP).Msg("cannot open a socket to the endpoint, resetting connection")
			p.refuse(cfd, kept)
			return
		}
		p.Picker.Dialed(pick.Endpoint, err)
		p.Stats.dialFailed()
		p.event(p.log().Debug()).Err(err).Str("endpoint", pick.Endpoint).Msg("dial endpoint failed, trying next")
		d.refusedBy(pick.Endpoint, err)
	}
}

// connectRaw opens a nonblocking socket to ap and connects it, from src
// when valid (transparentSource: the client's address). A local endpoint
// (loopback, a veth) answers within the first connect, which still says
// EINPROGRESS; a second one says it is done (or refused). When the
// kernel refuses src (no source port left toward the endpoint for that
// address, no CAP_NET_ADMIN), the node's address is used, counted and
// logged as the goroutine path's dialFrom does.
func (p *TCPProxy) connectRaw(ap netip.AddrPort, src netip.Addr) (fd int, connected bool, err error) {
	var sa unix.Sockaddr
	family := unix.AF_INET6
	if a := ap.Addr(); a.Is4() || a.Is4In6() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.Unmap().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, os.NewSyscallError("socket", err)
	}
	// As Go's TCPConn: small writes go at once.
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if p.KeepAlive > 0 && p.lazyKeepAlive() == 0 {
		setKeepAliveFD(fd, p.KeepAlive)
	}
	if src.IsValid() {
		if err := bindTransparent(fd, family == unix.AF_INET6, src); err != nil {
			unix.Close(fd)
			return p.connectFromNode(ap, src, err)
		}
	}
	connected, err = connectFD(fd, sa)
	if err == nil {
		if src.IsValid() {
			transparentConns.Add(1)
		}
		return fd, connected, nil
	}
	unix.Close(fd)
	if src.IsValid() && err == unix.EADDRNOTAVAIL {
		// No source port left toward the endpoint for the client's
		// address (IP_BIND_ADDRESS_NO_PORT leaves the port to connect).
		return p.connectFromNode(ap, src, err)
	}
	return -1, false, os.NewSyscallError("connect", err)
}

// connectFromNode is connectRaw from the node's address, after the
// kernel refused the client's (src) with err: counted and logged.
func (p *TCPProxy) connectFromNode(ap netip.AddrPort, src netip.Addr, err error) (int, bool, error) {
	transparentDialFailed.Add(1)
	if ok, held := transparentFailures.Allow(); ok {
		p.event(p.log().Warn()).Err(err).Str("endpoint", ap.String()).Str("client", src.String()).Int64("suppressed", held).Msg("dial from the client's address failed, dialing from the node's")
	}
	return p.connectRaw(ap, netip.Addr{})
}

// connectFD connects fd to sa: done (connected), or in progress.
func connectFD(fd int, sa unix.Sockaddr) (connected bool, err error) {
	err = unix.Connect(fd, sa)
	if err == unix.EINPROGRESS && connectInLoop.Load() {
		return false, nil
	}
	if err == unix.EINPROGRESS {
		switch err = unix.Connect(fd, sa); err {
		case nil, unix.EISCONN:
			return true, nil
		case unix.EALREADY, unix.EINPROGRESS:
			return false, nil
		}
	}
	return err == nil, err
}

// established tracks c and hands it to the loops (its connect is done).
func (c *loopConn) established() {
	p := c.p
	c.tracked = p.Conns.Track(c)
	c.pair = p.Reaper.trackLoop(c, p.lazyKeepAlive())
	p.Conns.DialDone()
	c.register(phaseOpen, nil)
}

// startConnecting hands c to the loops to finish its connect within the
// first step of the dial ladder; a loop sees the outcome as the
// endpoint's socket becoming writable or failing.
func (c *loopConn) startConnecting() {
	c.tracked = c.p.Conns.Track(c)
	c.register(phaseConnecting, func() { c.timer = time.AfterFunc(dialTimeouts[0], c.connectTimedOut) })
}

// register adds c to the loops' set under its mutex (a loop may see the
// first socket's event before the second is registered, and waits for
// this: loop.event), running then, if set, while still holding it, and
// moves it to phase next. A loop that refuses it resets the client.
func (c *loopConn) register(next connPhase, then func()) {
	c.mu.Lock()
	err := addConn(c)
	if err == nil {
		if then != nil {
			then()
		}
		c.moveLocked(phaseRegistering, next)
		c.mu.Unlock()
		return
	}
	c.moveLocked(phaseRegistering, phaseFinished)
	c.mu.Unlock()
	p := c.p
	p.event(p.log().Warn()).Err(err).Msg("event loop refused a connection, resetting it")
	unix.Close(int(c.fd[1]))
	p.resetKept(int(c.fd[0]), c.keptID)
	if next == phaseConnecting {
		p.Conns.DialDone()
	}
	c.release()
}

// connectEvent is an event of c while its connect is in progress (on
// a loop's goroutine).
func (c *loopConn) connectEvent(l *loop, ev unix.EpollEvent) {
	c.mu.Lock()
	if c.phase.Load() != phaseConnecting {
		c.mu.Unlock()
		return // handed back or finished meanwhile
	}
	if ev.Fd == c.fd[0] {
		if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.dir[0].fin = true
		}
		c.mu.Unlock()
		return // the client's bytes wait until the endpoint is there
	}
	soErr, err := unix.GetsockoptInt(int(c.fd[1]), unix.SOL_SOCKET, unix.SO_ERROR)
	if err == nil && soErr != 0 {
		err = os.NewSyscallError("connect", syscall.Errno(soErr))
	}
	if err == nil && ev.Events&unix.EPOLLOUT == 0 {
		c.mu.Unlock()
		return
	}
	if err == nil && ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		err = os.NewSyscallError("connect", unix.ECONNREFUSED)
	}
	if err != nil {
		c.moveLocked(phaseConnecting, phaseHandedBack)
		c.mu.Unlock()
		c.timer.Stop()
		seed := c.seed
		seed.refusedBy(c.endpoint, err)
		c.handBackFailed(seed)
		return
	}
	c.timer.Stop()
	c.keptID, c.kp = c.p.keepConnected(c.keptID, int(c.fd[0]), int(c.fd[1]))
	c.moveLocked(phaseConnecting, phaseOpen)
	c.mu.Unlock()
	p := c.p
	if c.report {
		p.Picker.Dialed(c.endpoint, nil)
	}
	c.pair = p.Reaper.trackLoop(c, p.lazyKeepAlive())
	p.Conns.DialDone()
	l.pump(c, 0)
	l.pump(c, 1)
}

// connectTimedOut hands a connect that took its first ladder step back
// to the goroutine data path, which goes on with the ladder.
func (c *loopConn) connectTimedOut() {
	c.mu.Lock()
	if !c.moveLocked(phaseConnecting, phaseHandedBack) {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	err := fmt.Errorf("dial tcp %s: %w", c.endpoint, os.ErrDeadlineExceeded)
	seed := c.seed
	seed.timedOut(c.endpoint, err)
	c.handBackFailed(seed)
}

// handBackFailed takes c's sockets out of the loops' set (c is handed
// back, so no goroutine touches them any more), closes the endpoint's, reports
// its failure and hands the client to the goroutine data path, which
// dials on from seed.
func (c *loopConn) handBackFailed(seed dialSeed) {
	p := c.p
	for _, fd := range c.fd {
		byFD[fd].Store(nil)
		unix.EpollCtl(loopSet.fd, unix.EPOLL_CTL_DEL, int(fd), nil)
	}
	unix.Close(int(c.fd[1]))
	p.Picker.Dialed(c.endpoint, seed.lastErr)
	p.Stats.dialFailed()
	p.event(p.log().Debug()).Err(seed.lastErr).Str("endpoint", c.endpoint).Msg("dial endpoint failed, trying next")
	c.tracked.Release()
	if c.dir[0].fin && clientGoneFD(int(c.fd[0])) {
		p.refuse(int(c.fd[0]), c.keptID)
		return
	}
	seed.kept = c.keptID
	p.handBack(int(c.fd[0]), seed)
}

// handBack gives an accepted socket, counted as dialing, to the
// goroutine data path, which dials on from seed.
func (p *TCPProxy) handBack(cfd int, seed dialSeed) {
	f := os.NewFile(uintptr(cfd), "")
	nc, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	if err != nil {
		p.event(p.log().Warn()).Err(err).Msg("cannot hand a connection to the goroutine data path, resetting it")
		p.Conns.DialDone()
		p.Limits.ReleaseConn(p.Stats)
		if seed.kept != "" {
			p.keeper.DropConn(seed.kept)
		}
		return
	}
	workers.Go(task{p: p, conn: nc.(*net.TCPConn), seed: seed})
}

// adoptOnLoop hands a kept connection to the loops, as one just
// connected (what its pipes hold is written first), or one just accepted;
// false when the loops cannot take it.
func (p *TCPProxy) adoptOnLoop(kc KeptConn) bool {
	if theLoops() != nil || kc.Endpoint != nil && len(kc.Pipes) != 4 {
		return false
	}
	fds, ok := dupFiles(kc.files()) // the loops own their descriptors; the keeper's copies stay
	if !ok {
		p.Limits.ReleaseConn(p.Stats)
		p.dropID(kc.ID)
		return true
	}
	// As the loops' listeners give their connections (nodelay_linux.go),
	// whichever kproxy accepted this one.
	setNoDelay(fds[0])
	var client netip.Addr
	if sa, err := unix.Getpeername(fds[0]); err == nil {
		client = sockaddrAddrPort(sa).Addr()
	}
	clientIP := ipText(client)
	p.Conns.DialStart()
	if kc.Endpoint == nil {
		// Accepted, never connected: dialed now, as if just accepted.
		workers.Go(task{fn: func() { p.dialForLoopRecovering(fds[0], client, kc.ID) }})
		return true
	}
	c := &loopConn{fd: [2]int32{int32(fds[0]), int32(fds[1])}, p: p, keptID: kc.ID, clientIP: clientIP, kp: pipesOf(fds[2:])}
	if sa, err := unix.Getpeername(fds[1]); err == nil {
		if ap := sockaddrAddrPort(sa); ap.IsValid() {
			c.endpoint = ap.String()
		}
	}
	for d := range c.dir {
		if n := c.kp[d].held(); n > 0 {
			c.dir[d].pipe, c.dir[d].inPipe = c.kp[d], n
		}
	}
	c.established()
	return true
}

// refuse resets an accepted client that gets no endpoint, and gives back
// what its accept took (its dial, its connection's place).
func (p *TCPProxy) refuse(cfd int, kept string) {
	p.Conns.DialDone()
	p.Limits.ReleaseConn(p.Stats)
	p.resetKept(cfd, kept)
}

// sockaddrAddrPort is a socket address as an address and port.
func sockaddrAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// ipText is a client's address as the Picker takes it ("" unknown).
func ipText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// resetFD closes with SO_LINGER 0 so the peer gets an RST at once.
func resetFD(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
	unix.Close(fd)
}
