//go:build !linux

package datapath

import (
	"net"
	"time"
)

// EventLoopsSupported: the event loops need Linux's epoll; elsewhere every
// connection goes the goroutine way.
const EventLoopsSupported = false

func (p *TCPProxy) usesLoops() bool { return false }

func (p *TCPProxy) serveLoops(*net.TCPListener, <-chan struct{}) (bool, error) { return false, nil }

func (p *TCPProxy) setAcceptDeadline(time.Time) {}

func (p *TCPProxy) stopLoopAccept() {}

// loopConn and loopAcceptor exist on Linux only.
type loopConn struct{}

type loopAcceptor struct{}

func (*loopConn) Close() error { return nil }

func (r *IdleReaper) sweepLoopConn(*pair) {}
