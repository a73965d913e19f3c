package datapath

import (
	"fmt"
	"net"
	"os"
)

// SocketKeeper holds copies of the listening sockets in another process
// (portal/keeper), so that they stay open and queue connections and
// datagrams while no kproxy runs (killed, before the kubelet restarts it).
type SocketKeeper interface {
	// Take returns the kept socket for network and address, once, or nil.
	Take(network, address string) *os.File
	// Keep gives the keeper a copy of a socket just opened.
	Keep(network, address string, fd uintptr)
	// Drop makes the keeper close its copy: the socket closes for good.
	Drop(network, address string)
	// DropRest drops the kept sockets not taken by the first state.
	DropRest()

	// KeepConn gives the keeper a copy of a connection's descriptors,
	// served by the listening socket of network and address: the
	// client's socket once accepted; under the same id once the endpoint
	// is connected, the client's socket, the endpoint's and both ends of
	// its two pipes (client to endpoint first). It returns the
	// connection's ID (new when id is ""), "" when not kept.
	KeepConn(network, address, id string, fds ...int) string
	// DropConn makes the keeper close its copies of connection id.
	DropConn(id string)
	// TakeConns returns the connections kept with the listening socket
	// of network and address, once.
	TakeConns(network, address string) []KeptConn
	// KeepFlow gives the keeper a copy of a UDP flow's socket to its
	// endpoint (fd), before the flow's first datagram goes out: the
	// flow of client ("ip:port") on the listening socket of network and
	// address, whose answers are sent with the control message reply.
	// It returns the flow's ID ("" when not kept); DropConn drops it.
	KeepFlow(network, address, client string, reply []byte, fd int) string
	// TakeFlows returns the UDP flows kept with the listening socket of
	// network and address, once.
	TakeFlows(network, address string) []KeptFlow
	// Detached reports that the process stops leaving its sockets and
	// connections to the keeper for the next one.
	Detached() bool
	// KeepsConns reports whether connections and UDP flows are kept
	// (KeepConn, KeepFlow), not only listening sockets.
	KeepsConns() bool
}

// KeptConn is a connection a killed predecessor left with the socket
// keeper: the client's socket and, when its endpoint was connected, the
// endpoint's and its pipes (read and write ends, client to endpoint
// first), which may hold bytes read and not yet written. Without an
// endpoint it is dialed anew: no byte of the client's was read before.
// The keeper still holds copies, under ID.
type KeptConn struct {
	ID               string
	Client, Endpoint *os.File
	Pipes            []*os.File
}

// files are all of kc's descriptors.
func (kc KeptConn) files() []*os.File {
	if kc.Endpoint == nil {
		return []*os.File{kc.Client}
	}
	return append([]*os.File{kc.Client, kc.Endpoint}, kc.Pipes...)
}

// SetKeeper makes s take its sockets from k where k holds them, and give
// k a copy of every socket it opens; the sockets already open are given
// at once, and again whenever k asks (after it restarted).
func (s *Listeners) SetKeeper(k SocketKeeper) {
	s.mu.Lock()
	s.keeper = k
	s.mu.Unlock()
	s.KeepAll()
}

// KeepAll gives the keeper a copy of every open socket.
func (s *Listeners) KeepAll() {
	s.mu.Lock()
	k := s.keeper
	s.mu.Unlock()
	if k == nil {
		return
	}
	for _, l := range s.heldWhere(nil) {
		if !l.closed.Load() {
			l.setKeeper(k)
			k.Keep(l.Spec.Network, l.Spec.Address, l.fd)
		}
	}
}

