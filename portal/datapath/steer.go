package datapath

import (
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/steer"
)

// The contract with the kernel rules lives in portal/steer, which the rules
// import instead of this package. These names re-export it so the data
// path's callers (actors, cmd/kproxy) keep using package datapath alone.

// Portal modes (steer.ModeBind and the others).
const (
	ModeBind     = steer.ModeBind
	ModeNftables = steer.ModeNftables
	ModeIPTables = steer.ModeIPTables
	ModeNetsh    = steer.ModeNetsh
)

// SocketMark marks kproxy's proxy-port sockets in kernel modes (steer.SocketMark).
const SocketMark = steer.SocketMark

// Transparent proxying's mark, routing table and rule priority (steer.TransparentMark).
const (
	TransparentMark  = steer.TransparentMark
	TransparentTable = steer.TransparentTable
)

// ErrUnsupportedProtocol is returned for protocols a userspace proxy cannot
// carry (steer.ErrUnsupportedProtocol).
var ErrUnsupportedProtocol = steer.ErrUnsupportedProtocol

// Network maps a service protocol to a Go network name (steer.Network).
func Network(p messages.Protocol) (string, error) { return steer.Network(p) }

// kernelMode reports whether mode redirects to proxy ports with kernel rules.
func kernelMode(mode string) bool { return steer.KernelMode(mode) }