// openKept opens spec's socket: the one k kept for its address if any,
// else a new one, whose copy k keeps.
func openKept(k SocketKeeper, spec ListenSpec) (*Listener, error) {
	if k == nil {
		return openSocket(spec)
	}
	if f := k.Take(spec.Network, spec.Address); f != nil {
		l, err := openFile(spec, f)
		if err == nil {
			l.setKeeper(k)
			if l.tcp != nil {
				l.adopt = k.TakeConns(spec.Network, spec.Address)
			} else {
				l.adoptFlows = k.TakeFlows(spec.Network, spec.Address)
			}
			return l, nil
		}
		// Not a socket of this spec's after all: the keeper's copy goes.
		k.Drop(spec.Network, spec.Address)
	}
	l, err := openSocket(spec)
	if err != nil {
		return nil, err
	}
	l.setKeeper(k)
	k.Keep(spec.Network, spec.Address, l.fd)
	return l, nil
}

// setKeeper makes k hold copies of l's socket and, for UDP, of its flows'.
func (l *Listener) setKeeper(k SocketKeeper) {
	l.keeper = k
	if l.flows != nil {
		l.flows.setKeeper(k, l.Spec.Address)
	}
}

// openFile makes a Listener of a socket handed over (the keeper's copy),
// and closes f (the Listener holds its own descriptor).
func openFile(spec ListenSpec, f *os.File) (*Listener, error) {
	defer f.Close()
	l := &Listener{Spec: spec}
	var err error
	switch spec.Network {
	case "tcp":
		var ln net.Listener
		if ln, err = net.FileListener(f); err == nil {
			tl, ok := ln.(*net.TCPListener)
			if !ok {
				ln.Close()
				return nil, fmt.Errorf("take kept socket %s/%s: not TCP", spec.Network, spec.Address)
			}
			l.tcp = tl
		}
	case "udp":
		var pc net.PacketConn
		if pc, err = net.FilePacketConn(f); err == nil {
			conn, ok := pc.(*net.UDPConn)
			if !ok {
				pc.Close()
				return nil, fmt.Errorf("take kept socket %s/%s: not UDP", spec.Network, spec.Address)
			}
			l.udp, l.flows = conn, &UDPProxy{pktinfo: enablePktinfo(conn)}
		}
	default:
		return nil, fmt.Errorf("take kept socket %s: %w", spec.Address, ErrUnsupportedProtocol)
	}
	if err == nil {
		err = l.takeFD()
	}
	if err != nil {
		if l.tcp != nil || l.udp != nil {
			l.Close()
		}
		return nil, fmt.Errorf("take kept socket %s/%s: %w", spec.Network, spec.Address, err)
	}
	var local net.Addr
	if l.tcp != nil {
		local = l.tcp.Addr()
	} else {
		local = l.udp.LocalAddr()
	}
	if _, want, _ := net.SplitHostPort(spec.Address); local == nil || !hasPort(local.String(), want) {
		l.keeper = nil // the keeper's copy is not this socket: leave it alone
		l.Close()
		return nil, fmt.Errorf("take kept socket %s/%s: it is bound to %v", spec.Network, spec.Address, local)
	}
	return l, nil
}

func hasPort(addr, port string) bool {
	_, p, err := net.SplitHostPort(addr)
	return err == nil && p == port
}

// EachSocket calls f with every open socket's network, address and
// descriptor (valid for the call: the socket cannot close meanwhile), to
// share them with a successor; it stops at f's first error.
func (s *Listeners) EachSocket(f func(network, address string, fd uintptr) error) error {
	for _, l := range s.heldWhere(nil) {
		rc, err := l.rawConn()
		if err != nil {
			continue // closed since
		}
		var ferr error
		if err := rc.Control(func(fd uintptr) { ferr = f(l.Spec.Network, l.Spec.Address, fd) }); err != nil {
			continue // closed since
		}
		if ferr != nil {
			return ferr
		}
	}
	return nil
}

// KeptFlow is a UDP flow a killed predecessor left with the socket
// keeper: its socket to the endpoint (answers that came meanwhile queued
// in it), the client's address ("ip:port", as the flow table keys it)
// and the control message its answers are sent with (nil: none). The
// keeper still holds a copy, under ID.
type KeptFlow struct {
	ID, Client string
	Reply      []byte
	Endpoint   *os.File
}
